"""The typed rows of delivery targets and delivery starts (migration 0009; ADRs 0055, 0056)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class TargetRecord:
    """A delivery target.

    Attributes:
        id: ``tgt_...``, stable across a rename-free life. name: unique among live targets. url: where the
            target database is (``sqlite:///abs/path.db``). labels: ``{key: value}`` for fleet selection.
        added_at, removed_at: aware UTC instants; ``removed_at`` is None while the target is live.
    """

    id: str
    name: str
    url: str
    labels: dict[str, str] = field(default_factory=dict)
    added_at: datetime | None = None
    removed_at: datetime | None = None


@dataclass(frozen=True)
class DeliveryStartRecord:
    """The start barrier of one delivery invocation: what the guards were checked against (ADR 0056)."""

    invocation_id: str
    package_name: str
    version: str
    publication_id: str
    installation_id: str
    lock_digest: str
    target_id: str
    started_at: datetime
