"""What an operator reads about invocations (host-spec §2.7, §1.Y-13; ADR 0049): an invocation's history and the
reconciliation queue.

- ``InvocationHistory``: the invocation (with steps), its events in log order (the invocation's and each
  adapter invocation's), both reconciliation logs, the operator's resolution, and the lease timeline folded from
  its command's heartbeat history (``outbox.history.lease_history``).
- ``QueueEntry``: one ``reconciliation_required`` invocation, oldest first: its kind and reason, and what to look
  up at the provider (``Lookup``: vendor, external reference and the ``adapter_invocation_id`` the provider saw
  as its idempotency key) for every step whose effect may exist.
- ``state_json``: a state-bound invocation's binding, its ``StateTransitioned`` fact and the entity's recorded
  state now (ADR 0077).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fencepost.core.statuses import AdapterStatus
from fencepost.host.lifecycle import adapter_subject, invocation_subject
from fencepost.host.state import entity_key, state_event_id
from fencepost.outbox.history import lease_history
from fencepost.store.host_records import (
    AdapterRecord,
    EventRecord,
    InvocationRecord,
    ReconciliationRecord,
    ResolutionRecord,
)
from fencepost.store.ports import UnitOfWork


def state_json(tx: UnitOfWork, record: InvocationRecord) -> dict[str, Any] | None:
    """A state-bound invocation's state, as an operator reads it (host-spec A19; ADR 0077); None when unbound.

    Returns:
        ``subject``, ``entity_id`` and ``target`` (the binding, fixed at submission); ``transition``: its
        ``StateTransitioned`` fact (``event_id``, ``sequence``, ``occurred_at``, ``from``, ``to``, ``set_by``,
        ``at``), or None when the host recorded none (not finished yet, or a verdict that records none); and
        ``recorded``: the entity's recorded state now (``state``, ``previous_state``, ``updated_by_invocation``,
        ``updated_at``), or None when it has none. A later transition by another invocation shows there.
    """
    binding = record.state_binding
    if binding is None:
        return None
    fact = tx.events.get_event(state_event_id(record.id))
    current = tx.host.get_entity_state(entity_key(record))
    transition = None if fact is None else {
        "event_id": fact.id, "sequence": fact.sequence, "occurred_at": fact.occurred_at.isoformat(),
        "from": fact.payload.get("from"), "to": fact.payload.get("to"), "set_by": fact.payload.get("set_by"),
        "at": fact.payload.get("at")}
    recorded = None if current is None else {
        "state": current.state, "previous_state": current.previous_state,
        "updated_by_invocation": current.updated_by_invocation, "updated_at": current.updated_at.isoformat()}
    return {"subject": binding.subject, "entity_id": binding.entity_id, "target": binding.target,
            "transition": transition, "recorded": recorded}


def resolution_json(record: ResolutionRecord | None) -> dict[str, Any] | None:
    """A resolution as plain JSON (None when there is none)."""
    if record is None:
        return None
    return {"id": record.id, "outcome": str(record.outcome), "operator": record.operator, "note": record.note,
            "evidence": record.evidence, "resolved_at": record.created_at.isoformat(),
            "prior": {"status": str(record.prior_status), "error": record.prior_error,
                      "reconciliation": record.prior_reconciliation}}


def reconciliation_json(record: ReconciliationRecord) -> dict[str, Any]:
    """A reconciliation log entry as plain JSON."""
    return {"id": record.id, "log": str(record.log), "kind": str(record.kind),
            "adapter_invocation_id": record.adapter_invocation_id, "payload": record.payload,
            "created_at": record.created_at.isoformat()}


@dataclass(frozen=True)
class Lookup:
    """What to look up at a provider to judge one step: ``vendor`` (the provider), ``external_reference`` (its
    id for the effect, when it gave one), ``adapter_invocation_id`` (the idempotency key fencepost sent it)."""

    step: str
    vendor: str
    operation: str
    status: str
    adapter_invocation_id: str
    external_reference: str | None

    def as_json(self) -> dict[str, Any]:
        return {"step": self.step, "vendor": self.vendor, "operation": self.operation, "status": self.status,
                "adapter_invocation_id": self.adapter_invocation_id, "external_reference": self.external_reference}


def lookups(record: InvocationRecord, rows: list[AdapterRecord]) -> list[Lookup]:
    """The steps whose effect may exist at a provider (ambiguous, succeeded or still running), plus a handoff
    no step row names, in step order."""
    found = [Lookup(r.step_name, r.vendor, r.operation, str(r.status), r.id, r.external_reference)
             for r in sorted(rows, key=lambda r: r.step_index)
             if r.status in (AdapterStatus.AMBIGUOUS, AdapterStatus.SUCCEEDED, AdapterStatus.RUNNING)]
    if record.handoff_reference is not None and record.handoff_provider is not None and not any(
            f.external_reference == record.handoff_reference for f in found):
        details = record.pending_completion or {}
        found.append(Lookup(str(details.get("step") or "handoff"), record.handoff_provider, "handoff", "accepted",
                            str(details.get("adapter_invocation_id") or ""), record.handoff_reference))
    return found


@dataclass(frozen=True)
class QueueEntry:
    """One invocation awaiting an operator (host-spec §2.7): ``kind`` (the reconciliation kind), ``reason`` (the
    verdict's error), ``lookups`` and ``waiting_since`` (the verdict's instant, ISO 8601)."""

    invocation: dict[str, Any]
    kind: str | None
    reason: str | None
    waiting_since: str
    lookups: tuple[Lookup, ...]

    def as_json(self) -> dict[str, Any]:
        return {"invocation": self.invocation, "kind": self.kind, "reason": self.reason,
                "waiting_since": self.waiting_since, "lookups": [lk.as_json() for lk in self.lookups]}


def invocation_events(tx: UnitOfWork, *, tenant_id: str, space_id: str, invocation_id: str,
                      adapter_ids: Iterable[str], state_bound: bool) -> list[EventRecord]:
    """The events about an invocation and its adapter invocations, and its ``StateTransitioned`` fact when it is
    state-bound (whose subject is the bound entity), in log (sequence) order.

    Read by subject, so an invocation's events are found however many other events its space holds (reading
    the space's log and filtering dropped every event after its first 1,000; a new user's trial).
    """
    found: list[EventRecord] = []
    for subject in [invocation_subject(invocation_id), *(adapter_subject(a) for a in adapter_ids)]:
        found.extend(tx.events.list_events(tenant_id=tenant_id, space_id=space_id, subject=subject, limit=10_000))
    fact = tx.events.get_event(state_event_id(invocation_id)) if state_bound else None
    if fact is not None:
        found.append(fact)
    found.sort(key=lambda e: e.sequence)
    return found


def events_of(tx: UnitOfWork, record: InvocationRecord, rows: list[AdapterRecord]) -> list[dict[str, Any]]:
    """The events of the invocation and of its adapter invocations, and its ``StateTransitioned`` fact
    (``invocation_events``), as plain JSON."""
    found = invocation_events(tx, tenant_id=record.tenant_id, space_id=record.space_id, invocation_id=record.id,
                              adapter_ids=[r.id for r in rows], state_bound=record.state_binding is not None)
    return [{"id": e.id, "sequence": e.sequence, "type": e.type, "subject_type": e.subject.subject_type,
             "subject_id": e.subject.subject_id, "occurred_at": e.occurred_at.isoformat(), "payload": e.payload}
            for e in found]


def history(tx: UnitOfWork, record: InvocationRecord, rows: list[AdapterRecord]) -> dict[str, Any]:
    """An invocation's history (see the module docstring) without the invocation itself: ``events``,
    ``reconciliations``, ``resolution``, ``lease_timeline`` and ``lookups``, all plain JSON."""
    return {"events": events_of(tx, record, rows),
            "reconciliations": [reconciliation_json(r) for r in tx.host.list_reconciliations(record.id)],
            "resolution": resolution_json(tx.host.get_resolution(record.id)),
            "lease_timeline": lease_history(tx.outbox.lease_events(record.id)),
            "lookups": [lk.as_json() for lk in lookups(record, rows)]}
