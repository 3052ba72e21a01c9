"""The JSON shapes of the workflow-run routes (``fencepost.api.workflow_routes``; ADR 0072).

They mirror ``fencepost.workflows.views`` field for field (``extra="forbid"``), so a view that drifts fails the
response instead of leaking an unlisted field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewWorkflowRun(_Model):
    """``POST /v1/workflow-runs``: plan one run of ``workflow`` of the installed ``package`` and admit it."""

    package: str = Field(min_length=1, max_length=100, examples=["inventory"])
    workflow: str = Field(min_length=1, max_length=100, examples=["nightly"])
    target: str | None = Field(default=None, min_length=1, max_length=100, examples=["tenant-a"],
                               description="The live target the tasks run on (default: the one target the "
                                           "installed version was delivered to).")
    plan_id: str | None = Field(default=None, min_length=1, max_length=128, examples=["nightly-2026-11-30"],
                                description="Idempotency key: the same plan id again answers the existing Run "
                                            "(200). Default: random.")
    inputs: dict[str, Any] = Field(default_factory=dict, description="Run inputs (a JSON object).")


class CancelWorkflowRun(_Model):
    """``POST /v1/workflow-runs/{runId}/cancel``."""

    reason: str = Field(min_length=1, max_length=1000, examples=["maintenance window"],
                        description="Why: one line of text; a control character or line break is refused (422, "
                                    "ADR 0111).")
    actor: str = Field(default="api", min_length=1, max_length=200,
                       description="Who cancels (in the ledger); one line of text, as the reason.")


class CancelIntent(_Model):
    requested_at: str | None
    reason: str | None


class RunTarget(_Model):
    id: str
    name: str


class WorkflowRunSummary(_Model):
    """A Run without its steps (``views.run_summary``)."""

    run_id: str
    plan_id: str
    workflow_id: str
    installation_id: str
    publication_id: str
    status: str
    terminal: bool
    fence: int
    created_at: str | None
    settled_at: str | None
    cancel: CancelIntent | None
    package: str | None = None


class BlockingNeed(_Model):
    """A need of a skipped step that did not succeed, and its status."""

    key: str
    status: str


class WorkflowStep(_Model):
    key: str
    step_run_id: str
    task: str
    needs: list[str]
    status: str
    fence: int
    attempts: int
    invocation_id: str | None
    invocation_status: str | None
    reason: str | None
    blocked_by: list[BlockingNeed] = []
    started_at: str | None
    deadline_at: str | None


class WorkflowRun(WorkflowRunSummary):
    """A Run with its steps in step-key order, the count of steps per status and of its events (``views.run_view``)."""

    target: RunTarget | None
    steps: list[WorkflowStep]
    counts: dict[str, int]
    events: int


class WorkflowRunList(_Model):
    items: list[WorkflowRunSummary]


class WorkflowAdmitted(_Model):
    """``outcome``: ``created`` (201) or ``existing`` (200: the plan id was admitted before; nothing new)."""

    outcome: str
    run_id: str
    run: WorkflowRun


class WorkflowCancelled(_Model):
    """``outcome``: ``requested``, ``existing`` (requested before) or ``settled`` (terminal; nothing written).
    ``cancelled_now``: steps this request cancelled; ``still_running``: steps the Run settles after."""

    outcome: str
    run_id: str
    cancelled_now: list[str]
    still_running: list[str]
    run: WorkflowRun
