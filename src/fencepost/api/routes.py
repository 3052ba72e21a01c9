"""The JSON endpoints. Plain ``def`` handlers: FastAPI runs them in its threadpool, so blocking store
calls never stall the event loop. Handlers call ``RehearsalService`` and ``views`` only (``GET /workers``: the
worker census of ``fencepost.outbox.registry``, and ``/v1/events/outbox...``: the relay's rows through
``fencepost.events.views``, both through ``ApiContext``).
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path as FsPath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Path, Query, Request, Response, UploadFile, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from fencepost.api import models
from fencepost.api.archive import extract_package
from fencepost.api.context import ApiContext
from fencepost.api.paging import DEFAULT_PAGE, MAX_PAGE, conditional
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import EventOutboxStatus
from fencepost.host.health import read_host_health
from fencepost.rehearsal import views
from fencepost.store.host_records import Subject

bearer = HTTPBearer(auto_error=False, description="The API token printed by `fencepost serve` "
                                                  "(or set with --api-token / FENCEPOST_API_TOKEN).")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

RehearsalId = Annotated[str, Path(alias="rehearsalId", min_length=1, max_length=200,
                                  description="Rehearsal (Run) id, e.g. run_...")]
AttemptId = Annotated[str, Path(alias="attemptId", min_length=1, max_length=200,
                                description="Attempt id, e.g. att_...")]


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.fencepost
    return ctx


Ctx = Annotated[ApiContext, Depends(context)]


def _check_token(ctx: ApiContext, credentials: HTTPAuthorizationCredentials | None) -> None:
    given = credentials.credentials if credentials is not None else ""
    if not given or not secrets.compare_digest(given.encode(), ctx.api_token.encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                            "send the API token as 'Authorization: Bearer <token>'" if not given
                            else "the bearer token is not valid",
                            headers={"WWW-Authenticate": "Bearer"})


def require_token(ctx: Ctx, credentials: Credentials) -> None:
    _check_token(ctx, credentials)


def read_access(ctx: Ctx, credentials: Credentials) -> None:
    if not ctx.open_reads:
        _check_token(ctx, credentials)


def schema_ready(ctx: Ctx) -> None:
    ctx.require_ready()


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    # Content is rewritten to application/problem+json with the Problem schema in ``app.openapi``.
    return {code: {"model": models.Problem, "description": "Problem details (RFC 9457)"} for code in codes}


Write = [Depends(require_token), Depends(schema_ready)]
Read = [Depends(read_access), Depends(schema_ready)]

router = APIRouter(tags=["delivery rehearsals"])
health = APIRouter(tags=["health"])
workers = APIRouter(tags=["workers"])
events = APIRouter(tags=["event relay"])


# ── health ──
@health.get("/health/live", response_model=models.Live, summary="Liveness: the process answers")
def live() -> dict[str, Any]:
    return {"status": "live"}


@health.get("/health/ready", response_model=models.Ready, responses=_errors(503),
            summary="Readiness: the control store answers and its schema is current")
def ready(ctx: Ctx) -> dict[str, Any]:
    """503 only when the store does not answer or its schema is not current. ``host`` carries the action host's
    counts (host-spec W2; ADR 0051); open reconciliations and the rest are an operator's work, not unreadiness."""
    ctx.store.require_schema()
    host = read_host_health(ctx.store)
    return {"status": "ready", "backend": ctx.store.backend, "schema_version": host.schema_version,
            "host": host.as_json()}


# ── rehearsals ──
def _created(response: Response, run_view: dict[str, Any]) -> models.Rehearsal:
    response.headers["Location"] = f"/delivery-rehearsals/{run_view['id']}"
    return models.Rehearsal.model_validate(run_view)


@router.post("/delivery-rehearsals", status_code=201, response_model=models.Rehearsal, dependencies=Write,
             responses=_errors(401, 422, 503), summary="Create a rehearsal from a package directory on the server")
def create_rehearsal(body: models.CreateRehearsal, ctx: Ctx, response: Response) -> models.Rehearsal:
    try:
        run = ctx.service.create_run(body.package_path)
    except OSError as error:  # e.g. a name too long for the file system: still the caller's input
        raise InvalidInput(f"the package path cannot be read: {error.strerror or type(error).__name__}") from None
    return _created(response, views.run_view(run))


@router.post("/delivery-rehearsals/uploads", status_code=201, response_model=models.Rehearsal, dependencies=Write,
             responses=_errors(401, 413, 422, 503),
             summary="Create a rehearsal from an uploaded package archive (.zip or .tar.gz)")
