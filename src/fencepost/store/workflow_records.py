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
    RunMutationKind,
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


# ── progress: what the frontier, the start barrier and cancellation write (migration 0010, ADR 0072) ──


@dataclass(frozen=True)
class RunState:
    """A ``workflow_runs`` row with the columns progress reads: its fence, status, cancel intent, settled instant."""

    id: str
    plan_id: str
    installation_id: str
    publication_id: str
    workflow_id: str
    status: WorkflowRunStatus
    fence: int
    created_at: datetime
    cancel_requested_at: datetime | None
    cancel_reason: str | None
    settled_at: datetime | None


@dataclass(frozen=True)
class ProgressMutation:
    """A StepRun mutation after admission: ``fence`` is the StepRun's new version, ``run_fence`` the Run's fence
    it took, ``invocation_id`` the task's invocation (``start`` and ``settle``), ``event_id`` its ``step.*``
    event."""

    id: str
    step_run_id: str
    run_id: str
    fence: int
    kind: StepMutationKind
    from_status: StepRunStatus
    to_status: StepRunStatus
    run_fence: int
    reason: str | None
    invocation_id: str | None
    event_id: str
    created_at: datetime


@dataclass(frozen=True)
class RunMutation:
    """A ``workflow_run_mutations`` row: the Run's cancel intent or its verdict, at ``fence``."""

    id: str
    run_id: str
    fence: int
    kind: RunMutationKind
    from_status: WorkflowRunStatus
    to_status: WorkflowRunStatus
    reason: str | None
    actor: str | None
    event_id: str
    created_at: datetime


@dataclass(frozen=True)
class StepStart:
    """A ``workflow_step_starts`` row: the start barrier of one step attempt and its task's invocation.

    ``step_fence`` is the StepRun version the barrier moved to ``running``; ``deadline_at`` is ``started_at``
    plus the task's ``timeout_seconds``."""

    id: str
    run_id: str
    step_run_id: str
    step_fence: int
    attempt: int
    invocation_id: str
    target_id: str
    timeout_seconds: int
    deadline_at: datetime
    started_at: datetime


@dataclass(frozen=True)
class TaskOutcome:
    """A started step's task invocation as progress reads it: its status and error (None while it runs)."""

    step_run_id: str
    invocation_id: str
    status: str
    error: str | None
