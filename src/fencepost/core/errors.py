"""Error types shared by every layer. Driver errors are translated into these at the store boundary,
so callers never catch ``sqlite3`` or ``psycopg`` exceptions (STYLE.md, eventsourcing habit).

Every message is safe to show a user: no lease token, no database path, no connection string.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def in_chain(error: BaseException, kind: type[E]) -> E | None:
    """The first exception of ``kind`` in ``error``'s chain (itself, then its ``__cause__`` or ``__context__``, and
    so on), or None: a store may wrap what its unit raised, and Python wraps a KeyboardInterrupt that lands while
    a class is built in a RuntimeError."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None

class FencepostError(Exception):
    """Base class of every error fencepost raises on purpose.

    Core knows nothing of HTTP or exit codes: ``fencepost.api.problems.ERRORS`` maps each class to a problem
    kind and status, ``fencepost.cli.exit_codes.EXIT_CODES`` to an exit code (ADR 0016).
    """


class InvalidInput(FencepostError):
    """Bad input from a user: malformed manifest, missing file, bad option value."""


class InvalidPlan(InvalidInput):
    """A workflow plan or definition breaks a normalization rule (ADR-0224 decision 2, step 1)."""


class NotFound(FencepostError):
    """An id that names no record."""


class Conflict(FencepostError):
    """The request is valid but the current state forbids it (e.g. abort of a terminal Attempt)."""


class LeaseActive(Conflict):
    """Reconcile refused: the lease has not expired yet (seed: an active lease cannot be stolen)."""

    def __init__(self, message: str, lease_until: datetime) -> None:
        super().__init__(message)
        self.lease_until = lease_until


class LeaseLost(FencepostError):
    """A fenced write touched zero rows: the lease was taken over, reconciled or aborted.

    The worker must stop that work at once and persist nothing more (seed: Heartbeat And Takeover).
    """


class SchemaNotReady(FencepostError):
    """The control database is unmigrated or at another schema version."""


class StoreUnavailable(FencepostError):
    """The store could not be reached or kept failing (busy past the bounded wait, I/O error)."""


class TransactionAborted(StoreUnavailable):
    """The open transaction can no longer be used (a savepoint could not be rolled back: the database rolled the
    whole transaction back itself). Nothing of it will commit."""


class IntegrityViolation(FencepostError):
    """A durable record fails verification (fingerprint mismatch, corrupt evidence): fail closed."""


class NotAllowed(FencepostError):
    """A start guard is false (ADR-0224 decision 2, step 3); ``guard`` names which one."""

    def __init__(self, message: str, guard: str) -> None:
        super().__init__(message)
        self.guard = guard


class RedactionFailed(FencepostError):
    """A redaction hook raised or returned a value of the wrong shape (host-spec Q; ADR 0042). The value it was
    given was not stored; the message names the hook and the exception type, never the hook's own message
    (which may quote the very secret it was meant to remove)."""


class IdempotencyConflict(Conflict):
    """An idempotency key replayed with another binding (host-spec B3, B4; ADR 0023).

    ``field`` names what differs: ``"action_version"``, ``"actor"``, ``"authority"`` or ``"parameters"``. The
    message names the field class only and never echoes a stored value.
    """

    def __init__(self, field: str) -> None:
        other = {"action_version": "another action version", "actor": "another actor",
                 "authority": "another authority", "parameters": "other parameters"}.get(field, f"another {field}")
        super().__init__(f"idempotency key already used with {other}")
        self.field = field


class RecoverableFinalization(FencepostError):
    """An invocation could not record what happened, and must not pretend otherwise (host-spec C4, C8, M).

    Raised when the lease was lost or a lease-conditioned write was refused (``cause`` is the ``LeaseLost``,
    or None with a message such as ``Invocation is no longer running``, C10), or when a store error stopped a
    settlement after an effect may have happened (G15, J4). Nothing more is recorded: a worker leaves the lease
    to expire and the next claim recovers the invocation (C11); a direct caller may call ``execute`` again.

    Also raised after a verdict-first fallback committed its verdict but an evidence write failed (K7, L2):
    ``verdict_durable`` is then True, the invocation is terminal with an evidence gap that is never repaired
    (K8; ``fencepost audit`` reports it) and the lease is already released. Never raised for an ordinary handler
    error, which is a ``failed`` verdict (M4). A caller must not read it as ``failed``: it inspects the stored
    invocation (M1).

    Attributes:
        cause: the underlying error (``LeaseLost``, a store error) or None. invocation_id: the invocation, when
            known. verdict_durable: True when this execution's verdict committed (K7), False when nothing of
            the outcome did.
    """

    def __init__(self, message: str, cause: BaseException | None = None, *, invocation_id: str | None = None,
                 verdict_durable: bool = False) -> None:
        super().__init__(message)
        self.cause = cause
        self.invocation_id = invocation_id
        self.verdict_durable = verdict_durable
