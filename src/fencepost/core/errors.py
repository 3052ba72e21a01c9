"""Error types shared by every layer. Driver errors are translated into these at the store boundary,
so callers never catch ``sqlite3`` or ``psycopg`` exceptions (STYLE.md, eventsourcing habit).

Every message is safe to show a user: no lease token, no database path, no connection string.
"""

from __future__ import annotations

from datetime import datetime


class FencepostError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with when this error reaches it."""

    exit_code = 1
    kind = "error"


class InvalidInput(FencepostError):
    """Bad input from a user: malformed manifest, missing file, bad option value."""

    exit_code = 2
    kind = "invalid-input"


class InvalidPlan(InvalidInput):
    """A workflow plan or definition breaks a normalization rule (ADR-0224 decision 2, step 1)."""

    kind = "invalid-plan"


class NotFound(FencepostError):
    """An id that names no record."""

    exit_code = 2
    kind = "not-found"


class Conflict(FencepostError):
    """The request is valid but the current state forbids it (e.g. abort of a terminal Attempt)."""

    exit_code = 3
    kind = "conflict"


class LeaseActive(Conflict):
    """Reconcile refused: the lease has not expired yet (seed: an active lease cannot be stolen)."""

    kind = "lease-active"

    def __init__(self, message: str, lease_until: datetime) -> None:
        super().__init__(message)
        self.lease_until = lease_until


class LeaseLost(FencepostError):
    """A fenced write touched zero rows: the lease was taken over, reconciled or aborted.

    The worker must stop that work at once and persist nothing more (seed: Heartbeat And Takeover).
    """

    kind = "lease-lost"


class SchemaNotReady(FencepostError):
    """The control database is unmigrated or at another schema version."""

    exit_code = 4
    kind = "schema-not-ready"


class StoreUnavailable(FencepostError):
    """The store could not be reached or kept failing (busy past the bounded wait, I/O error)."""

    exit_code = 5
    kind = "unavailable"


class IntegrityViolation(FencepostError):
    """A durable record fails verification (fingerprint mismatch, corrupt evidence): fail closed."""

    exit_code = 5
    kind = "integrity"


class NotAllowed(FencepostError):
    """A start guard is false (ADR-0224 decision 2, step 3); ``guard`` names which one."""

    exit_code = 6
    kind = "not-allowed"

    def __init__(self, message: str, guard: str) -> None:
        super().__init__(message)
        self.guard = guard
