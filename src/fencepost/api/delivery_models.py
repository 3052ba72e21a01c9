"""The JSON shapes of the delivery routes (``fencepost.api.delivery_routes``; ADRs 0055, 0058)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewTarget(_Model):
    """``POST /v1/targets``: a target by unique name, its URL (``sqlite:///abs/path.db``) and labels."""

    name: str = Field(min_length=1, max_length=100, examples=["tenant-a"])
    url: str = Field(min_length=1, max_length=2000, examples=["sqlite:///srv/tenants/a.db"])
    labels: dict[str, str] = Field(default_factory=dict, examples=[{"env": "prod"}])


class Target(_Model):
    id: str
    name: str
    url: str
    labels: dict[str, str]
    added_at: str | None
    removed_at: str | None


class TargetList(_Model):
    items: list[Target]


class LastDelivery(_Model):
    """A target's newest delivery of one package (the Targets page's last column)."""

    package: str
    version: str | None
    status: str
    invocation_id: str
    error: str | None
    updated_at: str


class TargetRow(Target):
    """``GET /v1/targets``: a target with its newest delivery per package (by package name)."""

    last_deliveries: list[LastDelivery]


class TargetRows(_Model):
    items: list[TargetRow]


class PackageRow(_Model):
    """``GET /v1/packages``: a published package, its published versions (oldest first), the installed one and
    how many targets it has a delivery to."""

    name: str
    versions: list[str]
    installed_version: str | None
    targets: int


class PackageList(_Model):
    items: list[PackageRow]


class DeliveryStep(_Model):
    step: str
    status: str
    attempts: int
    adapter_invocation_id: str
    migration: str | None
    applied: bool | None
    ledger: dict[str, Any] | None
    error: str | None


class DeliveryEvidence(_Model):
    comparison: str | None
    matches_rehearsal: bool | None
    fingerprint: str | None
    rehearsal: str | None
    scenario: str | None
    start_state: str | None
    rehearsal_run_id: str | None = None
    rehearsal_attempt_id: str | None = None


class Delivery(_Model):
    """One target's newest delivery of a package."""

    target: str | None
    target_id: str | None
    target_removed: bool
    target_info: Target | None
    version: str | None
    invocation_id: str
    status: str
    error: str | None
    steps: list[DeliveryStep]
    evidence: DeliveryEvidence | None
    reconciliation: dict[str, Any] | None
    created_at: str
    updated_at: str


class DeliveryList(_Model):
    items: list[Delivery]
