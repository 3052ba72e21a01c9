"""The workflow Run pages (issue 18, "a page that draws the DAG with each step's live state"; ADR 0072).

- ``/workflows`` (``?status=``, ``?limit=``): Runs newest first with their step counts per status, each linking to
  its page; ``app.js`` refreshes it from ``/workflows.json`` with conditional requests.
- ``/workflows/{workflow_run_id}``: the Run's status, cancel intent and verdict, its DAG drawn server-side as SVG
  (``ui.dag``: layers by longest path from the roots) and a table of every step (state, attempts, task invocation
  linking ``/invocations/{id}``, reason, started and deadline instants). ``app.js`` polls
  ``/workflows/{workflow_run_id}.json`` (``ETag``/``If-None-Match``: 304 while unchanged, ADR 0067) and stops once the
  Run settled.

``pages.mount`` imports this module (it builds on the pages' templates and helpers). Data comes only from
``fencepost.workflows.views`` (``run_view``/``runs_view``) and the progress port's ``step_runs`` (the list's
counts); the JSON routes are read routes (a token unless reads are open).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from fencepost.api.paging import MAX_PAGE, etag_of
from fencepost.api.routes import Read
from fencepost.core.errors import FencepostError, InvalidInput
from fencepost.core.statuses import StepRunStatus, WorkflowRunStatus
from fencepost.store.ports import UnitOfWork
from fencepost.ui.dag import layout, layout_json
from fencepost.ui.pages import _ctx, _error_page, templates
from fencepost.workflows.views import run_view, runs_view

#: How many Runs ``/workflows`` lists when the request names no ``limit`` ("Show older" asks for more).
RUNS_PAGE = 50
#: How many of a step's needs its row names before "and N more" (a join of 126 steps stays one line or two).
NEEDS_SHOWN = 6
#: Step statuses in the order the pages list their counts (live ones first).
STEP_ORDER = [str(s) for s in StepRunStatus]


def _status(value: str | None) -> WorkflowRunStatus | None:
    if not value:
        return None
    try:
        return WorkflowRunStatus(value)
    except ValueError:
        allowed = ", ".join(str(s) for s in WorkflowRunStatus)
        raise InvalidInput(f"status must be one of {allowed}, not {value!r}") from None


def _limit(value: str | None) -> int:
    if not value:
        return RUNS_PAGE
    if not value.isdigit() or not 1 <= int(value) <= MAX_PAGE:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_PAGE}, not {value!r}")
    return int(value)


def runs_json(tx: UnitOfWork, status: WorkflowRunStatus | None, limit: int) -> dict[str, Any]:
    """``{"items": [run_summary + "steps" (total) + "counts" (status -> n, non-zero only)], "more": bool}``:
    ``limit`` Runs newest first, and whether older ones exist."""
    rows = runs_view(tx, status=status, limit=limit + 1)
    items = []
    for run in rows[:limit]:
        counts = Counter(str(s.status) for s in tx.progress.step_runs(run["run_id"]))
        items.append({**run, "steps": sum(counts.values()),
                      "counts": {s: counts[s] for s in STEP_ORDER if counts[s]}})
    return {"items": items, "more": len(rows) > limit}


def _conditional(request: Request, body: dict[str, Any]) -> Response:
    # As api.paging.conditional (ADR 0067), for page-scoped JSON that has no API model.
    tag = etag_of(body)
    seen = [t.strip() for t in request.headers.get("if-none-match", "").split(",")]
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if tag in seen or "*" in seen:
        return Response(status_code=304, headers=headers)
    return JSONResponse(body, headers=headers)


def workflows(request: Request) -> HTMLResponse:
    """The Runs list, newest first, optionally of one status (``?status=``), ``?limit=`` of them."""
    ctx = _ctx(request)
    data: dict[str, Any] = {"open_reads": ctx.open_reads, "poll_ms": max(ctx.poll_ms, 1000), "listed": None,
                            "statuses": [str(s) for s in WorkflowRunStatus], "step_order": STEP_ORDER}
    try:
        status = _status(request.query_params.get("status"))
        limit = _limit(request.query_params.get("limit"))
        data.update(status=str(status) if status else "", limit=limit, page=RUNS_PAGE)
        ctx.require_ready()
        if ctx.open_reads:
            data["listed"] = ctx.store.read(lambda tx: runs_json(tx, status, limit))
    except FencepostError as error:
        return _error_page(request, error)
    return templates.TemplateResponse(request, "workflows.html", data)


def workflows_json(request: Request) -> Response:
    """``runs_json`` for ``?status=&limit=``, with an ETag (304 while unchanged)."""
    status = _status(request.query_params.get("status"))
    limit = _limit(request.query_params.get("limit"))
    return _conditional(request, _ctx(request).store.read(lambda tx: runs_json(tx, status, limit)))


def workflow_run(request: Request, workflow_run_id: str) -> HTMLResponse:
    """One Run: summary, the DAG (SVG, server-side layout) and the steps table; live until it settles."""
    run_id = workflow_run_id
    ctx = _ctx(request)
    data: dict[str, Any] = {"run_id": run_id, "open_reads": ctx.open_reads, "poll_ms": max(ctx.poll_ms, 1000),
                            "run": None, "dag": None, "step_order": STEP_ORDER}
    try:
        ctx.require_ready()
        if ctx.open_reads:
            run = ctx.store.read(lambda tx: run_view(tx, run_id))
            data["run"] = run
            data["steps"] = {s["key"]: s for s in run["steps"]}
            data["dag"] = layout(run["steps"])
            data["needs_shown"] = NEEDS_SHOWN
    except FencepostError as error:
        return _error_page(request, error)
    return templates.TemplateResponse(request, "workflow.html", data)


def workflow_run_json(request: Request, workflow_run_id: str) -> Response:
    """``run_view`` of ``workflow_run_id`` with an ETag (304 while unchanged); 404 problem for an unknown Run. With
    ``?dag=true`` it also carries ``dag`` (``ui.dag.layout_json``), for a page served without the drawing."""
    run = _ctx(request).store.read(lambda tx: run_view(tx, workflow_run_id))
    if request.query_params.get("dag") == "true":
        run["dag"] = layout_json(layout(run["steps"]))
    return _conditional(request, run)


def mount_workflows(app: FastAPI) -> None:
    """Add the workflow pages and their JSON to ``app`` (left out of the OpenAPI document). The ``.json`` routes
    come first: ``/workflows/{workflow_run_id}`` would otherwise take ``x.json`` as a Run id. The parameter is
    not ``run_id``, which names a rehearsal on ``/rehearsals/{run_id}``."""
    app.add_api_route("/workflows.json", workflows_json, methods=["GET"], dependencies=Read,
                      include_in_schema=False)
    app.add_api_route("/workflows/{workflow_run_id}.json", workflow_run_json, methods=["GET"], dependencies=Read,
                      include_in_schema=False)
    app.add_api_route("/workflows", workflows, methods=["GET"], response_class=HTMLResponse,
                      include_in_schema=False)
    app.add_api_route("/workflows/{workflow_run_id}", workflow_run, methods=["GET"], response_class=HTMLResponse,
                      include_in_schema=False)