def upload_rehearsal(archive: Annotated[UploadFile, File(description="The package directory as .zip or .tar.gz "
                                                                     "(at the top level or in one folder).")],
                     ctx: Ctx, response: Response) -> models.Rehearsal:
    with tempfile.TemporaryDirectory(prefix="fencepost-upload-") as tmp:
        package_dir = extract_package(archive.file, archive.filename or "", FsPath(tmp),
                                      max_bytes=ctx.max_package_bytes)
        run = ctx.service.create_run(package_dir)
    return _created(response, views.run_view(run))


Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")]
Cursor = Annotated[str | None, Query(max_length=400, description="next_cursor of the previous page.")]
_NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: the If-None-Match ETag is still current (no body)."}}


@router.get("/delivery-rehearsals", response_model=models.RehearsalList, dependencies=Read,
            responses={**_errors(401, 422, 503), **_NOT_MODIFIED},
            summary="List rehearsals, newest first, a page at a time (ETag: 304 while unchanged)")
def list_rehearsals(ctx: Ctx, request: Request, limit: Limit = DEFAULT_PAGE, cursor: Cursor = None) -> Response:
    return conditional(request, models.RehearsalList, ctx.runs_json(limit=limit, cursor=cursor))


@router.get("/delivery-rehearsals/{rehearsalId}", response_model=models.Rehearsal, dependencies=Read,
            responses=_errors(401, 404, 422, 503), summary="Read one rehearsal")
def get_rehearsal(rehearsal_id: RehearsalId, ctx: Ctx) -> dict[str, Any]:
    return views.run_view(ctx.service.get_run(rehearsal_id))


# ── attempts ──
@router.post("/delivery-rehearsals/{rehearsalId}/attempts", status_code=202, response_model=models.Attempt,
             dependencies=Write, responses=_errors(401, 404, 409, 422, 503),
             summary="Enqueue an Attempt (returns at once; a worker runs it)")
def enqueue_attempt(rehearsal_id: RehearsalId, ctx: Ctx, response: Response) -> dict[str, Any]:
    attempt = ctx.service.enqueue_attempt(rehearsal_id)
    ctx.work_added()
    response.headers["Location"] = f"/delivery-rehearsals/{rehearsal_id}/attempts/{attempt.id}"
    return ctx.attempt_json(attempt, ctx.service.receipts(attempt.id), ctx.census())


@router.get("/delivery-rehearsals/{rehearsalId}/attempts", response_model=models.AttemptList, dependencies=Read,
            responses=_errors(401, 404, 422, 503),
            summary="List a rehearsal's Attempts with outbox lease, lease history and Receipts, a page at a time")
def list_attempts(rehearsal_id: RehearsalId, ctx: Ctx, request: Request, limit: Limit = DEFAULT_PAGE,
                  cursor: Cursor = None,
                  order: Annotated[Literal["oldest", "newest"], Query(description="oldest first, or newest first.")]
                  = "oldest") -> Response:
    return conditional(request, models.AttemptList,
                       ctx.attempts_json(rehearsal_id, limit=limit, cursor=cursor, newest_first=order == "newest"))


@router.get("/delivery-rehearsals/{rehearsalId}/attempts/{attemptId}", response_model=models.Attempt,
            dependencies=Read, responses=_errors(401, 404, 422, 503), summary="Read one Attempt")
def get_attempt(rehearsal_id: RehearsalId, attempt_id: AttemptId, ctx: Ctx,
                evidence: Annotated[bool, Query(description="Include each Receipt's sealed evidence.")] = False,
                ) -> dict[str, Any]:
    attempt = ctx.attempt_of(rehearsal_id, attempt_id)
    return ctx.attempt_json(attempt, ctx.service.receipts(attempt.id), ctx.census(), evidence=evidence)


@router.post("/delivery-rehearsals/{rehearsalId}/attempts/{attemptId}/reconcile", response_model=models.Attempt,
             dependencies=Write, responses=_errors(401, 404, 409, 422, 503),
             summary="Return an expired PROCESSING lease to PENDING (409 with lease_until while it is active)")
def reconcile_attempt(rehearsal_id: RehearsalId, attempt_id: AttemptId, ctx: Ctx) -> dict[str, Any]:
    ctx.attempt_of(rehearsal_id, attempt_id)
    attempt = ctx.service.reconcile(attempt_id)
    ctx.work_added()
    return ctx.attempt_json(attempt, ctx.service.receipts(attempt.id), ctx.census())


