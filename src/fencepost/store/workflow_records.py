"""Typed rows of package publication, installation and workflow admission (ADR-0224)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class PublicationRecord:
    id: str
    package_name: str
    version: str
    content_digest: str
    definition: dict[str, Any]
    definition_text: str
    definition_digest: str
    status: str
    gate: str
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
    status: str
    generation: int
    installed_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DispositionRecord:
    installation_id: str
    disposition: str
    reason: str | None
    updated_at: datetime


@dataclass(frozen=True)
class QuarantineRecord:
    id: str
    installation_id: str
    lock_digest: str
    reason: str
    quarantined_at: datetime


@dataclass(frozen=True)
class AdmissionRow:
    """A ``workflow_admissions`` row exactly as stored (``plan`` is the stored canonical text)."""

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
    id: str
    plan_id: str
    installation_id: str
    publication_id: str
    workflow_id: str
    status: str
    fence: int
    created_at: datetime
