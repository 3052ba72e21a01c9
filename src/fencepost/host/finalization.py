"""Settling an invocation: checkpoints, events and the verdict in ONE fenced transaction, the fence last
(host-spec J1-J3, K1 order; ADR 0002, ADR 0022).

Every verdict of an execution is written by ``settlement``'s unit, in this order:

1. the invocation row is locked and must still be ``running`` (lock order: invocation first);
2. the adapter checkpoints (``write_adapter_invocation`` under the captured lease);
3. the events: the step's lifecycle events, the action's declared events, the verdict's own event;
4. the verdict (``update_leased_invocation`` under the captured lease);
5. the command's finish (``Store.fenced(..., finish=DELIVERED)``): the fence, last, which also releases the
   lease. A stale token touches zero rows there and the whole unit rolls back.

The verdict comes last because it releases the lease (K1): if any earlier write is refused, nothing commits and
``SettlementRefused`` leaves the unit; the execution turns it into ``RecoverableFinalization`` (C4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fencepost.core.statuses import InvocationStatus, ReconciliationKind
from fencepost.host.lifecycle import VERDICT_EVENTS, invocation_event
from fencepost.store.host_records import AdapterWrite, InvocationRecord, InvocationVerdict, NewEvent
from fencepost.store.ports import FencedUnit

#: The message of a refused status check (host-spec C10).
NO_LONGER_RUNNING = "Invocation is no longer running"


class SettlementRefused(Exception):
    """A lease- or status-conditioned write of a settlement was refused: the unit rolls back (host-spec C4)."""


@dataclass(frozen=True)
class Verdict:
    """An invocation's verdict and its evidence.

    Attributes:
        status: SUCCEEDED, FAILED or RECONCILIATION_REQUIRED. error: the verdict's text (None for a success).
        result: the final result (SUCCEEDED only). kind: why an operator must decide (RECONCILIATION_REQUIRED).
        evidence: more of what the operator needs (step, adapter invocation id, external references).
    """

    status: InvocationStatus
    error: str | None = None
    result: Any = None
    kind: ReconciliationKind | None = None
    evidence: dict[str, Any] | None = None

    @property
    def reconciliation(self) -> dict[str, Any] | None:
        """The invocation's ``reconciliation`` JSON: the kind plus the evidence (None when neither)."""
        if self.kind is None and not self.evidence:
            return None
        return {**({"kind": str(self.kind)} if self.kind is not None else {}), **(self.evidence or {})}


def lock_running(tx: FencedUnit, invocation_id: str) -> InvocationRecord:
    """The invocation, locked first in the host's lock order, which must still be ``running``.

    Raises:
        SettlementRefused: absent or no longer running (C10).
    """
    locked = tx.host.lock_invocation(invocation_id)
    if locked is None or locked.status is not InvocationStatus.RUNNING:
        raise SettlementRefused(NO_LONGER_RUNNING)
    return locked


def checkpoint(tx: FencedUnit, write: AdapterWrite) -> None:
    """One lease-conditioned adapter write; a refusal raises ``SettlementRefused`` (C4, C6: never swallowed)."""
    if not tx.host.write_adapter_invocation(write):
        target = getattr(write.mutation, "id", None) or getattr(getattr(write.mutation, "row", None), "id", "?")
        raise SettlementRefused(f"adapter write to {target} refused")


def settlement(invocation: InvocationRecord, verdict: Verdict, *, writes: Sequence[AdapterWrite] = (),
               events: Sequence[NewEvent] = ()) -> Callable[[FencedUnit], None]:
    """The unit that settles ``invocation`` with ``verdict`` (see the module docstring for the order).

    Run it with ``CommandContext.fenced(unit, name=..., finish=CommandStatus.DELIVERED)``: the finish is the
    fence. It may run more than once (busy retries): it has no effect outside the transaction.
    """

    def unit(tx: FencedUnit) -> None:
        lock_running(tx, invocation.id)
        for write in writes:
            checkpoint(tx, write)
        for event in events:
            tx.events.append_event_with_outbox(event)
        payload: dict[str, Any] = {"status": str(verdict.status)}
        if verdict.error is not None:
            payload["error"] = verdict.error
        if verdict.kind is not None:
            payload["kind"] = str(verdict.kind)
        tx.events.append_event_with_outbox(invocation_event(invocation, VERDICT_EVENTS[verdict.status], payload))
        if not tx.host.update_leased_invocation(invocation.id, tx.lease, InvocationVerdict(
                verdict.status, error=verdict.error, result=verdict.result,
                reconciliation=verdict.reconciliation)):
            raise SettlementRefused(NO_LONGER_RUNNING)

    return unit