@router.post("/delivery-rehearsals/{rehearsalId}/attempts/{attemptId}/abort", response_model=models.Attempt,
             dependencies=Write, responses=_errors(401, 404, 409, 422, 503),
             summary="Abort a PENDING or RUNNING Attempt (fences its worker)")
def abort_attempt(rehearsal_id: RehearsalId, attempt_id: AttemptId, ctx: Ctx,
                  body: models.AbortRequest | None = None) -> dict[str, Any]:
    ctx.attempt_of(rehearsal_id, attempt_id)
    attempt = ctx.service.abort(attempt_id, (body or models.AbortRequest()).reason)
    return ctx.attempt_json(attempt, ctx.service.receipts(attempt.id), ctx.census())


# ── evidence ──
@router.get("/delivery-rehearsals/{rehearsalId}/attempt-comparison", response_model=models.Comparison,
            dependencies=Read, responses={**_errors(401, 404, 422, 503), **_NOT_MODIFIED},
            summary="Semantic comparison of the two latest successful Attempts")
def attempt_comparison(rehearsal_id: RehearsalId, ctx: Ctx, request: Request) -> Response:
    return conditional(request, models.Comparison, views.comparison_view(ctx.service.compare(rehearsal_id)))


@router.get("/delivery-rehearsals/{rehearsalId}/release-gate", response_model=models.Gate, dependencies=Read,
            responses={**_errors(401, 404, 422, 503), **_NOT_MODIFIED},
            summary="The release gate, computed now from durable records")
def release_gate(rehearsal_id: RehearsalId, ctx: Ctx, request: Request) -> Response:
    return conditional(request, models.Gate, views.gate_view(ctx.service.gate(rehearsal_id)))


# ── workers ──
@workers.get("/workers", response_model=models.WorkerList, dependencies=Read, responses=_errors(401, 503),
             summary="The registered workers: live ones, and registrations that stopped renewing")
def list_workers(ctx: Ctx) -> dict[str, Any]:
    return ctx.workers_json()


# ── the event relay (issue 15): what waits to be published, and what gave up ──
@events.get("/v1/events/outbox/summary", response_model=models.EventOutboxSummary, dependencies=Read,
            responses=_errors(401, 503),
            summary="The relay's backlog: rows per status, and the oldest unpublished row's age")
def event_outbox_summary(ctx: Ctx) -> dict[str, Any]:
    return ctx.relay_summary_json()


@events.get("/v1/events/outbox", response_model=models.EventOutboxList, dependencies=Read,
            responses=_errors(401, 422, 503),
            summary="Publication rows oldest first, e.g. ?status=dead_lettered for the dead letters")
def event_outbox(ctx: Ctx,
                 status: Annotated[EventOutboxStatus | None, Query(description="Only rows of this status.")] = None,
                 limit: Annotated[int, Query(ge=1, le=1000, description="At most this many rows.")] = 100,
                 ) -> dict[str, Any]:
    return ctx.event_rows_json(status, limit)


@events.get("/v1/events/spaces", response_model=models.EventSpaceList, dependencies=Read,
            responses=_errors(401, 422, 503),
            summary="The spaces of the event log, each with its last sequence, paged with ?cursor=")
def event_spaces(ctx: Ctx, limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 1000,
                 cursor: Annotated[str | None, Query(max_length=2000,
                                                     description="next_cursor of the previous page.")] = None,
                 ) -> dict[str, Any]:
    return ctx.event_spaces_json(limit, cursor)


@events.get("/v1/events", response_model=models.EventLog, dependencies=Read, responses=_errors(401, 422, 503),
            summary="One space's event log in sequence order, paged with ?after=")
def event_log(ctx: Ctx,
              tenant: Annotated[str, Query(min_length=1, max_length=200, description="The space's tenant.")],
              space: Annotated[str, Query(min_length=1, max_length=200, description="The space.")],
              subject_type: Annotated[str | None, Query(min_length=1, max_length=100,
                                                        description="With subject_id: one subject's events.")] = None,
              subject_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
              after: Annotated[int, Query(ge=0, le=2**63 - 1, description="Only events after this sequence.")] = 0,
              limit: Annotated[int, Query(ge=1, le=1000, description="At most this many events.")] = 100,
              ) -> dict[str, Any]:
    if (subject_type is None) != (subject_id is None):
        raise InvalidInput("subject_type and subject_id name a subject together: give both or neither")
    subject = None if subject_type is None or subject_id is None else Subject(subject_type, subject_id)
    return ctx.event_log_json(tenant, space, subject, after, limit)
