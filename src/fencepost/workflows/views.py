"""What the CLI, the API and the page show of a workflow Run: one read, plain JSON (ADR 0072).

``run_view(tx, run_id)`` is the Run with every StepRun (its status, version, needs, the newest attempt's task
invocation and that invocation's status, the reason of its latest mutation), the Run's counters, its cancel
intent and its verdict. ``runs_view`` lists Runs newest first.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from fencepost.core.canonical import parse_json
from fencepost.core.errors import NotFound
from fencepost.core.statuses import StepRunStatus, WorkflowRunStatus
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import RunState, StepStart


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def run_summary(run: RunState) -> dict[str, Any]:
    """A Run without its steps: ids, workflow, status, fence, instants, cancel intent."""
    return {"run_id": run.id, "plan_id": run.plan_id, "workflow_id": run.workflow_id,
            "installation_id": run.installation_id, "publication_id": run.publication_id,
            "status": str(run.status), "terminal": run.status.terminal, "fence": run.fence,
            "created_at": _iso(run.created_at), "settled_at": _iso(run.settled_at),
            "cancel": None if run.cancel_requested_at is None else {
                "requested_at": _iso(run.cancel_requested_at), "reason": run.cancel_reason}}


def _resolved_reason(tx: UnitOfWork, reason: str | None, invocation_id: str | None) -> str | None:
    """``reason``, led by the operator's resolution of ``invocation_id`` when there is one."""
    resolution = tx.host.get_resolution(invocation_id) if invocation_id is not None else None
    if resolution is None:
        return reason
    said = f"resolved {resolution.outcome} by {resolution.operator}: {resolution.note}"
    return f"{said} (before: {reason})" if reason else said


def run_view(tx: UnitOfWork, run_id: str) -> dict[str, Any]:
    """The Run ``run_id`` (or the Run of plan id ``run_id``) with its steps (module docstring).

    Returns:
        ``run_summary`` plus ``package``, ``target`` (``{"id", "name"}`` or None), ``steps`` (in step-key order:
        ``key``, ``task``, ``needs``, ``status``, ``fence``, ``attempts``, ``invocation_id``,
        ``invocation_status``, ``reason``, ``blocked_by``, ``started_at``, ``deadline_at``), ``counts`` (steps per
        status) and ``events`` (the Run's event count).
    Raises:
        NotFound: no such Run.
    """
    run = tx.progress.get_run(run_id)
    if run is None:  # a plan id names its Run too (the id a user chose with --plan-id)
        by_plan = tx.admission.get(run_id)
        run = tx.progress.get_run(by_plan.run_id) if by_plan is not None else None
    if run is None:
        raise NotFound(f"no workflow run or plan id {run_id}")
    run_id = run.id
    admission = tx.admission.get(run.plan_id)
    plan = parse_json(admission.plan) if admission is not None else {}
    target_id = plan.get("target_id") if isinstance(plan, dict) else None
    target = tx.delivery.get_target(target_id) if isinstance(target_id, str) else None
    starts: dict[str, StepStart] = {}
    attempts: Counter[str] = Counter()
    for each in tx.progress.starts(run_id):
        attempts[each.step_run_id] += 1
        starts[each.step_run_id] = each  # ordered by attempt: the newest wins
    tasks = {t.invocation_id: t for t in tx.progress.task_statuses(run_id)}  # one read, not one per step
    mutations = tx.progress.mutations(run_id)
    reasons = {m.step_run_id: m.reason for m in mutations}  # by run fence: the latest wins
    # A lost step settles when an operator resolves its task invocation: say so, with the note, beside the reason
    # its verdict kept (a break-it trial found only the old "outcome unknown" reason). Only ever-lost steps read.
    were_lost = {m.step_run_id for m in mutations if m.to_status is StepRunStatus.LOST}
    steps = []
    for row in tx.progress.step_runs(run_id):
        start = starts.get(row.id)
        invocation = tasks.get(start.invocation_id) if start is not None else None
        steps.append({"key": row.step_key, "step_run_id": row.id, "task": row.task_id, "needs": parse_json(row.needs),
                      "status": str(row.status), "fence": row.fence, "attempts": attempts[row.id],
                      "invocation_id": start.invocation_id if start is not None else None,
                      "invocation_status": invocation.status if invocation is not None else None,
                      "reason": _resolved_reason(tx, reasons.get(row.id), start.invocation_id
                                                 if start is not None and row.id in were_lost else None),
                      "started_at": _iso(start.started_at) if start is not None else None,
                      "deadline_at": _iso(start.deadline_at) if start is not None else None})
    _name_blockers(steps)
    counts = Counter(s["status"] for s in steps)
    return {**run_summary(run), "package": admission.package_name if admission is not None else None,
            "target": None if target is None else {"id": target.id, "name": target.name},
            "steps": steps, "counts": {str(s): counts.get(str(s), 0) for s in StepRunStatus},
            "events": tx.progress.next_event_seq(run_id) - 1}


def _name_blockers(steps: list[dict[str, Any]]) -> None:
    """Give each skipped step ``blocked_by``: its needs that did not succeed, as ``{"key", "status"}`` in the
    order the plan names them (the stored reason, ``dependency_not_succeeded``, does not say which); ``[]`` for
    every other step."""
    status = {s["key"]: s["status"] for s in steps}
    for step in steps:
        skipped = step["status"] == str(StepRunStatus.SKIPPED)
        needs = step["needs"] if skipped and isinstance(step["needs"], list) else []
        step["blocked_by"] = [{"key": n, "status": status[n]} for n in needs
                              if n in status and status[n] != str(StepRunStatus.SUCCEEDED)]


def runs_view(tx: UnitOfWork, *, status: WorkflowRunStatus | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Runs newest first (``run_summary`` each, with its ``package``), optionally of one status; ``limit``
    1..10000."""
    items = []
    for run in tx.progress.list_runs(status=status, limit=limit):
        admission = tx.admission.get(run.plan_id)
        items.append({**run_summary(run), "package": admission.package_name if admission is not None else None})
    return items
