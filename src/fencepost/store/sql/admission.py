"""``AdmissionPort`` over SQL: the admission ledger and the rows one admission writes (ADR-0224)."""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any, TypeVar

from fencepost.core.errors import IntegrityViolation
from fencepost.core.statuses import StepMutationKind, StepRunStatus, WorkflowEventType, WorkflowRunStatus
from fencepost.store.sql.executor import Statements
from fencepost.store.workflow_records import (
    AdmissionReceiptRow,
    AdmissionRecord,
    AdmissionRow,
    AdmissionStepRow,
    StepMutationRow,
    StepRunRow,
    StoredAdmission,
    WorkflowEventRow,
    WorkflowRunRow,
)

E = TypeVar("E", bound=StrEnum)

#: The insert statement of each record type; the record's fields are the statement's parameters.
INSERTS: dict[type[Any], str] = {
    WorkflowRunRow: "insert_workflow_run", WorkflowEventRow: "insert_workflow_event", StepRunRow: "insert_step_run",
    StepMutationRow: "insert_step_mutation", AdmissionRow: "insert_admission",
    AdmissionStepRow: "insert_admission_step", AdmissionReceiptRow: "insert_admission_receipt",
}


class SqlAdmission:
    """The ``AdmissionPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    def get(self, plan_id: str) -> AdmissionRow | None:
        rows = self._unit.run("get_admission", {"plan_id": plan_id}).rows
        return _admission(rows[0]) if rows else None

    def get_by_run(self, run_id: str) -> AdmissionRow | None:
        rows = self._unit.run("get_admission_by_run", {"run_id": run_id}).rows
        return _admission(rows[0]) if rows else None

    def plan_ids(self) -> list[str]:
        return [str(r["plan_id"]) for r in self._unit.run("list_admission_plan_ids", {}).rows]

    def insert(self, record: AdmissionRecord) -> None:
        params = {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}
        self._unit.run(INSERTS[type(record)], params)

    def stored(self, plan_id: str, run_id: str) -> StoredAdmission:
        run = self._unit.run
        return StoredAdmission(
            run=[_row(WorkflowRunRow, r, status=WorkflowRunStatus)
                 for r in run("admission_run", {"id": run_id}).rows],
            events=[_row(WorkflowEventRow, r, type=WorkflowEventType)
                    for r in run("workflow_events", {"run_id": run_id}).rows],
            step_runs=[_row(StepRunRow, r, status=StepRunStatus)
                       for r in run("workflow_step_runs", {"run_id": run_id}).rows],
            mutations=[_row(StepMutationRow, r, kind=StepMutationKind, to_status=StepRunStatus)
                       for r in run("workflow_mutations", {"run_id": run_id}).rows],
            steps=[_row(AdmissionStepRow, r) for r in run("admission_steps", {"plan_id": plan_id}).rows],
            receipts=[_row(AdmissionReceiptRow, r) for r in run("get_admission_receipt", {"plan_id": plan_id}).rows],
        )


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, StrEnum) else value


R = TypeVar("R")


def _row(cls: type[R], raw: dict[str, Any], **vocabularies: type[StrEnum]) -> R:
    """A typed stored row; a value outside its vocabulary is corrupt evidence, named by table, row and column."""
    values = dict(raw)
    for column, vocabulary in vocabularies.items():
        try:
            values[column] = vocabulary(raw[column])
        except ValueError:
            table = getattr(cls, "table", cls.__name__)
            subject = "/".join(str(raw[k]) for k in getattr(cls, "key", ()))
            raise IntegrityViolation(f"corrupt admission evidence: {table} row {subject}: column {column} holds "
                                     f"{raw[column]!r}, which is not a known value") from None
    for name in ("fence", "seq", "step_count", "final_fence", "run_fence", "step_fence", "attempt", "timeout_seconds"):
        if name in values and values[name] is not None:
            values[name] = int(values[name])
    return cls(**values)


def _admission(r: dict[str, Any]) -> AdmissionRow:
    return _row(AdmissionRow, r)
