"""Errors as ``application/problem+json`` (RFC 9457), one stable ``type`` per error kind.

Every ``detail`` comes from a ``fencepost.core.errors`` message (safe to show a user: no lease token, no
database path, no connection string) or is written here. An unexpected exception becomes a 500 whose body
says nothing about it; the log line names only the exception class.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from fencepost.core.errors import (
    Conflict,
    FencepostError,
    IdempotencyConflict,
    IntegrityViolation,
    InvalidInput,
    LeaseActive,
    LeaseLost,
    NotAllowed,
    NotFound,
    RecoverableFinalization,
    RedactionFailed,
    SchemaNotReady,
    StoreUnavailable,
)
from fencepost.host.approvals import ApprovalExpired

log = logging.getLogger("fencepost.api")

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:fencepost:problem:"


@dataclass(frozen=True)
class ProblemKind:
    """One kind of problem: ``kind`` is the stable last segment of ``type``, ``status`` the HTTP status."""

    kind: str
    status: int
    title: str


INTERNAL = ProblemKind("internal", 500, "Internal error")
CONFLICT = ProblemKind("conflict", 409, "Conflicting state")

# The API's one error table (ADR 0016): error class -> problem. ``problem_for`` walks the class's MRO, so a
# subclass (``InvalidPlan``, ``StoreBusy``) answers as its parent unless it has a row of its own.
ERRORS: dict[type[FencepostError], ProblemKind] = {
    FencepostError: INTERNAL,  # raised on purpose yet classified nowhere: a bug, like an unexpected exception
    InvalidInput: ProblemKind("invalid-input", 422, "Invalid input"),
    NotFound: ProblemKind("not-found", 404, "Not found"),
    Conflict: CONFLICT,
    LeaseActive: ProblemKind("lease-active", 409, "Lease still active"),
    LeaseLost: CONFLICT,  # the lease moved on under the caller: the state forbids the write
    # 409, not 403: a guard reads the current state (gate, head, installation), not who is asking (ADR 0016).
    NotAllowed: ProblemKind("not-allowed", 409, "Not allowed by a guard"),
    # an approval decided past the request's expires_at: nothing recorded; the sweep ends it failed (ADR 0052)
    ApprovalExpired: ProblemKind("approval-expired", 409, "Approval request expired"),
    IdempotencyConflict: ProblemKind("idempotency-conflict", 409, "Idempotency key used with another binding"),
    # the application's redaction hook refused the value: nothing was stored (host-spec Q, ADR 0042)
    RedactionFailed: ProblemKind("redaction-failed", 422, "A redaction hook refused the value"),
    # the outcome may exist but could not be recorded: retry later, a worker recovers it (host-spec M)
    RecoverableFinalization: ProblemKind("recoverable-finalization", 503, "Outcome not recorded yet"),
    SchemaNotReady: ProblemKind("schema-not-ready", 503, "Control database schema not ready"),
    StoreUnavailable: ProblemKind("unavailable", 503, "Control store unavailable"),
    IntegrityViolation: ProblemKind("integrity", 500, "Integrity violation"),  # fail closed, loudly
}

# Kinds the HTTP layer answers itself (framework, middleware, and the completion endpoint from its signature check
# and the host's receipt), never raised as a ``FencepostError``.
PROTOCOL_KINDS = (
    ProblemKind("validation-error", 422, "Request validation failed"),
    ProblemKind("invalid-host", 400, "Host not allowed"),
    ProblemKind("unauthorized", 401, "Bearer token required"),
    ProblemKind("method-not-allowed", 405, "Method not allowed"),
    ProblemKind("payload-too-large", 413, "Request body too large"),
    ProblemKind("unsupported-media-type", 415, "Unsupported media type"),
    # completions (ADR 0036): one 401 for every refused signature; 404 and 409 tell the provider to retry later
    ProblemKind("invalid-signature", 401, "Valid signature required"),
    ProblemKind("unknown-reference", 404, "No handoff has this reference yet"),
    ProblemKind("still-executing", 409, "Invocation still executing"),
    # the host's submit route without the server's --app (ADR 0049): the actions are unknown to this server
    ProblemKind("host-not-configured", 409, "No actions on this server"),
)

# kind -> problem, for ``problem(kind, ...)``.
KINDS: dict[str, ProblemKind] = {row.kind: row for row in (*ERRORS.values(), *PROTOCOL_KINDS)}

_HTTP_KINDS = {400: "validation-error", 401: "unauthorized", 404: "not-found", 405: "method-not-allowed",
               409: "conflict", 413: "payload-too-large", 415: "unsupported-media-type", 422: "validation-error"}


def problem_for(error_type: type[FencepostError]) -> ProblemKind:
    """The row of ``ERRORS`` for ``error_type``: its own, else its nearest ancestor's along the MRO.

    Every ``FencepostError`` subclass has one, since ``FencepostError`` itself has a row (``internal``).
    """
    for cls in error_type.__mro__:
        if issubclass(cls, FencepostError) and cls in ERRORS:
            return ERRORS[cls]
    return INTERNAL  # unreachable: the walk ends at FencepostError, which has a row


def problem_type(kind: str) -> str:
    return TYPE_PREFIX + kind


def problem(kind: str, detail: str, *, instance: str | None = None, status: int | None = None,
            headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """A problem+json response of ``kind`` (see ``KINDS``)."""
    row = KINDS[kind]
    code = status or row.status
    body: dict[str, Any] = {"type": problem_type(kind), "title": row.title, "status": code, "detail": detail}
    if instance is not None:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=code, media_type=PROBLEM_JSON, headers=headers)


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


async def _fencepost_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, FencepostError)
    row = problem_for(type(error))
    extra: dict[str, Any] = {}
    if isinstance(error, LeaseActive):
        extra["lease_until"] = _iso(error.lease_until)
    if isinstance(error, NotAllowed):
        extra["guard"] = error.guard
    if isinstance(error, IdempotencyConflict):
        extra["field"] = error.field  # what differs (host-spec §2.6: the 409 names the field)
    if row.status >= 500:
        log.warning("request failed", extra={"event": "request_failed", "kind": row.kind,
                                             "path": request.url.path, "error": str(error)})
    return problem(row.kind, str(error), instance=request.url.path, **extra)


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    errors = [{"loc": [str(part) for part in item.get("loc", ())], "msg": str(item.get("msg", "")),
               "type": str(item.get("type", ""))} for item in error.errors()]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(first["loc"]) or "request"
    return problem("validation-error", f"{where}: {first['msg']}", instance=request.url.path, errors=errors)


def _routes(request: Request) -> list[Any]:
    """Every route of the app, each with ``matches``, ``methods`` and ``path_format``, included routers flattened
    (recent FastAPI keeps an included router as one entry of ``app.routes``; ``iter_route_contexts`` sees through
    it)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI: ``app.routes`` is flat already
        return list(request.app.router.routes)
    return list(iter_route_contexts(request.app.router.routes))


