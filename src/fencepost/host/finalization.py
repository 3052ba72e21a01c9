"""Settling an invocation: what one verdict commits, and in which order (host-spec J1-J3, K, L1-L3, M, A19; ADR 0002,
ADR 0022, ADR 0031, ADR 0077).

A ``Settlement`` is a verdict with its evidence: adapter checkpoints, events and reconciliation records. The
**atomic unit** (``settlement``) writes them in one fenced transaction, in the order of K1:

1. the invocation row is locked and must still be ``running`` (lock order: invocation first);
2. the adapter checkpoints (``write_adapter_invocation`` under the captured lease);
3. the events (the step's lifecycle events, the action's declared events);
4. for a success of a state-bound action, the Host's ``StateTransitioned`` fact (``record_transition``: the
   entity locked, its guard checked again, its state set to the target unless it has it, the fact appended;
   host-spec A17, A19, J3; ADR 0077);
5. the reconciliation records (first write wins on their stable ids);
6. the verdict's own event and the verdict (``update_leased_invocation`` under the captured lease);
7. the command's finish (``Store.fenced(..., finish=DELIVERED)``): the fence, last, which also releases the
   lease. A stale token touches zero rows there and the whole unit rolls back.

The **verdict-first fallback** (``verdict_unit`` then ``write_evidence``) is for when the atomic unit failed twice
on a store error: the fenced verdict commits alone, then each evidence write is attempted in its own unit
(``host.evidence``) under the settled-verdict condition (``VerdictHeld``: the parent still has exactly this
verdict's status and error). A refused write is telemetry; a raised one is collected and the first is raised
after all were attempted (K5-K7).
An evidence gap left this way is final (K8): nothing repairs it, ``fencepost audit`` reports it.

The execution decides which path a verdict may take (``fencepost.host.execution``); this module only writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fencepost.core.statuses import AdapterStatus, InvocationStatus, ReconciliationKind
from fencepost.host import telemetry
from fencepost.host.lifecycle import (
    STEP_AMBIGUOUS,
    VERDICT_EVENTS,
    adapter_subject,
    invocation_event,
    reconciliation_record,
    step_event,
)
from fencepost.host.state import SetBy, Transition, check_guard, entity_key, transition_event
from fencepost.host.telemetry import Telemetry
from fencepost.store.base import Store
from fencepost.store.host_records import (
    AdapterRecord,
    AdapterScope,
    AdapterWrite,
    InvocationRecord,
    InvocationVerdict,
    LeaseHeld,
    NewEvent,
    NewReconciliation,
    UpdateAdapterRow,
    VerdictHeld,
)
from fencepost.store.ports import FencedUnit, UnitOfWork

#: The message of a refused status check (host-spec C10).
NO_LONGER_RUNNING = "Invocation is no longer running"

#: The name of every evidence unit after a durable verdict (crash points ``host.evidence:<side>-commit@<n>``).
EVIDENCE_UNIT = "host.evidence"

#: Marks a verdict written by the verdict-first fallback, in its ``reconciliation`` JSON (ADR 0031).
SETTLED_BY_FALLBACK = "verdict-first-fallback"


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


@dataclass(frozen=True)
class Settlement:
    """One verdict and the evidence that commits with it (host-spec K1, L2).

    Attributes:
        invocation: the invocation as the execution claimed it. verdict: what it settles to.
        writes: adapter checkpoints, each ``LeaseHeld`` under the execution's captured lease.
        events: lifecycle and declared events, in order. records: reconciliation records (stable ids).
        transition: the state binding's fact, with a ``succeeded`` verdict only (which never takes the
            verdict-first fallback, K10, so the fact never becomes a separate evidence write).
    """

    invocation: InvocationRecord
    verdict: Verdict
    writes: tuple[AdapterWrite, ...] = ()
    events: tuple[NewEvent, ...] = ()
    records: tuple[NewReconciliation, ...] = ()
    transition: Transition | None = None


def lock_running(tx: UnitOfWork | FencedUnit, invocation_id: str) -> InvocationRecord:
    """The invocation, locked first in the host's lock order, which must still be ``running``.

    Raises:
        SettlementRefused: absent or no longer running (C10).
    """
    locked = tx.host.lock_invocation(invocation_id)
    if locked is None or locked.status is not InvocationStatus.RUNNING:
        raise SettlementRefused(NO_LONGER_RUNNING)
    return locked


def _refused(tx: FencedUnit, message: str) -> SettlementRefused:
    """The error of a refused lease-conditioned write: ``LeaseLost`` when the unit's lease is gone (a takeover,
    an operator's reconcile or abort; raised from here), else ``SettlementRefused`` with ``message``. Inside a
    fenced unit a write no longer checks the lease itself (the unit's fence does, ADR 0079), so a refusal asks."""
    tx.outbox.hold(tx.lease)
    return SettlementRefused(message)


def checkpoint(tx: FencedUnit, write: AdapterWrite) -> None:
    """One lease-conditioned adapter write; a refusal raises ``SettlementRefused`` (C4, C6: never swallowed), or
    ``LeaseLost`` when the lease is gone."""
    if not tx.host.write_adapter_invocation(write):
        raise _refused(tx, f"adapter write to {_target(write)} refused")


def _target(write: AdapterWrite) -> str:
    mutation = write.mutation
    return str(getattr(mutation, "id", None) or getattr(getattr(mutation, "row", None), "id", "?"))


def _write_verdict(tx: FencedUnit, invocation: InvocationRecord, verdict: Verdict) -> None:
    payload: dict[str, Any] = {"status": str(verdict.status)}
    if verdict.error is not None:
        payload["error"] = verdict.error
    if verdict.kind is not None:
        payload["kind"] = str(verdict.kind)
    tx.events.append_event_with_outbox(invocation_event(invocation, VERDICT_EVENTS[verdict.status], payload))
    if not tx.host.update_leased_invocation(invocation.id, tx.lease, InvocationVerdict(
            verdict.status, error=verdict.error, result=verdict.result, reconciliation=verdict.reconciliation)):
        raise _refused(tx, NO_LONGER_RUNNING)


def record_transition(tx: FencedUnit, transition: Transition) -> None:
    """The state binding's fact, inside the unit that finalizes a success or parks a handoff (host-spec A17, A19;
    ADR 0077), after the invocation row's lock: the entity's lock and its recorded state; the guard checked
    again against the state before this invocation changed it (another invocation may have moved the entity
    while the steps ran); the state set to the target unless it already has it (the handler set it, or it had
    it before: kept); then ``StateTransitioned`` under its stable id, so a repeated unit keeps one.

    Raises:
        StateRefused: the guard no longer allows the transition; the unit rolls back and the caller decides.
        SettlementRefused: the state write was refused (the invocation is no longer running under this lease).
    """
    invocation = transition.invocation
    binding = invocation.state_binding
    if binding is None:
        raise ValueError(f"invocation {invocation.id} has no state binding")
    key = entity_key(invocation)
    row = tx.host.lock_entity_state(key)
    before = check_guard(transition.guard, invocation, row, transition.params)
    set_by: SetBy
    if row is not None and row.state == binding.target:
        set_by = "handler" if row.updated_by_invocation == invocation.id else "earlier"
    else:
        if tx.host.set_entity_state(key, binding.target, invocation_id=invocation.id, lease=tx.lease) is None:
            raise SettlementRefused(NO_LONGER_RUNNING)
        set_by = "host"
    tx.events.append_event_with_outbox(transition_event(invocation, before, set_by, transition.at))


def settlement(plan: Settlement) -> Callable[[FencedUnit], None]:
    """The atomic unit that settles ``plan`` (see the module docstring for the order).

    Run it with ``CommandContext.fenced(unit, name=..., finish=CommandStatus.DELIVERED)``: the finish is the
    fence. It may run more than once (busy retries, the K3 retry): it has no effect outside the transaction.
    """
    if plan.transition is not None and plan.verdict.status is not InvocationStatus.SUCCEEDED:
        raise ValueError("a state transition commits with a succeeded verdict only (ADR 0077)")

    def unit(tx: FencedUnit) -> None:
        lock_running(tx, plan.invocation.id)
        for write in plan.writes:
            checkpoint(tx, write)
        for event in plan.events:
            tx.events.append_event_with_outbox(event)
        if plan.transition is not None:
            record_transition(tx, plan.transition)
        for record in plan.records:
            tx.host.append_reconciliation(record)
        _write_verdict(tx, plan.invocation, plan.verdict)

    return unit


def unknown_outcome(invocation: InvocationRecord, rows: Sequence[AdapterRecord], reason: str,
                    condition: LeaseHeld | VerdictHeld) -> tuple[tuple[AdapterWrite, ...], tuple[NewEvent, ...],
                                                              tuple[NewReconciliation, ...]]:
    """Unknown-outcome settlement of ``running`` rows (host-spec K1, G7, H6, E10): each row checkpointed
    ``ambiguous`` with its reconciliation metadata, its ``AdapterInvocationAmbiguous`` event and its governance
    reconciliation record, all under stable ids so that a repeated attempt dedups.

    Args:
        condition: ``LeaseHeld`` inside a fenced settlement, ``VerdictHeld`` after a durable verdict (H6).
    Returns:
        (checkpoints, events, records), in row order.
    """
    scope = AdapterScope(invocation.tenant_id, invocation.space_id, invocation.id)
    writes, events, records = [], [], []
    for row in rows:
        meta = {"reason": reason, "external_reference": row.external_reference,
                "event_subject": {"subject_type": adapter_subject(row.id).subject_type, "subject_id": row.id}}
        writes.append(AdapterWrite(scope, UpdateAdapterRow(row.id, AdapterStatus.AMBIGUOUS, error=reason,
                                                           reconciliation=meta), condition,
                                   frozenset({AdapterStatus.RUNNING})))
        events.append(step_event(invocation, row.id, STEP_AMBIGUOUS, {"step": row.step_name, "reason": reason}))
        records.append(reconciliation_record(invocation, row.id, ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS, {
            "step": row.step_name, "reason": reason, "external_reference": row.external_reference}))
    return tuple(writes), tuple(events), tuple(records)


def fallback_verdict(plan: Settlement, cause: BaseException) -> Verdict:
    """The verdict the fallback writes: the plan's, marked as settled by the fallback with the store error that
    forced it, so an operator reading it knows why evidence may be missing (ADR 0031)."""
    verdict = plan.verdict
    evidence = {**(verdict.evidence or {}), "settled_by": SETTLED_BY_FALLBACK,
                "store_error": f"{type(cause).__name__}: {cause}"[:500]}
    return replace(verdict, evidence=evidence)


def verdict_unit(invocation: InvocationRecord, verdict: Verdict) -> Callable[[FencedUnit], None]:
    """The fallback's first unit: the fenced verdict alone (with the verdict's own event), no evidence (K5)."""

    def unit(tx: FencedUnit) -> None:
        lock_running(tx, invocation.id)
        _write_verdict(tx, invocation, verdict)

    return unit


# ── evidence after a durable verdict (K5-K8, L2, H17, H18) ──

@dataclass(frozen=True)
class EvidenceWrite:
    """One independent evidence write after a durable verdict.

    Attributes:
        evidence: what it writes, as telemetry names it (``adapter_checkpoint``, ``event``, ``reconciliation``,
            ``parent_enrichment``). target: the id written. write: the write in an unfenced unit; False when the
            settled-verdict condition no longer held (a refusal).
    """

    evidence: str
    target: str
    write: Callable[[UnitOfWork], bool]


def _conditioned(write: AdapterWrite) -> Callable[[UnitOfWork], bool]:
    return lambda tx: tx.host.write_adapter_invocation(write)


def verdict_held(tx: UnitOfWork, invocation_id: str, held: VerdictHeld) -> bool:
    """Lock the invocation; True while it still has exactly ``held``'s status and error (I3, NULL-safe)."""
    row = tx.host.lock_invocation(invocation_id)
    return row is not None and row.status is held.status and row.error == held.error


def evidence_of(plan: Settlement, held: VerdictHeld) -> list[EvidenceWrite]:
    """The plan's evidence as independent writes under ``held``, in the fallback's order: checkpoints, events,
    reconciliation records (K5; L2's marker, then its events)."""
    invocation_id = plan.invocation.id
    items: list[EvidenceWrite] = []
    for write in plan.writes:
        items.append(EvidenceWrite("adapter_checkpoint", _target(write), _conditioned(replace(write, condition=held))))
    for event in plan.events:
        def append_event(tx: UnitOfWork, e: NewEvent = event) -> bool:
            if not verdict_held(tx, invocation_id, held):
                return False
            tx.events.append_event_with_outbox(e)  # False = already stored: first write wins, not a refusal
            return True
        items.append(EvidenceWrite("event", event.id, append_event))
    for record in plan.records:
        def append_record(tx: UnitOfWork, r: NewReconciliation = record) -> bool:
            if not verdict_held(tx, invocation_id, held):
                return False
            tx.host.append_reconciliation(r)
            return True
        items.append(EvidenceWrite("reconciliation", record.id, append_record))
    return items


def write_evidence(store: Store, invocation_id: str, items: Sequence[EvidenceWrite],
                   sink: Telemetry) -> list[Exception]:
    """Attempt every item, each in its own unit named ``host.evidence`` (its crash points count occurrences:
    ``host.evidence:after-commit@2`` is after the second item), whatever the others did.

    Returns:
        The errors raised, in order (empty when every write was made or refused). A refusal emits
        ``EVIDENCE_REFUSED`` and is not an error (H18); a raised error emits ``EVIDENCE_FAILED``.
    """
    errors: list[Exception] = []
    for item in items:
        try:
            made = store.transact(item.write, name=EVIDENCE_UNIT)
        except Exception as error:  # K7: collect it and go on with the remaining writes
            errors.append(error)
            telemetry.emit(sink, telemetry.EVIDENCE_FAILED, invocation_id=invocation_id, evidence=item.evidence,
                           target=item.target, error=f"{type(error).__name__}: {error}"[:500])
            continue
        if not made:
            telemetry.emit(sink, telemetry.EVIDENCE_REFUSED, invocation_id=invocation_id, evidence=item.evidence,
                           target=item.target)
    return errors
