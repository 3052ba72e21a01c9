"""The action host's operator routes under ``/v1/host/`` (host-spec §2.6, §2.7, §1.Y-13; ADRs 0048, 0049).

- ``POST /v1/host/invocations`` (token; ``Idempotency-Key`` header): submit an action, dispatched to the workers.
  It needs the server's ``--app`` (the actions): without it, 409 ``host-not-configured``.
- ``GET /v1/host/invocations``: newest first, filtered by status, action, tenant and space; keyset pagination by
  ``cursor`` (the ``next_cursor`` of the previous page).
- ``GET /v1/host/invocations/{invocationId}``: the invocation with its steps, its events in log order, both
  reconciliation logs, its resolution, its command's lease timeline and what to look up at the provider.
- ``POST /v1/host/invocations/{invocationId}/resolve`` (token): an operator's resolution (ADR 0048).
- ``GET /v1/host/reconciliation-queue``: the invocations awaiting an operator, oldest first.
- ``GET /v1/host/approvals``: the open approval requests, oldest first (ADR 0052).
- ``POST /v1/host/invocations/{invocationId}/approve`` and ``/reject`` (token): an approver's decision (host-spec
  P; ADRs 0044, 0052). Approving resumes the invocation in this server process, so it needs ``--app`` (else 409
  ``host-not-configured``); rejecting writes the verdict only and works without it.

Reads and resolution need no ``--app``: they use the server's host when it has one, else a host over the store
with no actions (which reads and resolves exactly the same).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from fencepost.api import host_models as m
from fencepost.api import problems
from fencepost.api.context import ApiContext
from fencepost.api.routes import Ctx, Read, Write, _errors
from fencepost.core.canonical import parse_input_json
from fencepost.core.errors import InvalidInput, NotFound
from fencepost.core.statuses import InvocationStatus
from fencepost.host import Dispatch, Host

PREFIX = "/v1/host"
NO_ACTIONS = ("this server knows no actions: start it with `fencepost serve --app module:attribute` (your Host) "
              "to submit invocations; reads and resolutions work without it")

InvocationId = Annotated[str, Path(alias="invocationId", min_length=1, max_length=100,
                                   description="Invocation id, e.g. inv_...")]
Limit = Annotated[int, Query(ge=1, le=1000, description="At most this many.")]
Scope = Annotated[str | None, Query(min_length=1, max_length=200)]

host_invocations = APIRouter(prefix=PREFIX, tags=["action host"])


async def _one_value_per_key(request: Request) -> None:
    """Refuse a JSON body that names a key twice in one object: JSON parsers keep the last value, which for
    ``params`` or ``evidence`` silently drops the first (the CLI refuses it as well; a break-it trial).

    Raises:
        InvalidInput: a duplicate key (problem ``invalid-input``, 422). Malformed JSON is left to the body
            model's own validation.
    """
    try:
        parse_input_json(await request.body())
    except ValueError as error:
        if "duplicate key" in str(error):
            raise InvalidInput(f"the request body has a {error}") from None


def _one_idempotency_key(request: Request) -> None:
    """Refuse a request that sends ``Idempotency-Key`` more than once: the framework keeps one of them, so the
    client could not know which key its invocation is under (a verification trial).

    Raises:
        InvalidInput: two or more such headers (422).
    """
    if len(request.headers.getlist("idempotency-key")) > 1:
        raise InvalidInput("send one Idempotency-Key header, not several")


OneValuePerKey = [Depends(_one_value_per_key), Depends(_one_idempotency_key)]


#: The Idempotency-Key header's value: printable ASCII, no outer spaces (ADR 0104). A header's bytes reach the
#: server as Latin-1, so "ключ" would be stored as mojibake and never match the same key given to the CLI or the
#: Python API: two invocations, two charges (a break-it trial). Refused with 422 instead.
KEY_HEADER_PATTERN = r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$"


def _host(ctx: ApiContext) -> Host:
    return ctx.host if ctx.host is not None else Host(ctx.store)


@host_invocations.post(
    "/invocations", status_code=202, response_model=m.Invocation, dependencies=[*Write, *OneValuePerKey],
    responses=_errors(401, 409, 422, 503),
    summary="Submit an action under an Idempotency-Key, dispatched to the workers (a replay returns the same "
            "invocation)")
def submit_invocation(body: m.SubmitInvocation, ctx: Ctx, response: Response,
                      idempotency_key: Annotated[str, Header(alias="Idempotency-Key", min_length=1, max_length=255,
                                                             pattern=KEY_HEADER_PATTERN,
                                                             description="Makes a retried submit safe: the same "
                                                                         "key returns the same invocation. "
                                                                         "Printable ASCII only (HTTP carries "
                                                                         "no text encoding for header values; "
                                                                         "percent-encode other text).")]) -> Any:
    if ctx.host is None:
        return problems.problem("host-not-configured", NO_ACTIONS, instance=f"{PREFIX}/invocations")
    view = ctx.host.submit(body.action_id, body.params, actor=body.actor, authority=body.authority,
                           idempotency_key=idempotency_key, tenant=body.tenant, space=body.space,
                           version=body.version, mode=Dispatch())
    ctx.work_added()
    response.headers["Location"] = f"{PREFIX}/invocations/{view.id}"
    # Whether the key named an invocation submitted before (returned as it is, nothing ran again): the same
    # header Stripe's API sends, so a client tells a replay from a new submission (a new-user trial could not).
    response.headers["Idempotent-Replayed"] = "true" if view.replayed else "false"
    return view.as_json()


@host_invocations.get(
    "/invocations", response_model=m.InvocationPage, dependencies=Read, responses=_errors(401, 422, 503),
    summary="List invocations, newest first, with filters and cursor pagination")
def list_invocations(ctx: Ctx, status: Annotated[InvocationStatus | None, Query()] = None,
                     action_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
                     tenant: Scope = None, space: Scope = None, limit: Limit = 50,
                     cursor: Annotated[str | None, Query(min_length=1, max_length=100,
                                                         description="next_cursor of the previous page.")] = None
                     ) -> dict[str, Any]:
    host = _host(ctx)
    if cursor is not None:
        try:
            host.get(cursor)
        except NotFound:
            raise InvalidInput("cursor names no invocation: pass the next_cursor of a previous page") from None
    views = host.page(tenant=tenant, space=space, status=status, action_id=action_id, after=cursor,
                      limit=limit + 1)
    more = len(views) > limit
    page = views[:limit]
    return {"items": [v.as_json() for v in page], "next_cursor": page[-1].id if more and page else None}


@host_invocations.get(
    "/invocations/{invocationId}", response_model=m.InvocationDetail, dependencies=Read,
    responses=_errors(401, 404, 422, 503),
    summary="One invocation: steps, events in order, reconciliation records, resolution, lease timeline")
def show_invocation(invocation_id: InvocationId, ctx: Ctx) -> dict[str, Any]:
    view, told = _host(ctx).history(invocation_id)
    return {**view.as_json(), "events": told["events"], "reconciliations": told["reconciliations"],
            "lease_timeline": told["lease_timeline"], "lookups": told["lookups"]}


@host_invocations.post(
    "/invocations/{invocationId}/resolve", response_model=m.Invocation, dependencies=[*Write, *OneValuePerKey],
    responses=_errors(401, 404, 409, 422, 503),
    summary="Resolve a reconciliation_required invocation as succeeded or failed (an identical repeat is a "
            "no-op; any other second resolution is 409)")
def resolve_invocation(invocation_id: InvocationId, body: m.ResolveInvocation, ctx: Ctx) -> dict[str, Any]:
    view = _host(ctx).resolve(invocation_id, body.outcome, operator=body.operator, note=body.note,
                              evidence=body.evidence)
    return view.as_json()


NO_ACTIONS_APPROVE = ("this server knows no actions: approving resumes the invocation in the server process, so "
                      "start it with `fencepost serve --app module:attribute` (your Host); rejecting works without it")


@host_invocations.post(
    "/invocations/{invocationId}/approve", response_model=m.Invocation, dependencies=Write,
    responses=_errors(401, 404, 409, 422, 503),
    summary="Approve an awaiting_approval invocation and resume it now in this server (409 not-allowed for "
            "another authority, approval-expired past expires_at, conflict when it does not await approval)")
def approve_invocation(invocation_id: InvocationId, body: m.DecideApproval, ctx: Ctx) -> Any:
    if ctx.host is None:
        return problems.problem("host-not-configured", NO_ACTIONS_APPROVE,
                                instance=f"{PREFIX}/invocations/{invocation_id}/approve")
    view = ctx.host.approve(invocation_id, approver=body.approver, authority=body.authority, note=body.note)
    return view.as_json()


@host_invocations.post(
    "/invocations/{invocationId}/reject", response_model=m.Invocation, dependencies=Write,
    responses=_errors(401, 404, 409, 422, 503),
    summary="Reject an awaiting_approval invocation: it ends failed with the approver, authority and note as "
            "its reason")
def reject_invocation(invocation_id: InvocationId, body: m.DecideApproval, ctx: Ctx) -> dict[str, Any]:
    view = _host(ctx).reject(invocation_id, approver=body.approver, authority=body.authority, note=body.note)
    return view.as_json()


@host_invocations.get(
    "/approvals", response_model=m.Approvals, dependencies=Read, responses=_errors(401, 422, 503),
    summary="The open approval requests, oldest first: invocation, policy, required authority, reason, expiry")
def approvals(ctx: Ctx, tenant: Scope = None, space: Scope = None, limit: Limit = 100) -> dict[str, Any]:
    host = _host(ctx)
    requests = host.approvals(tenant=tenant, space=space, limit=limit)
    now = ctx.store.read(lambda tx: tx.now())
    items = []
    for request in reversed(requests):  # the host lists newest first
        found = request.as_json()
        items.append({"invocation": host.get(request.invocation_id).as_json(), "action_id": request.action_id,
                      "policy": request.policy, "authority": request.authority, "reason": request.reason,
                      "requested_at": found["requested_at"], "expires_at": found["expires_at"],
                      "expired": now >= request.expires_at})
    return {"items": items}


@host_invocations.get(
    "/reconciliation-queue", response_model=m.ReconciliationQueue, dependencies=Read,
    responses=_errors(401, 422, 503),
    summary="The invocations awaiting an operator, oldest first, with what to look up at the provider")
def reconciliation_queue(ctx: Ctx, tenant: Scope = None, space: Scope = None, limit: Limit = 100
                         ) -> dict[str, Any]:
    entries = _host(ctx).reconciliation_queue(tenant=tenant, space=space, limit=limit)
    return {"items": [e.as_json() for e in entries]}
