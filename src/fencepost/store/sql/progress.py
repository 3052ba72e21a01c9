"""``ProgressPort`` over SQL: the Run's progress rows of ``progress.sql`` (migration 0010, ADR 0072)."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from fencepost.core.statuses import RunMutationKind, StepMutationKind, StepRunStatus, WorkflowRunStatus
from fencepost.store.sql.admission import _row
from fencepost.store.sql.executor import Statements
from fencepost.store.workflow_records import (
    ProgressMutation,
    RunMutation,
    RunState,
    StepRunRow,
    StepStart,
    TaskOutcome,
    WorkflowEventRow,
)


class SqlProgress:
    """The ``ProgressPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    def lock_run(self, run_id: str) -> None:
        self._unit.run("lock_workflow_run", {"id": run_id})

    def get_run(self, run_id: str) -> RunState | None:
        rows = self._unit.run("get_run_state", {"id": run_id}).rows
        return _row(RunState, rows[0], status=WorkflowRunStatus) if rows else None

    def list_runs(self, *, status: WorkflowRunStatus | None = None, limit: int = 100) -> list[RunState]:
        rows = self._unit.run("list_workflow_runs", {"status": None if status is None else str(status),
                                                     "limit": limit}).rows
        return [_row(RunState, r, status=WorkflowRunStatus) for r in rows]

    def step_runs(self, run_id: str) -> list[StepRunRow]:
        return [_row(StepRunRow, r, status=StepRunStatus)
                for r in self._unit.run("workflow_step_runs", {"run_id": run_id}).rows]

    def next_event_seq(self, run_id: str) -> int:
        return int(self._unit.run("next_workflow_event_seq", {"run_id": run_id}).rows[0]["seq"])

    def insert_event(self, event: WorkflowEventRow) -> None:
        self._unit.run("insert_workflow_event", {"id": event.id, "run_id": event.run_id,
                                                 "step_run_id": event.step_run_id, "seq": event.seq,
                                                 "type": str(event.type), "payload": event.payload,
                                                 "created_at": event.created_at})

    def cas_step_run(self, *, step_run_id: str, run_id: str, from_status: StepRunStatus, from_fence: int,
                     to_status: StepRunStatus, to_fence: int) -> bool:
        return self._unit.run("cas_step_run", {
            "id": step_run_id, "run_id": run_id, "from_status": str(from_status), "from_fence": from_fence,
            "to_status": str(to_status), "to_fence": to_fence}).rowcount == 1

    def cas_run(self, *, run_id: str, from_fence: int, to_fence: int, to_status: WorkflowRunStatus,
                settled_at: datetime | None) -> bool:
        return self._unit.run("cas_run", {"id": run_id, "from_fence": from_fence, "to_fence": to_fence,
                                          "to_status": str(to_status), "settled_at": settled_at}).rowcount == 1

    def set_cancel_intent(self, *, run_id: str, from_fence: int, to_fence: int, reason: str) -> bool:
        return self._unit.run("set_cancel_intent", {"id": run_id, "from_fence": from_fence, "to_fence": to_fence,
                                                    "reason": reason, "now": self._unit.now()}).rowcount == 1

    def insert_mutation(self, mutation: ProgressMutation) -> None:
        self._unit.run("insert_progress_mutation", _plain(mutation))

    def insert_run_mutation(self, mutation: RunMutation) -> None:
        self._unit.run("insert_run_mutation", _plain(mutation))

    def insert_start(self, start: StepStart) -> None:
        self._unit.run("insert_step_start", _plain(start))

    def starts(self, run_id: str) -> list[StepStart]:
        return [_row(StepStart, r) for r in self._unit.run("step_starts_of_run", {"run_id": run_id}).rows]

    def start_of_invocation(self, invocation_id: str) -> StepStart | None:
        rows = self._unit.run("get_step_start_by_invocation", {"invocation_id": invocation_id}).rows
        return _row(StepStart, rows[0]) if rows else None

    def task_outcomes(self, run_id: str) -> list[TaskOutcome]:
        return [TaskOutcome(str(r["step_run_id"]), str(r["invocation_id"]), str(r["status"]), r["error"])
                for r in self._unit.run("task_outcomes_of_run", {"run_id": run_id}).rows]

    def task_statuses(self, run_id: str) -> list[TaskOutcome]:
        return [TaskOutcome(str(r["step_run_id"]), str(r["invocation_id"]), str(r["status"]), r["error"])
                for r in self._unit.run("task_statuses_of_run", {"run_id": run_id}).rows]

    def mutations(self, run_id: str) -> list[ProgressMutation]:
        return [_row(ProgressMutation, r, kind=StepMutationKind, from_status=StepRunStatus, to_status=StepRunStatus)
                for r in self._unit.run("progress_mutations_of_run", {"run_id": run_id}).rows]

    def run_mutations(self, run_id: str) -> list[RunMutation]:
        return [_row(RunMutation, r, kind=RunMutationKind, from_status=WorkflowRunStatus,
                     to_status=WorkflowRunStatus)
                for r in self._unit.run("run_mutations_of_run", {"run_id": run_id}).rows]

    def candidates(self, page: str, *, after: str, limit: int) -> list[str]:
        """Run ids of one candidate page: ``verdicts``, ``ready`` or ``cancelling``."""
        query = {"verdicts": "runs_with_task_verdicts", "ready": "runs_with_ready_steps",
                 "cancelling": "runs_cancelling"}[page]
        return [str(r["run_id"]) for r in self._unit.run(query, {"after": after, "limit": limit}).rows]


def _plain(record: Any) -> dict[str, Any]:
    return {f.name: (str(v) if isinstance(v := getattr(record, f.name), StrEnum) else v) for f in fields(record)}
