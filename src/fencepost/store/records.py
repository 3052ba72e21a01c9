"""Typed rows returned by the store. Frozen dataclasses; instants are aware UTC datetimes.

No record ever carries a lease token except ``Lease``, whose token is hidden from ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fencepost.core.statuses import AttemptStatus, CommandStatus, LeaseEventKind, ReceiptStatus, RunStatus


@dataclass(frozen=True)
class Lease:
    """A fenced claim: ``(owner, token, until)`` plus the public delivery number.

    ``token`` is private: it is never logged, returned by the API or shown (``repr=False``).
    ``delivery`` equals the command's ``delivery_count`` at claim time and is the public face of the
    fencing token in evidence and heartbeat history.
    """

    command_id: str
    owner: str
    token: str = field(repr=False)
    delivery: int
    until: datetime


@dataclass(frozen=True)
class ClaimedCommand:
    """A command handed to a worker with its lease.

    ``unreadable``: why the stored payload could not be read back as a JSON object (a row written past the
    outbox port: nesting or a number beyond the parser's limits, text that is not UTF-8), with ``payload``
    then empty; None for every command written through ``insert``. The worker fails such a command at once
    without running its handler, instead of failing the whole claim and with it every worker of its kind.
    """

    id: str
    kind: str
    payload: dict[str, Any]
    lease: Lease
    unreadable: str | None = None

    @property
    def delivery(self) -> int:
        return self.lease.delivery


@dataclass(frozen=True)
class CommandRecord:
    """Public view of an outbox row (no token)."""

    id: str
    kind: str
    payload: dict[str, Any]
    status: CommandStatus
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None
    lease_until: datetime | None
    last_heartbeat_at: datetime | None
    delivery_count: int
    finished_at: datetime | None
    last_error: str | None
    #: Why the stored payload could not be read back (``payload`` is then empty); None for every command
    #: written through the outbox port (``ClaimedCommand.unreadable``).
    unreadable: str | None = None


@dataclass(frozen=True)
class PendingKind:
    """The PENDING backlog of one kind: ``pending`` commands, the oldest created at ``oldest_created_at``; and,
    over every kind the query matched (also those its limit left out), ``kinds_total`` kinds with
    ``pending_total`` PENDING commands in all."""

    kind: str
    pending: int
    oldest_created_at: datetime
    kinds_total: int
    pending_total: int


@dataclass(frozen=True)
class LeaseEvent:
    """One row of heartbeat history."""

    seq: int
    command_id: str
    event: LeaseEventKind
    owner: str | None
    delivery: int
    at: datetime
    lease_until: datetime | None


@dataclass(frozen=True)
class RunRecord:
    id: str
    package_name: str
    package_version: str
    previous_version: str | None
    content_digest: str
    manifest: dict[str, Any]
    status: RunStatus
    created_at: datetime


@dataclass(frozen=True)
class RunFile:
    path: str
    sha256: str
    size: int
    content: bytes


@dataclass(frozen=True)
class AttemptRecord:
    """An Attempt joined with the public columns of its outbox command."""

    id: str
    run_id: str
    seq: int
    command_id: str
    status: AttemptStatus
    delivery: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    command_status: CommandStatus
    lease_owner: str | None
    lease_until: datetime | None
    last_heartbeat_at: datetime | None
    delivery_count: int
    available_at: datetime


@dataclass(frozen=True)
class ReceiptRecord:
    id: str
    attempt_id: str
    position: int
    scenario: str
    status: ReceiptStatus
    delivery: int | None
    evidence: str | None
    evidence_fingerprint: str | None
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class AttemptLock:
    """What taking an Attempt's row lock reads: enough to decide before touching its command."""

    id: str
    status: AttemptStatus
    command_id: str


@dataclass(frozen=True)
class FrozenFile:
    """A frozen package file with its recorded digest (``sha256`` hex), as the audit re-verifies it."""

    run_id: str
    path: str
    sha256: str
    content: bytes


@dataclass(frozen=True)
class Finding:
    """One audit finding: which check, which subject (a row id) and what is wrong."""

    check: str
    subject: str
    detail: str


#: A registration is live while its ``last_seen_at`` is less than this many of its own heartbeat intervals old
#: (ADR 0019). With the heartbeat every third of the lease, that is one lease duration: two missed beats are
#: tolerated, and a registration expires about when the leases its worker renewed at its last beat do.
LIVENESS_INTERVALS = 3


@dataclass(frozen=True)
class WorkerRecord:
    """One row of the worker registry (ADR 0019): a worker process as it last reported itself.

    Attributes:
        id: the worker id (its lease owner name, e.g. ``host:pid:rand``).
        host, pid: where it runs.
        kinds: the command kinds it claims, sorted.
        concurrency: its execution slots (commands it can run at once).
        in_flight: the commands it held (claimed, not yet finished) at its last beat.
        heartbeat_seconds: its heartbeat interval (seconds), a third of its lease duration.
        version: the fencepost version it runs.
        started_at: when this registration began (store clock).
        last_seen_at: its last register or beat (store clock).
    """

    id: str
    host: str
    pid: int
    kinds: tuple[str, ...]
    concurrency: int
    in_flight: int
    heartbeat_seconds: float
    version: str
    started_at: datetime
    last_seen_at: datetime

    @property
    def live_until(self) -> datetime:
        """``last_seen_at`` plus ``LIVENESS_INTERVALS`` heartbeat intervals: live before this instant."""
        return self.last_seen_at + timedelta(seconds=LIVENESS_INTERVALS * self.heartbeat_seconds)

    def is_live(self, now: datetime) -> bool:
        """Whether the registration is live at ``now`` (the store's clock, ``UnitOfWork.now``)."""
        return now < self.live_until

    def serves(self, kind: str) -> bool:
        """Whether it claims commands of ``kind``."""
        return kind in self.kinds