def _allowed_methods(request: Request, fallback: str) -> str:
    """The methods of the request's path, for the ``Allow`` header of a 405 (RFC 9110).

    FastAPI makes one route per method and Starlette's 405 names only the first route matching the path, so every
    route whose path matches counts. As in OpenAPI, a concrete path wins over a templated one:
    ``/delivery-rehearsals/uploads`` is POST only, though ``GET /delivery-rehearsals/{rehearsalId}`` would read it
    as an id. A mount (the static files) answers for its own methods: ``fallback`` is what its 405 said.
    """
    matching: list[tuple[int, set[str]]] = []
    for route in _routes(request):
        methods: set[str] = set(getattr(route, "methods", None) or ())
        if isinstance(getattr(route, "original_route", route), Mount) or not methods:
            continue
        probe = {**request.scope, "method": next(iter(methods))}
        if route.matches(probe)[0] is Match.FULL:
            matching.append((str(getattr(route, "path_format", "")).count("{"), methods))
    if not matching:
        return fallback or "GET, HEAD"
    fewest = min(params for params, _ in matching)
    allowed = set().union(*(methods for params, methods in matching if params == fewest))
    order = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return ", ".join(sorted(allowed, key=lambda m: (order.index(m) if m in order else len(order), m)))


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    kind = _HTTP_KINDS.get(error.status_code, "validation-error" if error.status_code < 500 else "internal")
    detail = error.detail if isinstance(error.detail, str) else KINDS[kind].title
    headers = dict(error.headers) if error.headers else {}
    if error.status_code == 400:
        # Only the framework raises 400, for a body it cannot even parse (bad encoding, broken multipart): that is
        # invalid input like any other invalid body, so 422 with the same kind as request validation.
        return problem("validation-error", f"the request body could not be parsed ({detail.rstrip('.')})",
                       instance=request.url.path,
                       errors=[{"loc": ["body"], "msg": "could not be parsed", "type": "body_parse_error"}])
    if error.status_code == 405:
        headers["Allow"] = _allowed_methods(request, headers.pop("Allow", "") or headers.pop("allow", ""))
    return problem(kind, detail, instance=request.url.path, status=error.status_code, headers=headers or None)


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    # Never echo the message: it may come from a driver and name a file or a host.
    log.error("unexpected error", extra={"event": "request_crashed", "path": request.url.path,
                                         "error_type": type(error).__name__})
    return problem("internal", "the server could not complete this request; see its log",
                   instance=request.url.path)


def install(app: FastAPI) -> None:
    """Register the problem+json handlers on ``app``."""
    app.add_exception_handler(FencepostError, _fencepost_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
