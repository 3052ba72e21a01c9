"""``create_app(store, ...)``: the HTTP API and, unless told otherwise, the operator pages.

The store is opened once by the caller and shared by every request (it is thread-safe: one connection per
thread). Mutating requests need ``Authorization: Bearer <token>``; reads are open unless ``open_reads`` is
false (``fencepost serve`` sets it false when it listens beyond loopback).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fencepost import __version__
from fencepost.api import problems, signatures
from fencepost.api.access_log import AccessLog
from fencepost.api.archive import MAX_EXTRACTED_BYTES
from fencepost.api.completions import SECURITY_SCHEME, CompletionProvider, completions, providers_of
from fencepost.api.context import ApiContext
from fencepost.api.delivery_routes import delivery
from fencepost.api.host_invocations import host_invocations
from fencepost.api.routes import events, health, router, workers
from fencepost.api.workflow_routes import workflow_runs
from fencepost.host import Host
from fencepost.host.prometheus import PrometheusTelemetry
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.base import Store

SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Adds a strict CSP (no inline script) and related headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in SECURITY_HEADERS if k not in names]
            await send(message)

        await self.app(scope, receive, wrapped)


class BodyLimit:
    """Refuses a request body larger than ``max_bytes`` with 413: at once when its declared length is larger, and
    when a body without one (``Transfer-Encoding: chunked``) goes past it, by cutting it off there and answering
    413 in place of whatever the app then answers (a parser that lost its body says 400 or 422)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            # the body is left unread, so the connection cannot carry another request
            await _send_problem(scope, receive, send, "payload-too-large",
                                f"the request body exceeds {self.max_bytes} bytes", close=True)
            return
        seen = 0
        exceeded = False
        answered = False

        async def counted() -> Message:
            nonlocal seen, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            nonlocal answered
            if not exceeded:
                await send(message)
                return
            if message["type"] == "http.response.start" and not answered:
                answered = True
                await _send_problem(scope, receive, send, "payload-too-large",
                                    f"the request body exceeds {self.max_bytes} bytes", close=True)
            # the app's own answer to its cut-off body is dropped

        await self.app(scope, counted, guarded)


