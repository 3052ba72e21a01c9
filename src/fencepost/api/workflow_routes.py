"""Workflow Runs over HTTP (issue 18; ADRs 0072, 0073).

- ``GET /v1/workflow-runs`` (``?status``, ``?limit`` 1-500, default 50): Runs newest first, without their steps;
  an ``ETag`` (304 while unchanged), as the operator page polls it.
- ``GET /v1/workflow-runs/{runId}``: one Run with every step (``views.run_view``), with an ETag.
- ``POST /v1/workflow-runs`` (token): plan a run of an installed package's workflow and admit it in one
  transaction: 201 with the new Run, or 200 with the existing one when its ``plan_id`` was admitted before. A
  plan that names no target is refused (422): its steps could never start. The workers run it.
- ``POST /v1/workflow-runs/{runId}/cancel`` (token): store the cancel intent, then advance the Run once so the
  steps that have not started are cancelled at once; running steps finish first (``WorkflowService.cancel``).

Handlers call ``WorkflowService`` only; errors are problem+json through ``fencepost.api.problems``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from fencepost.api import workflow_models as m
from fencepost.api.paging import DEFAULT_PAGE, MAX_PAGE, conditional
from fencepost.api.routes import _NOT_MODIFIED, Ctx, Read, Write, _errors
from fencepost.core.statuses import WorkflowRunStatus
from fencepost.workflows.service import WorkflowService
from fencepost.workflows.views import runs_view

RunId = Annotated[str, Path(alias="runId", min_length=1, max_length=100, description="Workflow run id, e.g. wfr_...")]

workflow_runs = APIRouter(prefix="/v1", tags=["workflows"])


@workflow_runs.get("/workflow-runs", response_model=m.WorkflowRunList, dependencies=Read,
                   responses={**_errors(401, 422, 503), **_NOT_MODIFIED},
                   summary="List workflow Runs, newest first, optionally of one status (ETag: 304 while unchanged)")
def list_workflow_runs(ctx: Ctx, request: Request,
                       status: Annotated[WorkflowRunStatus | None, Query(description="Only Runs of this status.")]
                       = None,
                       limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="At most this many.")]
                       = DEFAULT_PAGE) -> Response:
    items = ctx.store.read(lambda tx: runs_view(tx, status=status, limit=limit))
    return conditional(request, m.WorkflowRunList, {"items": items})


@workflow_runs.get("/workflow-runs/{runId}", response_model=m.WorkflowRun, dependencies=Read,
                   responses={**_errors(401, 404, 422, 503), **_NOT_MODIFIED},
                   summary="One workflow Run with every step: status, attempts, task invocation, reason (ETag)")
def show_workflow_run(run_id: RunId, ctx: Ctx, request: Request) -> Response:
    return conditional(request, m.WorkflowRun, WorkflowService(ctx.store).run(run_id))


@workflow_runs.post("/workflow-runs", status_code=201, response_model=m.WorkflowAdmitted, dependencies=Write,
                    responses={200: {"model": m.WorkflowAdmitted, "description": "The plan id was admitted before: "
                                                                                  "the existing Run"},
                               **_errors(401, 404, 409, 422, 503)},
                    summary="Plan and admit a run of an installed package's workflow (201 new, 200 existing)")
def start_workflow_run(body: m.NewWorkflowRun, ctx: Ctx) -> Any:
    service = WorkflowService(ctx.store)
    plan = service.plan(body.package, body.workflow, plan_id=body.plan_id, inputs=body.inputs, target=body.target)
    admitted = service.start(plan)
    data = m.WorkflowAdmitted.model_validate(
        {"outcome": admitted.outcome, "run_id": admitted.run_id, "run": service.run(admitted.run_id)})
    if admitted.outcome == "created":
        ctx.work_added()  # an in-process worker's coordinator finds the Run sooner
        return data
    return JSONResponse(data.model_dump(mode="json"), status_code=200)


@workflow_runs.post("/workflow-runs/{runId}/cancel", response_model=m.WorkflowCancelled, dependencies=Write,
                    responses=_errors(401, 404, 422, 503),
                    summary="Cancel a Run: the intent first, then its not-started steps at once; running steps "
                            "finish first")
def cancel_workflow_run(run_id: RunId, body: m.CancelWorkflowRun, ctx: Ctx) -> dict[str, Any]:
    return WorkflowService(ctx.store).cancel(run_id, reason=body.reason, actor=body.actor)
