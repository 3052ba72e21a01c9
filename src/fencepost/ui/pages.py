"""Operator pages. Server-rendered from the same views as the JSON API; ``app.js`` then polls the API and
updates the page in place. Pages call ``RehearsalService`` (through the app's ``ApiContext``) and ``views``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from fencepost import __version__
from fencepost.api.context import ApiContext
from fencepost.api.problems import problem_for
from fencepost.core.errors import FencepostError, NotFound
from fencepost.core.statuses import EventOutboxStatus
from fencepost.host.health import read_host_health
from fencepost.rehearsal import views

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))


def when(value: str | None) -> str:
    """``2026-01-01T12:00:05.123456Z`` as ``2026-01-01 12:00:05 UTC`` (server time, never the browser's)."""
    if not value:
        return "—"
    return value[:19].replace("T", " ") + " UTC"


def age(seconds: float | None) -> str:
    """Seconds as ``4 s``, ``3 min 05 s`` or ``2 h 07 min`` (a duration by the store's clock)."""
    if seconds is None:
        return "—"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


#: How many dead letters the index page lists (oldest first); it says how many more there are and which command
#: lists them all. ``app.js`` reads it from the panel's ``data-dead-limit``.
DEAD_LETTER_LIMIT = 20

#: How many rehearsals the index lists, and how many Attempts the rehearsal page shows, before "Show more".
RUNS_PAGE = 20
ATTEMPTS_PAGE = 10


def duration(started: str | None, finished: str | None) -> str:
    """How long a scenario ran, from its ISO 8601 UTC ``started_at`` to ``finished_at`` (``—`` until both are
    known), e.g. ``0.42 s`` or ``1 min 05 s``."""
    if not started or not finished:
        return "—"
    seconds = (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    return f"{seconds:.2f} s" if seconds < 60 else age(seconds)


templates.env.filters["duration"] = duration
templates.env.filters["when"] = when
templates.env.filters["age"] = age
templates.env.globals["version"] = __version__


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.fencepost
    return ctx


def _error_page(request: Request, error: FencepostError) -> HTMLResponse:
    row = problem_for(type(error))
    return templates.TemplateResponse(request, "error.html",
                                      {"title": row.title, "detail": str(error), "status": row.status},
                                      status_code=row.status)


def index(request: Request) -> HTMLResponse:
    ctx = _ctx(request)
    runs: list[dict[str, Any]] | None = None
    runs_next: str | None = None
    workers: dict[str, Any] | None = None
    relay: dict[str, Any] | None = None
    host: dict[str, Any] | None = None
    try:
        ctx.require_ready()
        if ctx.open_reads:
            listed = ctx.runs_json(limit=RUNS_PAGE)
            runs, runs_next = listed["items"], listed["next_cursor"]
            workers = ctx.workers_json()
            relay = {"summary": ctx.relay_summary_json(),
                     "dead": ctx.event_rows_json(EventOutboxStatus.DEAD_LETTERED, DEAD_LETTER_LIMIT)["items"]}
            host = read_host_health(ctx.store).as_json()  # host-spec W2, ADR 0051
    except FencepostError as error:
        return _error_page(request, error)
    return templates.TemplateResponse(request, "index.html", {"runs": runs, "workers": workers, "relay": relay,
                                                              "dead_limit": DEAD_LETTER_LIMIT,
                                                              "runs_next": runs_next, "runs_page": RUNS_PAGE,
                                                              "open_reads": ctx.open_reads, "host": host})


def rehearsal(request: Request, run_id: str) -> HTMLResponse:
    ctx = _ctx(request)
    data: dict[str, Any] = {"run_id": run_id, "open_reads": ctx.open_reads, "poll_ms": ctx.poll_ms,
                            "run": None, "attempts": None, "gate": None, "comparison": None, "workers": None,
                            "attempts_page": ATTEMPTS_PAGE}
    try:
        ctx.require_ready()
        if ctx.open_reads:
            data["run"] = views.run_view(ctx.service.get_run(run_id))
            data["attempts"] = ctx.attempts_json(run_id, limit=ATTEMPTS_PAGE, newest_first=True)
            data["workers"] = ctx.workers_json()
            data["gate"] = views.gate_view(ctx.service.gate(run_id))
            data["comparison"] = views.comparison_view(ctx.service.compare(run_id))
    except FencepostError as error:
        return _error_page(request, error)
    return templates.TemplateResponse(request, "rehearsal.html", data)


# ── the action host's operator views (ADR 0049; host-spec §2.7): drawn by app.js from /v1/host/... ──
def _host_page(request: Request, template: str, **extra: Any) -> HTMLResponse:
    ctx = _ctx(request)
    try:
        ctx.require_ready()
    except FencepostError as error:
        return _error_page(request, error)
    return templates.TemplateResponse(request, template, {"open_reads": ctx.open_reads,
                                                          "poll_ms": max(ctx.poll_ms, 1000), **extra})


def invocations(request: Request) -> HTMLResponse:
    """The invocations list (status, action, attempts), newest first, with filters."""
    return _host_page(request, "invocations.html")


def invocation(request: Request, invocation_id: str) -> HTMLResponse:
    """One invocation: status, attempts, steps, events in order, lease timeline, reconciliation, resolution.
    An unknown id is a 404 page, as an unknown rehearsal's is (where reads are open)."""
    ctx = _ctx(request)
    if ctx.open_reads:
        try:
            ctx.require_ready()
            if ctx.store.read(lambda tx: tx.host.get_invocation(invocation_id)) is None:
                raise NotFound(f"no invocation {invocation_id}")
        except FencepostError as error:
            return _error_page(request, error)
    return _host_page(request, "invocation.html", invocation_id=invocation_id)


def reconciliation_queue(request: Request) -> HTMLResponse:
    """The reconciliation queue, oldest first, with a Resolve form per invocation (the server judges it)."""
    return _host_page(request, "queue.html")


def approvals(request: Request) -> HTMLResponse:
    """The open approval requests, oldest first, with Approve and Reject forms (the server judges them; ADR 0052)."""
    return _host_page(request, "approvals.html")


# ── delivery (issue 17; ADRs 0055-0058): drawn by app.js from /v1/targets and /v1/packages/... ──
def targets(request: Request) -> HTMLResponse:
    """The delivery targets (name, URL, labels, added, newest delivery per package); removed ones on request."""
    return _host_page(request, "targets.html")


def packages(request: Request) -> HTMLResponse:
    """The published packages, each linking to its deliveries."""
    return _host_page(request, "packages.html")


def package_deliveries(request: Request, name: str) -> HTMLResponse:
    """One package's deliveries: per target, version, verdict, steps with ledger rows, evidence, queue entry."""
    return _host_page(request, "deliveries.html", package=name)


def mount(app: FastAPI) -> None:
    """Add the pages and ``/static`` to ``app`` (left out of the OpenAPI document)."""
    app.add_api_route("/", index, methods=["GET"], response_class=HTMLResponse, include_in_schema=False)
    app.add_api_route("/rehearsals/{run_id}", rehearsal, methods=["GET"], response_class=HTMLResponse,
                      include_in_schema=False)
    app.add_api_route("/invocations", invocations, methods=["GET"], response_class=HTMLResponse,
                      include_in_schema=False)
    app.add_api_route("/invocations/{invocation_id}", invocation, methods=["GET"], response_class=HTMLResponse,
                      include_in_schema=False)
    app.add_api_route("/reconciliation-queue", reconciliation_queue, methods=["GET"], response_class=HTMLResponse,
                      include_in_schema=False)
    app.add_api_route("/targets", targets, methods=["GET"], response_class=HTMLResponse, include_in_schema=False)
    app.add_api_route("/packages", packages, methods=["GET"], response_class=HTMLResponse, include_in_schema=False)
    app.add_api_route("/packages/{name}/deliveries", package_deliveries, methods=["GET"],
                      response_class=HTMLResponse, include_in_schema=False)
    app.add_api_route("/approvals", approvals, methods=["GET"], response_class=HTMLResponse, include_in_schema=False)
    from fencepost.ui.workflow_pages import mount_workflows  # it builds on this module's templates

    mount_workflows(app)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