class UploadAuth:
    """Answers 401 to a ``POST`` on ``paths`` without the API token before any of its body is read: an upload
    is spooled to disk and parsed before FastAPI's dependencies (the token check) run."""

    def __init__(self, app: ASGIApp, api_token: str, paths: frozenset[str]) -> None:
        self.app = app
        self.expected = api_token.encode()
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path") in self.paths:
            given = dict(scope.get("headers", [])).get(b"authorization", b"")
            scheme, _, token = given.strip().partition(b" ")
            if scheme.lower() != b"bearer" or not secrets.compare_digest(token.strip(), self.expected):
                detail = ("send the API token as 'Authorization: Bearer <token>'" if not given
                          else "the bearer token is not valid")
                response = problems.problem("unauthorized", detail, instance=scope.get("path", ""), status=401,
                                            headers={"WWW-Authenticate": "Bearer", "Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _send_problem(scope: Scope, receive: Receive, send: Send, kind: str, detail: str, *,
                        close: bool = False) -> None:
    """Answer from a middleware with the same problem+json response the exception handlers give."""
    response = problems.problem(kind, detail, instance=scope.get("path", ""),
                                headers={"Connection": "close"} if close else None)
    await response(scope, receive, send)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without port or IPv6 brackets, lower case ("" when malformed)."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else ""
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostAllowList:
    """Answers 400 to a ``Host`` header outside ``allowed`` (a DNS-rebinding page cannot read a loopback API)."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = {h.lower().strip("[]") for h in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
            if host_name(raw) not in self.allowed:
                await _send_problem(scope, receive, send, "invalid-host",
                                    "this server answers only to its loopback names")
                return
        await self.app(scope, receive, send)


def _problem_openapi(schema: dict[str, Any], *, open_reads: bool) -> dict[str, Any]:
    """Every 4xx/5xx response is ``application/problem+json`` with the Problem schema; with open reads, GET
    operations declare no security requirement and no 401. The completion endpoint's signature is a security
    scheme of its own."""
    ref = {"$ref": "#/components/schemas/Problem"}
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            if open_reads and method == "get" and "security" in operation:
                del operation["security"]
                operation.get("responses", {}).pop("401", None)
            for code, response in operation.get("responses", {}).items():
                if code[:1] in ("4", "5"):
                    response["content"] = {problems.PROBLEM_JSON: {"schema": ref}}
                    if code == "422":
                        response["description"] = "Invalid input or request validation failed"
    schema.setdefault("components", {}).setdefault("securitySchemes", {})[SECURITY_SCHEME] = {
        "type": "apiKey", "in": "header", "name": signatures.HEADER,
        "description": "t=<unix seconds>,v1=<hex HMAC-SHA256(provider secret, '<t>.' + raw body)>; several v1 "
                       "allowed while rotating a secret (docs/api.md)"}
    components = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def create_app(store: Store, *, api_token: str, open_reads: bool = True, allowed_hosts: list[str] | None = None,
               on_work: Callable[[], None] | None = None, max_upload_bytes: int = 32 * 1024 * 1024,
               max_package_bytes: int = MAX_EXTRACTED_BYTES, ui: bool = True, poll_ms: int = 1000,
               host: Host | None = None,
               completion_providers: Mapping[str, CompletionProvider | str | Sequence[str]] | None = None,
               signature_window_seconds: float = signatures.DEFAULT_WINDOW_SECONDS,
               signature_clock: Callable[[], float] = time.time,
               metrics: PrometheusTelemetry | None = None, access_log: bool = False) -> FastAPI:
    """Build the ASGI app over an open ``store``.

    Args:
        store: the control store (the app never closes it).
        api_token: bearer token for mutating requests (and for reads when ``open_reads`` is false).
        open_reads: GET endpoints and pages need no token.
        allowed_hosts: accepted ``Host`` header names (DNS-rebinding guard); None accepts any.
        on_work: called after an enqueue or reconcile made work claimable (wakes in-process workers).
        max_upload_bytes: the largest request body accepted (413 above it).
        max_package_bytes: the largest total an uploaded archive may expand to (422 above it).
        ui: serve the operator pages and their static files too.
        poll_ms: the operator page's polling interval while an Attempt is open.
        host: the action host that ``POST /v1/host/completions/{provider}`` settles (ADR 0036).
        completion_providers: provider name (an adapter's ``vendor``) -> a ``CompletionProvider``, or its secret
            or secrets (then with the JSON parser). Without any, every completion is refused (401).
        signature_window_seconds: how far a completion's signed timestamp may be from ``signature_clock()``.
        signature_clock: unix seconds (the wall clock; tests pass their own).
        metrics: serve ``GET /metrics`` from this sink (the Prometheus text format; ADR 0047); None: no endpoint.
        access_log: log one line per request to ``fencepost.access`` (``api.access_log``; ADR 0068).
    Raises:
        ValueError: no API token; completion providers without a host; a weak secret; a window outside 1..3600.
    """
    if not api_token:
        raise ValueError("an API token is required")
    providers = providers_of(completion_providers)
    if providers and host is None:
        raise ValueError("completion providers need the host their completions settle")
    if not 1 <= signature_window_seconds <= 3600:
        raise ValueError("the signature window is 1 to 3600 seconds")
    app = FastAPI(title="fencepost", version=__version__,
                  description="Delivery rehearsals: enqueue Attempts on a durable outbox, watch their fenced "
                              "leases, reconcile or abort, compare evidence and read the release gate. Errors "
                              "are application/problem+json (RFC 9457).",
                  docs_url=None, redoc_url=None)
    app.state.fencepost = ApiContext(store=store, service=RehearsalService(store), api_token=api_token,
                                     open_reads=open_reads, on_work=on_work, max_upload_bytes=max_upload_bytes,
                                     max_package_bytes=max_package_bytes, poll_ms=poll_ms, host=host,
                                     completion_providers=providers, signature_window=signature_window_seconds,
                                     signature_clock=signature_clock)
    problems.install(app)
    app.include_router(health)
    app.include_router(router)
    app.include_router(workers)
    app.include_router(events)
    app.include_router(completions)
    app.include_router(host_invocations)
    app.include_router(delivery)
    app.include_router(workflow_runs)
    if metrics is not None:
        from fencepost.api.metrics import metrics as metrics_router

        app.state.metrics = metrics
        app.include_router(metrics_router)
    if ui:
        from fencepost.ui.pages import mount

        mount(app)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, description=app.description,
                                   routes=app.routes)
            app.openapi_schema = _problem_openapi(document, open_reads=open_reads)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(UploadAuth, api_token=api_token, paths=frozenset({"/delivery-rehearsals/uploads"}))
    app.add_middleware(BodyLimit, max_bytes=max_upload_bytes)
    if allowed_hosts is not None:
        app.add_middleware(HostAllowList, allowed=allowed_hosts)
    app.add_middleware(SecurityHeaders)
    if access_log:
        app.add_middleware(AccessLog)  # outermost: it sees the status every other layer answered
    return app
