"""Typed rows of the package catalog and of workflow admission (ADR-0224)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from fencepost.core.statuses import (
    Disposition,
    InstallationStatus,
    PublicationGate,
    PublicationStatus,
    StepMutationKind,
    StepRunStatus,
    WorkflowEventType,
    WorkflowRunStatus,
)

# ── the package catalog ──


@dataclass(frozen=True)
class PublicationRecord:
    id: str
    package_name: str
    version: str
    content_digest: str
    definition: dict[str, Any]
    definition_text: str
    definition_digest: str
    status: PublicationStatus
    gate: PublicationGate
    gate_run_id: str | None
    previous_publication_id: str | None
    published_at: datetime
    withdrawn_at: datetime | None


@dataclass(frozen=True)
class HeadRecord:
    package_name: str
    publication_id: str
    revision: int
    updated_at: datetime


@dataclass(frozen=True)
class InstallationRecord:
    id: str
    package_name: str
    publication_id: str
    lock_digest: str
    status: InstallationStatus
    generation: int
    installed_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DispositionRecord:
    installation_id: str
    disposition: Disposition
    reason: str | None
    updated_at: datetime


@dataclass(frozen=True)
class QuarantineRecord:
    id: str
    installation_id: str
    lock_digest: str
    reason: str
    quarantined_at: datetime


# ── admission: one record type per table it writes, in ADR-0224 order ──


@dataclass(frozen=True)
class AdmissionRow:
    """A ``workflow_admissions`` row exactly as stored (``plan`` is the stored canonical text)."""

    table: ClassVar[str] = "workflow_admissions"
    key: ClassVar[tuple[str, ...]] = ("plan_id",)

    plan_id: str
    plan_digest: str
    plan: str
    run_id: str
    package_name: str
    publication_id: str
    installation_id: str
    lock_digest: str
    workflow_id: str
    workflow_digest: str
    step_count: int
    final_fence: int
    receipt_id: str
    admitted_at: datetime


@dataclass(frozen=True)
class WorkflowRunRow:
    """A ``workflow_runs`` row. ``status`` and ``fence`` change with progress (not admission facts)."""

    table: ClassVar[str] = "workflow_runs"
    key: ClassVar[tuple[str, ...]] = ("id",)
    mutable: ClassVar[frozenset[str]] = frozenset({"status", "fence"})

    id: str
    plan_id: str
    installation_id: str
    publication_id: str
    workflow_id: str
    status: WorkflowRunStatus
    fence: int
    created_at: datetime


@dataclass(frozen=True)
class WorkflowEventRow:
    table: ClassVar[str] = "workflow_events"
    key: ClassVar[tuple[str, ...]] = ("id",)

    id: str
    run_id: str
    step_run_id: str | None
    seq: int
    type: WorkflowEventType
    payload: str
    created_at: datetime


@dataclass(frozen=True)
class StepRunRow:
    """A ``workflow_step_runs`` row; ``status`` and ``fence`` are those of its latest mutation."""

    table: ClassVar[str] = "workflow_step_runs"
    key: ClassVar[tuple[str, ...]] = ("id",)
    mutable: ClassVar[frozenset[str]] = frozenset({"status", "fence"})

    id: str
    run_id: str
    step_key: str
    task_id: str
    task_digest: str
    needs: str
    status: StepRunStatus
    fence: int
    created_at: datetime


@dataclass(frozen=True)
class StepMutationRow:
    table: ClassVar[str] = "workflow_step_mutations"
    key: ClassVar[tuple[str, ...]] = ("id",)

    id: str
    step_run_id: str
    run_id: str
    fence: int
    kind: StepMutationKind
    to_status: StepRunStatus
    created_at: datetime


@dataclass(frozen=True)
class AdmissionStepRow:
    table: ClassVar[str] = "workflow_admission_steps"
    key: ClassVar[tuple[str, ...]] = ("plan_id", "step_key")

    plan_id: str
    step_key: str
    task_id: str
    task_digest: str
    needs: str
    step_run_id: str
    mutation_id: str
    event_id: str


@dataclass(frozen=True)
class AdmissionReceiptRow:
    table: ClassVar[str] = "workflow_admission_receipts"
    key: ClassVar[tuple[str, ...]] = ("id",)

    id: str
    plan_id: str
    run_id: str
    receipt: str
    receipt_digest: str


#: Any row admission writes, in the order it writes them.
AdmissionRecord = (WorkflowRunRow | WorkflowEventRow | StepRunRow | StepMutationRow | AdmissionRow | AdmissionStepRow
                   | AdmissionReceiptRow)


@dataclass(frozen=True)
class StoredAdmission:
    """Every row one admission wrote, as stored, for replay verification (besides its ``AdmissionRow``)."""

    run: list[WorkflowRunRow]
    events: list[WorkflowEventRow]
    step_runs: list[StepRunRow]
    mutations: list[StepMutationRow]
    steps: list[AdmissionStepRow]
    receipts: list[AdmissionReceiptRow]
