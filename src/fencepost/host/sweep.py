"""The completion-deadline sweep: handoffs whose external completion is overdue settle ``reconciliation_required``
(host-spec N12-N15, N31; ADR 0035).

``sweep_overdue`` lists ``running`` invocations with a handoff past its ``completion_due_at`` whose command holds
no live lease (parked, or its executor died), then settles each in its own unit (``host.sweep``) after re-reading
it under its row lock (N14): still ``running``, the same handoff (provider, reference, adapter invocation), still
due by the store's clock, not swept yet; a live lease refuses the write. The verdict keeps the handoff and sets
``overdue_at`` to the sweep's time; its reconciliation record and verdict event commit in the same unit (N15).
A late callback then settles only a handoff that had parked (N19); an unparked one is evidence only (N20).

Every worker runs it before it claims (``Host.sweeps``, the worker's sweep hook, N13), and
``fencepost host sweep`` runs it on demand. It is safe on many workers at once: the row lock and the re-check make
a candidate settle once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fencepost.core.statuses import InvocationStatus, ReconciliationKind
from fencepost.host import telemetry
from fencepost.host.lifecycle import VERDICT_EVENTS, invocation_event, reconciliation_record
from fencepost.host.telemetry import Telemetry
from fencepost.store.base import Store
from fencepost.store.host_records import InvocationRecord, UnleasedVerdict
from fencepost.store.ports import UnitOfWork

PAGE = 100


def overdue_error(candidate: InvocationRecord) -> str:
    """``external completion of <step> (<provider> <reference>) did not arrive by <due>``."""
    step = (candidate.pending_completion or {}).get("step")
    due = candidate.completion_due_at.isoformat() if candidate.completion_due_at is not None else "its deadline"
    return (f"external completion of step {step} ({candidate.handoff_provider} {candidate.handoff_reference}) "
            f"did not arrive by {due}")


def _same_handoff(row: InvocationRecord, candidate: InvocationRecord) -> bool:
    mine = (row.pending_completion or {}).get("adapter_invocation_id")
    theirs = (candidate.pending_completion or {}).get("adapter_invocation_id")
    return (row.handoff_provider, row.handoff_reference, mine, row.completion_due_at) == (
        candidate.handoff_provider, candidate.handoff_reference, theirs, candidate.completion_due_at)


def sweep_one(tx: UnitOfWork, candidate: InvocationRecord) -> bool:
    """Settle ``candidate`` as overdue if, re-read under its row lock, it still is (N14). True when settled."""
    row = tx.host.lock_invocation(candidate.id)
    now = tx.now()
    if (row is None or row.status is not InvocationStatus.RUNNING or row.overdue_at is not None
            or row.completion_due_at is None or row.completion_due_at > now or not _same_handoff(row, candidate)):
        return False
    error = overdue_error(row)
    details = row.pending_completion or {}
    reconciliation = {"kind": str(ReconciliationKind.COMPLETION_OVERDUE), "provider": row.handoff_provider,
                      "external_reference": row.handoff_reference, "step": details.get("step"),
                      "adapter_invocation_id": details.get("adapter_invocation_id"),
                      "due_at": row.completion_due_at.isoformat(), "parked": row.parked_at is not None}
    if not tx.host.update_unleased_invocation(row.id, InvocationStatus.RUNNING, UnleasedVerdict(
            InvocationStatus.RECONCILIATION_REQUIRED, error, row.result, reconciliation, row.pending_completion,
            None, row.parked_at, now)):
        return False  # a live lease: the invocation is executing; a later sweep looks again
    tx.host.append_reconciliation(reconciliation_record(row, details.get("adapter_invocation_id"),
                                                        ReconciliationKind.COMPLETION_OVERDUE, reconciliation))
    tx.events.append_event_with_outbox(invocation_event(row, VERDICT_EVENTS[InvocationStatus.RECONCILIATION_REQUIRED],
                                                        {"status": "reconciliation_required", "error": error},
                                                        part="sweep"))
    return True


def _sweeper(candidate: InvocationRecord) -> Callable[[UnitOfWork], bool]:
    return lambda tx: sweep_one(tx, candidate)


def sweep_overdue(store: Store, sink: Telemetry, *, budget_seconds: float = 1.0, limit: int = PAGE) -> int:
    """Settle overdue handoffs, a page at a time, for about ``budget_seconds`` (seconds).

    Returns:
        How many invocations it settled.
    Raises:
        StoreUnavailable: the store failed; what committed before stays (each candidate is its own unit).
    """
    settled = 0
    deadline = time.monotonic() + budget_seconds
    while True:
        candidates = store.read(lambda tx: tx.host.list_overdue_handoffs(limit=limit))
        progressed = 0
        for candidate in candidates:
            if store.transact(_sweeper(candidate), name="host.sweep"):
                settled += 1
                progressed += 1
                telemetry.emit(sink, telemetry.STATUS, invocation_id=candidate.id,
                               status=str(InvocationStatus.RECONCILIATION_REQUIRED),
                               kind=str(ReconciliationKind.COMPLETION_OVERDUE))
            if time.monotonic() >= deadline:
                return settled
        if len(candidates) < limit or not progressed:
            return settled
