"""Every status of every durable record, as ``StrEnum``s mirrored by CHECK constraints in the schema.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Durable Command" (command statuses) and
"Release Gate" (Run READY; Attempt PENDING/RUNNING/SUCCEEDED/FAILED/ABORTED).
"""

from __future__ import annotations

from enum import StrEnum


class CommandStatus(StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"

    @property
    def terminal(self) -> bool:
        return self in (CommandStatus.DELIVERED, CommandStatus.FAILED, CommandStatus.ABORTED)


class LeaseEventKind(StrEnum):
    """One row of heartbeat history per lease transition (kept forever, seed: recovery signal)."""

    CLAIM = "claim"
    TAKEOVER = "takeover"
    HEARTBEAT = "heartbeat"
    RELEASE = "release"
    RECONCILE = "reconcile"
    ABORT = "abort"
    DELIVER = "deliver"
    FAIL = "fail"


class RunStatus(StrEnum):
    READY = "READY"
    RETIRED = "RETIRED"


class AttemptStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"

    @property
    def terminal(self) -> bool:
        return self in (AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.ABORTED)


class ReceiptStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"

    @property
    def terminal(self) -> bool:
        return self in (ReceiptStatus.SUCCEEDED, ReceiptStatus.FAILED, ReceiptStatus.ABORTED)
