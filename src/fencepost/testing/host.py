"""The action host's store contract (``HostPort``, ``EventsPort``; host-spec sections B, C, E, I and T).

``HostContract``: invocations bound to their idempotency key, the inline caller's lease at delivery 0, the
lease-conditioned invocation write, and the conditional adapter-row write (scope, duplicate creates,
expected statuses, the lease and verdict conditions, the no-regression rule also held by the database, the
fence last) with the race of a takeover against a stale write (host-spec I17), the append-only reconciliation
logs (first write wins per id and log, in the parent's scope: L13, V), the settled-parent enrichment
(exact status and error, H17) and the external completion handoffs (one per invocation under the lease, parking,
the exact match, the sweep's candidates, the unleased verdict that ends the command: N1, N2, N8, N12, N18, N30),
and the operator's resolution and reads (one resolution per reconciliation_required invocation, moving only its
status, with a copy of the verdict; keyset pages; the queue oldest first: ADRs 0048, 0049).
``EventsContract``: the
first-write-wins event log across the whole store, sequences per space, and the outbox row only for an
event stored now.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from typing import Any

import pytest

from fencepost.core.errors import Conflict, LeaseLost
from fencepost.core.statuses import (
    AdapterStatus,
    CommandStatus,
    EventOutboxStatus,
    InvocationMode,
    InvocationStatus,
    LeaseEventKind,
    ReconciliationKind,
    ReconciliationLog,
)
from fencepost.store.base import Store
from fencepost.store.host_records import (
    AdapterRecord,
    AdapterScope,
    AdapterWrite,
    CreateAdapterRow,
    EventSpace,
    Handoff,
    InvocationRecord,
    InvocationVerdict,
    LeaseHeld,
    NewAdapterRow,
    NewEvent,
    NewInvocation,
    NewReconciliation,
    NewResolution,
    ReconciliationRecord,
    Subject,
    UnleasedVerdict,
    UpdateAdapterRow,
    VerdictHeld,
)
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import Lease
from fencepost.testing.backend import ContractHarness, StoreContract

KIND = "host.invoke:shop.charge@1"  # the command kind of one action version (fencepost.host.kind_of)
TENANT, SPACE = "acme", "shop"


def new_invocation(invocation_id: str, *, key: str | None = None, tenant: str = TENANT, space: str = SPACE,
                   status: InvocationStatus = InvocationStatus.PENDING,
                   mode: InvocationMode = InvocationMode.DISPATCH, **changes: Any) -> NewInvocation:
    """A valid ``NewInvocation`` (key defaults to the id); ``changes`` override any field."""
    fields: dict[str, Any] = dict(
        id=invocation_id, tenant_id=tenant, space_id=space, action_id="shop.charge", action_version=1,
        idempotency_key=key or invocation_id, actor="user:1", authority="role:cashier",
        binding_digest="bd1:" + "0" * 64, params_digest="cp1:" + "1" * 64, params={"amount": 100},
        mode=mode, status=status)
    fields.update(changes)
    return NewInvocation(**fields)


def dispatched(store: Store, invocation_id: str, **changes: Any) -> None:
    """Insert a pending dispatched invocation and its PENDING ``host.invoke`` command in one unit."""

    def fn(tx: UnitOfWork) -> None:
        assert tx.host.insert_invocation(new_invocation(invocation_id, **changes))
        tx.outbox.insert(command_id=invocation_id, kind=KIND, payload={"invocation_id": invocation_id})

    store.transact(fn)


def running(store: Store, invocation_id: str, lease_seconds: float, owner: str = "w1", **changes: Any) -> Lease:
    """A dispatched invocation claimed by ``owner`` and moved to ``running`` under that lease; the lease.

    The claim takes every due ``host.invoke`` command: use it once per test (or before others are due)."""
    dispatched(store, invocation_id, **changes)

    def fn(tx: UnitOfWork) -> Lease:
        claimed = [c for c in tx.outbox.claim(owner=owner, kinds=[KIND], limit=100, lease_seconds=lease_seconds)
                   if c.id == invocation_id]
        assert len(claimed) == 1
        lease = claimed[0].lease
        assert tx.host.update_leased_invocation(invocation_id, lease, InvocationVerdict(
            InvocationStatus.RUNNING, expected=frozenset({InvocationStatus.PENDING})))
        return lease

    return store.transact(fn)


def _spaces_after(after: tuple[str, str] | None, tx: UnitOfWork) -> list[EventSpace]:
    return tx.events.list_event_spaces(limit=1, after=after)


def scope(invocation_id: str, tenant: str = TENANT, space: str = SPACE) -> AdapterScope:
    return AdapterScope(tenant, space, invocation_id)


def row(adapter_id: str, step_index: int = 0, **changes: Any) -> NewAdapterRow:
    """A ``running`` adapter row of step ``step_index`` (name ``charge``)."""
    fields: dict[str, Any] = dict(id=adapter_id, step_index=step_index, step_name="charge", adapter_type="http",
                                  operation="create_charge", vendor="simpay", input={"amount": 100})
    fields.update(changes)
    return NewAdapterRow(**fields)


def write(store: Store, w: AdapterWrite) -> bool:
    """``write_adapter_invocation`` in its own unit."""
    return store.transact(lambda tx: tx.host.write_adapter_invocation(w))


def create(store: Store, invocation_id: str, lease: Lease, adapter_id: str, **changes: Any) -> bool:
    return write(store, AdapterWrite(scope(invocation_id), CreateAdapterRow(row(adapter_id, **changes)),
                                     LeaseHeld(lease)))


def update(store: Store, invocation_id: str, lease: Lease, adapter_id: str, status: AdapterStatus,
           expected: frozenset[AdapterStatus] | None = None, **changes: Any) -> bool:
    return write(store, AdapterWrite(scope(invocation_id), UpdateAdapterRow(adapter_id, status, **changes),
                                     LeaseHeld(lease), expected))


def adapter(store: Store, adapter_id: str) -> AdapterRecord:
    record = store.read(lambda tx: tx.host.get_adapter_invocation(adapter_id))
    assert record is not None, f"no adapter row {adapter_id}"
    return record


def invocation(store: Store, invocation_id: str) -> InvocationRecord:
    record = store.read(lambda tx: tx.host.get_invocation(invocation_id))
    assert record is not None, f"no invocation {invocation_id}"
    return record


def force_status(backend: ContractHarness, store: Store, adapter_id: str, status: AdapterStatus) -> None:
    """Put an adapter row into ``status`` below the ports (the trigger still applies)."""
    store.transact(lambda tx: backend.inspect(
        tx, f"UPDATE adapter_invocations SET status = '{status}' WHERE id = '{adapter_id}'"))


def take_over(store: Store, backend: ContractHarness, owner: str = "w2") -> Lease:
    """Expire every short lease and claim one ``host.invoke`` command as ``owner`` (a takeover); its lease."""
    backend.expire()
    claimed = store.transact(lambda tx: tx.outbox.claim(owner=owner, kinds=[KIND], limit=1,
                                                         lease_seconds=backend.long_lease))
    assert len(claimed) == 1
    return claimed[0].lease


def reconciliation(entry_id: str, invocation_id: str = "inv_1", *,
                   log: ReconciliationLog = ReconciliationLog.GOVERNANCE, tenant: str = TENANT, space: str = SPACE,
                   adapter_invocation_id: str | None = "ai_1", payload: dict[str, Any] | None = None,
                   kind: ReconciliationKind = ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS) -> NewReconciliation:
    """A ``NewReconciliation`` of ``invocation_id`` (default: governance, about ``ai_1``)."""
    return NewReconciliation(id=entry_id, tenant_id=tenant, space_id=space, invocation_id=invocation_id,
                             adapter_invocation_id=adapter_invocation_id, log=log, kind=kind,
                             payload=payload if payload is not None else {"reason": "read timed out"})


def append(store: Store, entry: NewReconciliation) -> bool:
    """``append_reconciliation`` in its own unit."""
    return store.transact(lambda tx: tx.host.append_reconciliation(entry))


def reconciliations(store: Store, invocation_id: str = "inv_1") -> list[ReconciliationRecord]:
    return store.read(lambda tx: tx.host.list_reconciliations(invocation_id))


def settled(store: Store, backend: ContractHarness, invocation_id: str, status: InvocationStatus,
            error: str | None) -> InvocationRecord:
    """A dispatched invocation run under a lease and settled with ``status`` and ``error``; the row."""
    lease = running(store, invocation_id, backend.long_lease)
    assert store.transact(lambda tx: tx.host.update_leased_invocation(
        invocation_id, lease, InvocationVerdict(status, error=error, reconciliation={"kind": "plain"})))
    return invocation(store, invocation_id)


def enrich(store: Store, invocation_id: str, held: VerdictHeld, error: str | None,
           evidence: dict[str, Any] | None) -> bool:
    """``update_settled_invocation`` in its own unit."""
    return store.transact(lambda tx: tx.host.update_settled_invocation(invocation_id, held, error=error,
                                                                       reconciliation=evidence))


def handoff(reference: str = "po_1", *, provider: str = "simpay", due_at: datetime | None = None,
            details: dict[str, Any] | None = None) -> Handoff:
    """A ``Handoff`` of step ``payout`` (``ai_1``) to ``provider``."""
    return Handoff(provider=provider, external_reference=reference,
                   details=details if details is not None else {"step": "payout", "adapter_invocation_id": "ai_1"},
                   due_at=due_at)


def hand_off(store: Store, invocation_id: str, lease: Lease, h: Handoff) -> bool:
    """``record_handoff`` in its own unit."""
    return store.transact(lambda tx: tx.host.record_handoff(invocation_id, lease, h))


def park(store: Store, invocation_id: str, lease: Lease, pending: dict[str, Any] | None = None, *,
         deliver: bool = True) -> bool:
    """``park_invocation`` and, when it parked and ``deliver``, the command finished DELIVERED in the same unit
    (as the host's fenced unit ends it, host-spec N2)."""
    def fn(tx: UnitOfWork) -> bool:
        parked = tx.host.park_invocation(invocation_id, lease, pending if pending is not None else {"result": 1})
        if parked and deliver:
            tx.outbox.finish(lease, CommandStatus.DELIVERED)
        return parked

    return store.transact(fn)


def store_now(store: Store) -> datetime:
    """The store's clock now (SQLite: the ManualClock; PostgreSQL: the server)."""
    return store.read(lambda tx: tx.now())


def overdue(store: Store) -> list[str]:
    """The ids ``list_overdue_handoffs`` returns now, in its order."""
    return [r.id for r in store.read(lambda tx: tx.host.list_overdue_handoffs())]


def unleased(store: Store, invocation_id: str, expected: InvocationStatus, verdict: UnleasedVerdict) -> bool:
    """``lock_invocation`` then ``update_unleased_invocation`` in one unit, as every caller does (N8)."""
    def fn(tx: UnitOfWork) -> bool:
        tx.host.lock_invocation(invocation_id)
        return tx.host.update_unleased_invocation(invocation_id, expected, verdict)

    return store.transact(fn)


def awaiting(store: Store, invocation_id: str, *, error: str = "unknown outcome",
             reconciliation: dict[str, Any] | None = None, **changes: Any) -> None:
    """A dispatched invocation settled ``reconciliation_required`` unleased (its command finished), as the sweep
    or a recovery leaves one for an operator (ADR 0048)."""
    dispatched(store, invocation_id, **changes)
    record = invocation(store, invocation_id)
    assert unleased(store, invocation_id, InvocationStatus.PENDING, verdict_of(
        record, status=InvocationStatus.RECONCILIATION_REQUIRED, error=error,
        reconciliation=reconciliation or {"kind": "adapter_outcome_ambiguous"}))


def resolve_record(store: Store, invocation_id: str, outcome: InvocationStatus, *, tenant: str = TENANT,
                   evidence: dict[str, Any] | None = None) -> bool:
    """``HostPort.record_resolution`` of ``invocation_id`` by ``ops:1`` in its own unit (scope: ``tenant`` and the
    invocation's own space)."""
    space = store.read(lambda tx: tx.host.get_invocation(invocation_id))
    return bool(store.transact(lambda tx: tx.host.record_resolution(NewResolution(
        id=f"res_{invocation_id}", tenant_id=tenant, space_id=space.space_id if space else SPACE,
        invocation_id=invocation_id, outcome=outcome, operator="ops:1", note="looked it up", evidence=evidence,
        request_digest="sha256:request"))))


def verdict_of(record: InvocationRecord, **changes: Any) -> UnleasedVerdict:
    """The ``UnleasedVerdict`` that keeps ``record`` as it is, with ``changes``."""
    fields: dict[str, Any] = dict(
        status=record.status, error=record.error, result=record.result, reconciliation=record.reconciliation,
        pending_completion=record.pending_completion, external_completion=record.external_completion,
        parked_at=record.parked_at, overdue_at=record.overdue_at)
    fields.update(changes)
    return UnleasedVerdict(**fields)


class HostContract(StoreContract):
    """``HostPort``: invocations, the caller lease, and the conditional adapter-row write (host-spec §I)."""

    # ── invocations and their binding (B1, B7, B10) ──
    def test_an_invocation_roundtrips_with_its_full_binding(self, store: Store) -> None:
        dispatched(store, "inv_1")
        got = invocation(store, "inv_1")
        assert (got.tenant_id, got.space_id, got.action_id, got.action_version, got.idempotency_key) == (
            TENANT, SPACE, "shop.charge", 1, "inv_1")
        assert (got.actor, got.authority, got.binding_digest, got.params_digest, got.params) == (
            "user:1", "role:cashier", "bd1:" + "0" * 64, "cp1:" + "1" * 64, {"amount": 100})
        assert (got.status, got.mode, got.error, got.result, got.reconciliation) == (
            InvocationStatus.PENDING, InvocationMode.DISPATCH, None, None, None)
        assert got.attempt_count == 0 and got.lease_owner is None and got.command_status is CommandStatus.PENDING
        assert got.created_at.tzinfo is not None

    @pytest.mark.parametrize("field, value", [("params_digest", "0123456789abcdef"), ("binding_digest", None),
                                              ("action_version", None), ("params_digest", None)])
    def test_the_schema_refuses_a_missing_binding_or_an_unversioned_digest(self, store: Store, field: str,
                                                                           value: Any) -> None:
        with pytest.raises(Conflict):
            store.transact(lambda tx: tx.host.insert_invocation(new_invocation("inv_1", **{field: value})))
        assert store.read(lambda tx: tx.host.get_invocation("inv_1")) is None

    def test_one_key_in_one_scope_is_one_invocation(self, store: Store) -> None:
        dispatched(store, "inv_1", key="order-1")
        assert not store.transact(lambda tx: tx.host.insert_invocation(new_invocation("inv_1", key="order-1")))
        assert not store.transact(lambda tx: tx.host.insert_invocation(new_invocation("inv_2", key="order-1")))
        # the same key in another space or under another action is another invocation (B10)
        assert store.transact(lambda tx: tx.host.insert_invocation(new_invocation("inv_3", key="order-1",
                                                                                   space="other")))
        assert store.transact(lambda tx: tx.host.insert_invocation(new_invocation("inv_4", key="order-1",
                                                                                   action_id="shop.refund")))
        found = store.read(lambda tx: tx.host.find_invocation(tenant_id=TENANT, space_id=SPACE,
                                                               action_id="shop.charge", idempotency_key="order-1"))
        assert found is not None and found.id == "inv_1"
        assert store.read(lambda tx: tx.host.get_invocation("inv_2")) is None

    def test_list_filters_and_orders_newest_first(self, store: Store, backend: ContractHarness) -> None:
        for i in range(3):
            dispatched(store, f"inv_{i}", space="a" if i < 2 else "b")
            backend.advance(0.01)
        listed = store.read(lambda tx: tx.host.list_invocations(space_id="a"))
        assert [r.id for r in listed] == ["inv_1", "inv_0"]
        assert [r.id for r in store.read(lambda tx: tx.host.list_invocations(
            status=InvocationStatus.RUNNING))] == []

    # ── the caller lease (ADR 0022; A4, A8) ──
    def test_an_inline_caller_holds_its_lease_at_delivery_zero_until_a_worker_takes_over(
            self, store: Store, backend: ContractHarness) -> None:
        def fn(tx: UnitOfWork) -> Lease:
            assert tx.host.insert_invocation(new_invocation("inv_1", status=InvocationStatus.RUNNING,
                                                            mode=InvocationMode.INLINE))
            return tx.outbox.insert_leased(command_id="inv_1", kind=KIND, payload={"invocation_id": "inv_1"},
                                           owner="caller", lease_seconds=backend.short_lease)

        lease = store.transact(fn)
        assert lease.delivery == 0
        got = invocation(store, "inv_1")
        assert (got.attempt_count, got.lease_owner, got.command_status) == (0, "caller", CommandStatus.PROCESSING)
        assert store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=[KIND], limit=5,
                                                          lease_seconds=backend.long_lease)) == []
        assert create(store, "inv_1", lease, "ai_1")  # the caller's lease conditions its writes
        taken = take_over(store, backend)
        assert taken.delivery == 1 and invocation(store, "inv_1").attempt_count == 1
        assert not store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", lease, InvocationVerdict(InvocationStatus.FAILED)))

    def test_only_a_host_invocation_may_be_held_at_delivery_zero(self, store: Store,
                                                                 backend: ContractHarness) -> None:
        with pytest.raises(Conflict):
            store.transact(lambda tx: tx.outbox.insert_leased(command_id="c1", kind="other", payload={},
                                                              owner="caller", lease_seconds=backend.long_lease))

    # ── the lease-conditioned invocation write (C3, C4, C10) ──
    def test_update_leased_invocation_needs_the_current_lease_and_an_expected_status(
            self, store: Store, backend: ContractHarness) -> None:
        stale = running(store, "inv_1", backend.short_lease)
        current = take_over(store, backend)
        assert not store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", stale, InvocationVerdict(InvocationStatus.FAILED, error="stale")))
        assert invocation(store, "inv_1").status is InvocationStatus.RUNNING
        done = InvocationVerdict(InvocationStatus.SUCCEEDED, result={"charge": "ch_1"})
        assert store.transact(lambda tx: tx.host.update_leased_invocation("inv_1", current, done))
        got = invocation(store, "inv_1")
        assert (got.status, got.result, got.error) == (InvocationStatus.SUCCEEDED, {"charge": "ch_1"}, None)
        # no longer running: a second verdict under the same lease changes nothing (C10)
        assert not store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", current, InvocationVerdict(InvocationStatus.FAILED, error="late")))
        assert invocation(store, "inv_1").status is InvocationStatus.SUCCEEDED

    # ── the conditional adapter write (I1-I7, I19) ──
    def test_adapter_row_fields_roundtrip_with_the_reconciliation_checkpoint(
            self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        got = adapter(store, "ai_1")
        assert (got.scope, got.step_index, got.step_name, got.adapter_type, got.operation, got.vendor) == (
            scope("inv_1"), 0, "charge", "http", "create_charge", "simpay")
        assert (got.input, got.output, got.status, got.error, got.attempts) == (
            {"amount": 100}, None, AdapterStatus.RUNNING, None, 0)
        checkpoint = {"reason": "read timed out", "external_reference": "ch_9",
                      "event_subject": {"subject_type": "AdapterInvocation", "subject_id": "ai_1"}}
        assert update(store, "inv_1", lease, "ai_1", AdapterStatus.AMBIGUOUS, error="read timed out",
                      reconciliation=checkpoint, external_reference="ch_9", attempts=1)
        got = adapter(store, "ai_1")
        assert (got.status, got.error, got.reconciliation, got.external_reference, got.attempts) == (
            AdapterStatus.AMBIGUOUS, "read timed out", checkpoint, "ch_9", 1)
        assert got.updated_at >= got.created_at
        listed = store.read(lambda tx: tx.host.list_adapter_invocations("inv_1"))
        assert listed == [got]

    def test_lease_condition_refuses_a_stale_token_and_a_parent_not_running(
            self, store: Store, backend: ContractHarness) -> None:
        stale = running(store, "inv_1", backend.short_lease)
        assert create(store, "inv_1", stale, "ai_1")
        current = take_over(store, backend)
        before = adapter(store, "ai_1")
        refused: list[bool] = []
        attempts: list[Callable[[], bool]] = [
            lambda: update(store, "inv_1", stale, "ai_1", AdapterStatus.FAILED, error="stale"),
            lambda: create(store, "inv_1", stale, "ai_2", step_index=1)]
        for attempt in attempts:
            try:
                refused.append(not attempt())
            except LeaseLost:
                refused.append(True)
        assert refused == [True, True]
        assert adapter(store, "ai_1") == before  # C7: the new owner's row is untouched
        assert store.read(lambda tx: tx.host.get_adapter_invocation("ai_2")) is None
        assert store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", current, InvocationVerdict(InvocationStatus.FAILED, error="declined")))
        # the right token, but the parent is no longer running (I2)
        assert not update(store, "inv_1", current, "ai_1", AdapterStatus.FAILED)
        assert adapter(store, "ai_1") == before

    def test_a_stale_lease_found_at_the_fence_rolls_the_whole_unit_back(
            self, store: Store, backend: ContractHarness) -> None:
        stale = running(store, "inv_1", backend.short_lease)
        assert create(store, "inv_1", stale, "ai_1")
        take_over(store, backend)

        def fn(tx: UnitOfWork) -> None:
            tx.events.append_event(NewEvent("ev_1", TENANT, SPACE, Subject("ActionInvocation", "inv_1"), "X"))
            tx.host.write_adapter_invocation(AdapterWrite(scope("inv_1"), UpdateAdapterRow(
                "ai_1", AdapterStatus.SUCCEEDED, output={"charge": "ch_1"}), LeaseHeld(stale)))

        with pytest.raises(LeaseLost):  # I19: zero rows at the fence -> LeaseLost -> rollback
            store.transact(fn)
        assert adapter(store, "ai_1").status is AdapterStatus.RUNNING
        assert store.read(lambda tx: tx.events.get_event("ev_1")) is None

    def test_scope_mismatch_refused(self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        before = adapter(store, "ai_1")
        for foreign in (scope("inv_1", space="other"), scope("inv_1", tenant="other")):
            assert not write(store, AdapterWrite(foreign, UpdateAdapterRow("ai_1", AdapterStatus.FAILED),
                                                 LeaseHeld(lease)))
            assert not write(store, AdapterWrite(foreign, CreateAdapterRow(row("ai_2", 1)), LeaseHeld(lease)))
        assert adapter(store, "ai_1") == before
        assert store.read(lambda tx: tx.host.get_adapter_invocation("ai_2")) is None

    def test_create_duplicate_refused(self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        assert not create(store, "inv_1", lease, "ai_1", input={"amount": 999})
        assert not create(store, "inv_1", lease, "ai_other")  # the same step index twice
        assert adapter(store, "ai_1").input == {"amount": 100}

    @pytest.mark.parametrize("start", [AdapterStatus.SUCCEEDED, AdapterStatus.AMBIGUOUS])
    @pytest.mark.parametrize("target", [AdapterStatus.RUNNING, AdapterStatus.FAILED])
    def test_no_regression_from_terminal_rows(self, store: Store, backend: ContractHarness,
                                              start: AdapterStatus, target: AdapterStatus) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        assert update(store, "inv_1", lease, "ai_1", start)
        before = adapter(store, "ai_1")
        assert not update(store, "inv_1", lease, "ai_1", target)  # expected_statuses omitted (I7)
        assert not update(store, "inv_1", lease, "ai_1", target, expected=frozenset({start}))
        with pytest.raises(Conflict):  # the database refuses it too, whatever writes it
            force_status(backend, store, "ai_1", target)
        assert adapter(store, "ai_1") == before

    @pytest.mark.parametrize("start, target", [
        (AdapterStatus.RUNNING, AdapterStatus.RUNNING), (AdapterStatus.RUNNING, AdapterStatus.SUCCEEDED),
        (AdapterStatus.RUNNING, AdapterStatus.FAILED), (AdapterStatus.RUNNING, AdapterStatus.AMBIGUOUS),
        (AdapterStatus.FAILED, AdapterStatus.RUNNING), (AdapterStatus.SUCCEEDED, AdapterStatus.SUCCEEDED),
        (AdapterStatus.AMBIGUOUS, AdapterStatus.AMBIGUOUS)])
    def test_adapter_transition_matrix_admits_the_allowed_moves(self, store: Store, backend: ContractHarness,
                                                                start: AdapterStatus,
                                                                target: AdapterStatus) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        if start is not AdapterStatus.RUNNING:
            assert update(store, "inv_1", lease, "ai_1", start)
        assert update(store, "inv_1", lease, "ai_1", target, attempts=2)
        assert (adapter(store, "ai_1").status, adapter(store, "ai_1").attempts) == (target, 2)

    def test_expected_statuses_refuse_a_row_that_moved(self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        assert not update(store, "inv_1", lease, "ai_1", AdapterStatus.SUCCEEDED,
                          expected=frozenset({AdapterStatus.FAILED}))
        assert not update(store, "inv_1", lease, "ai_1", AdapterStatus.SUCCEEDED, expected=frozenset())
        assert adapter(store, "ai_1").status is AdapterStatus.RUNNING
        assert update(store, "inv_1", lease, "ai_1", AdapterStatus.SUCCEEDED,
                      expected=frozenset({AdapterStatus.RUNNING}))

    def test_verdict_condition_null_safe(self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        assert store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", lease, InvocationVerdict(InvocationStatus.RECONCILIATION_REQUIRED, error="x")))

        def settled(status: InvocationStatus, error: str | None) -> bool:
            return write(store, AdapterWrite(scope("inv_1"), UpdateAdapterRow("ai_1", AdapterStatus.AMBIGUOUS),
                                             VerdictHeld(status, error)))

        assert not settled(InvocationStatus.RECONCILIATION_REQUIRED, None)
        assert not settled(InvocationStatus.FAILED, "x")
        assert adapter(store, "ai_1").status is AdapterStatus.RUNNING
        assert settled(InvocationStatus.RECONCILIATION_REQUIRED, "x")
        assert adapter(store, "ai_1").status is AdapterStatus.AMBIGUOUS

    def test_verdict_condition_with_an_absent_error_matches_only_an_absent_error(
            self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert create(store, "inv_1", lease, "ai_1")
        assert store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", lease, InvocationVerdict(InvocationStatus.SUCCEEDED)))
        w = AdapterWrite(scope("inv_1"), UpdateAdapterRow("ai_1", AdapterStatus.SUCCEEDED),
                         VerdictHeld(InvocationStatus.SUCCEEDED, None))
        assert write(store, w)
        assert not write(store, AdapterWrite(w.scope, w.mutation, VerdictHeld(InvocationStatus.SUCCEEDED, "")))

    # ── the reconciliation logs (L13, V; ADR 0032) ──
    def test_a_reconciliation_entry_roundtrips(self, store: Store) -> None:
        dispatched(store, "inv_1")
        entry = reconciliation("rc_1", payload={"reason": "read timed out", "reference": "ch_9"},
                               kind=ReconciliationKind.APPLIED_EFFECT)
        assert append(store, entry)
        [got] = reconciliations(store)
        assert (got.id, got.tenant_id, got.space_id, got.invocation_id, got.adapter_invocation_id, got.log,
                got.kind, got.payload) == ("rc_1", TENANT, SPACE, "inv_1", "ai_1", ReconciliationLog.GOVERNANCE,
                                           ReconciliationKind.APPLIED_EFFECT, entry.payload)
        assert got.created_at.tzinfo is not None
        assert append(store, reconciliation("rc_2", adapter_invocation_id=None, log=ReconciliationLog.COMPLETION))
        assert [r.adapter_invocation_id for r in reconciliations(store)] == ["ai_1", None]

    def test_the_same_id_in_the_two_logs_is_two_entries_and_each_log_keeps_its_first(self, store: Store) -> None:
        dispatched(store, "inv_1")
        governance = reconciliation("rc_1", payload={"v": "first"})
        completion = reconciliation("rc_1", payload={"v": "first"}, log=ReconciliationLog.COMPLETION)
        assert append(store, governance)
        assert append(store, completion)
        # a repeated attempt of either log is a no-op that keeps the first payload and kind (L13)
        assert not append(store, reconciliation("rc_1", payload={"v": "second"},
                                                kind=ReconciliationKind.HANDLER_DECISION_REQUIRED))
        assert not append(store, reconciliation("rc_1", payload={"v": "second"}, log=ReconciliationLog.COMPLETION))
        got = reconciliations(store)
        assert sorted((r.id, r.log, r.payload["v"], r.kind) for r in got) == [
            ("rc_1", ReconciliationLog.COMPLETION, "first", ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS),
            ("rc_1", ReconciliationLog.GOVERNANCE, "first", ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS)]

    def test_a_duplicate_in_the_same_unit_is_a_no_op(self, store: Store) -> None:
        dispatched(store, "inv_1")
        assert store.transact(lambda tx: [tx.host.append_reconciliation(reconciliation("rc_1", payload={"v": 1})),
                                          tx.host.append_reconciliation(reconciliation("rc_1", payload={"v": 2}))]
                              ) == [True, False]
        assert [r.payload for r in reconciliations(store)] == [{"v": 1}]

    def test_an_entry_outside_its_parents_scope_is_refused(self, store: Store) -> None:
        dispatched(store, "inv_1")
        for foreign in (reconciliation("rc_1", tenant="other"), reconciliation("rc_1", space="other"),
                        reconciliation("rc_1", "inv_missing")):
            assert not append(store, foreign)
        assert reconciliations(store) == [] and reconciliations(store, "inv_missing") == []
        assert append(store, reconciliation("rc_1"))  # the same id in the parent's own scope is stored

    def test_reconciliations_list_oldest_first_then_by_id_and_log(self, store: Store,
                                                                   backend: ContractHarness) -> None:
        dispatched(store, "inv_1")
        dispatched(store, "inv_2", key="other")
        assert append(store, reconciliation("rc_z"))
        backend.advance(0.01)

        def same_instant(tx: UnitOfWork) -> None:  # one unit: one :now for all three
            for entry in (reconciliation("rc_b"), reconciliation("rc_a"),
                          reconciliation("rc_a", log=ReconciliationLog.COMPLETION)):
                assert tx.host.append_reconciliation(entry)
            assert tx.host.append_reconciliation(reconciliation("rc_0", "inv_2"))

        store.transact(same_instant)
        assert [(r.id, str(r.log)) for r in reconciliations(store)] == [
            ("rc_z", "governance"), ("rc_a", "completion"), ("rc_a", "governance"), ("rc_b", "governance")]
        assert [r.id for r in reconciliations(store, "inv_2")] == ["rc_0"]

    def test_the_reconciliation_log_is_append_only_in_the_database(self, store: Store,
                                                                   backend: ContractHarness) -> None:
        dispatched(store, "inv_1")
        assert append(store, reconciliation("rc_1"))
        before = reconciliations(store)
        def damage(sql: str) -> Callable[[UnitOfWork], list[tuple[Any, ...]]]:
            return lambda tx: backend.inspect(tx, sql)

        for statement in ("UPDATE host_reconciliations SET payload = '{}'", "DELETE FROM host_reconciliations"):
            with pytest.raises(Conflict):
                store.transact(damage(statement))
        assert reconciliations(store) == before

    def test_the_schema_refuses_a_payload_that_is_not_an_object(self, store: Store) -> None:
        dispatched(store, "inv_1")
        with pytest.raises(Conflict):
            append(store, reconciliation("rc_1", payload=[1, 2]))  # type: ignore[arg-type]
        assert reconciliations(store) == []

    # ── settled-parent enrichment (H17, H18, I3) ──
    @pytest.mark.parametrize("held_status, held_error", [
        (InvocationStatus.RECONCILIATION_REQUIRED, None), (InvocationStatus.RECONCILIATION_REQUIRED, ""),
        (InvocationStatus.RECONCILIATION_REQUIRED, "other"), (InvocationStatus.FAILED, "budget exhausted"),
        (InvocationStatus.SUCCEEDED, "budget exhausted")])
    def test_enrichment_is_refused_unless_the_exact_verdict_is_still_held(
            self, store: Store, backend: ContractHarness, held_status: InvocationStatus,
            held_error: str | None) -> None:
        before = settled(store, backend, "inv_1", InvocationStatus.RECONCILIATION_REQUIRED, "budget exhausted")
        assert not enrich(store, "inv_1", VerdictHeld(held_status, held_error), "enriched", {"steps": ["ai_1"]})
        assert invocation(store, "inv_1") == before

    def test_enrichment_replaces_error_and_reconciliation_under_the_exact_verdict(
            self, store: Store, backend: ContractHarness) -> None:
        before = settled(store, backend, "inv_1", InvocationStatus.RECONCILIATION_REQUIRED, "budget exhausted")
        held = VerdictHeld(InvocationStatus.RECONCILIATION_REQUIRED, "budget exhausted")
        evidence = {"kind": "recovery_budget_exhausted", "adapter_reconciliation": [{"id": "ai_1"}]}
        assert enrich(store, "inv_1", held, "budget exhausted; step charge ambiguous", evidence)
        got = invocation(store, "inv_1")
        assert (got.status, got.error, got.reconciliation) == (
            InvocationStatus.RECONCILIATION_REQUIRED, "budget exhausted; step charge ambiguous", evidence)
        assert (got.result, got.attempt_count, got.updated_at >= before.updated_at) == (before.result, 1, True)
        # the verdict held before is gone: a second enrichment under it changes nothing
        assert not enrich(store, "inv_1", held, "again", {"v": 2})
        # replace, not merge: the new holder may clear the evidence
        assert enrich(store, "inv_1", VerdictHeld(got.status, got.error), None, None)
        assert (invocation(store, "inv_1").error, invocation(store, "inv_1").reconciliation) == (None, None)

    @pytest.mark.parametrize("stored, held_error, accepted", [
        (None, None, True), (None, "", False), ("", "", True), ("", None, False), ("x", "x", True),
        ("x", "X", False)])
    def test_enrichment_compares_the_error_null_safely(self, store: Store, backend: ContractHarness,
                                                       stored: str | None, held_error: str | None,
                                                       accepted: bool) -> None:
        before = settled(store, backend, "inv_1", InvocationStatus.FAILED, stored)
        assert enrich(store, "inv_1", VerdictHeld(InvocationStatus.FAILED, held_error), "noted", None) is accepted
        assert invocation(store, "inv_1").error == ("noted" if accepted else before.error)

    def test_enrichment_of_a_missing_or_open_invocation(self, store: Store, backend: ContractHarness) -> None:
        assert not enrich(store, "inv_missing", VerdictHeld(InvocationStatus.FAILED, None), "x", None)
        dispatched(store, "inv_1")
        with pytest.raises(ValueError):  # an open row is written under its lease, never by enrichment
            enrich(store, "inv_1", VerdictHeld(InvocationStatus.PENDING, None), "x", None)
        with pytest.raises(NotImplementedError):  # the completion-digest guard (I4) comes with issue 13
            enrich(store, "inv_1", VerdictHeld(InvocationStatus.FAILED, None, completion_digest="cd1:x"), "x", None)
        assert invocation(store, "inv_1").error is None

    # ── external completion handoffs (host-spec N1, N2, N12, N18, N30; ADR 0034) ──
    def test_a_handoff_roundtrips_with_its_deadline_as_aware_utc(self, store: Store,
                                                                 backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        before = invocation(store, "inv_1")
        assert (before.handoff_provider, before.handoff_reference, before.completion_due_at, before.parked_at,
                before.overdue_at, before.external_completion) == (None, None, None, None, None, None)
        due = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone(timedelta(hours=2)))  # stored as UTC
        details = {"step": "payout", "adapter_invocation_id": "ai_1", "nested": {"n": [1, 2]}}
        assert hand_off(store, "inv_1", lease, handoff("po_1", due_at=due, details=details))
        got = invocation(store, "inv_1")
        assert (got.status, got.handoff_provider, got.handoff_reference, got.pending_completion) == (
            InvocationStatus.RUNNING, "simpay", "po_1", details)
        assert got.completion_due_at == due and got.completion_due_at.utcoffset() == timedelta(0)
        assert (got.parked_at, got.overdue_at, got.external_completion) == (None, None, None)
        assert got.updated_at >= before.updated_at and got.lease_owner == "w1"

    def test_a_second_handoff_in_one_invocation_is_refused(self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert hand_off(store, "inv_1", lease, handoff("po_1"))
        first = invocation(store, "inv_1")
        assert not hand_off(store, "inv_1", lease, handoff("po_2", details={"step": "second"}))
        assert not hand_off(store, "inv_1", lease, handoff("po_1", provider="otherpay"))
        assert invocation(store, "inv_1") == first

    def test_a_handoff_needs_the_current_lease_and_a_running_invocation(self, store: Store,
                                                                        backend: ContractHarness) -> None:
        stale = running(store, "inv_1", backend.short_lease)
        current = take_over(store, backend)
        assert not hand_off(store, "inv_1", stale, handoff())
        assert invocation(store, "inv_1").handoff_reference is None
        dispatched(store, "inv_2", key="other")  # another invocation's lease is no credential here
        assert not hand_off(store, "inv_2", current, handoff())
        assert invocation(store, "inv_2").handoff_reference is None
        assert store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", current, InvocationVerdict(InvocationStatus.FAILED, error="declined")))
        assert not hand_off(store, "inv_1", current, handoff())  # no longer running
        assert invocation(store, "inv_1").handoff_reference is None

    @pytest.mark.parametrize("provider, reference", [("", "po_1"), ("p" * 101, "po_1"), ("simpay", ""),
                                                     ("simpay", "r" * 501)])
    def test_the_schema_refuses_a_provider_or_reference_out_of_bounds(self, store: Store, backend: ContractHarness,
                                                                      provider: str, reference: str) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        with pytest.raises(Conflict):
            hand_off(store, "inv_1", lease, handoff(reference, provider=provider))
        assert invocation(store, "inv_1").handoff_reference is None
        assert hand_off(store, "inv_1", lease, handoff("r" * 500, provider="p" * 100))  # the bounds themselves

    def test_the_schema_keeps_a_handoff_whole_and_its_instants_with_it(self, store: Store,
                                                                       backend: ContractHarness) -> None:
        dispatched(store, "inv_1")
        for damage in ("handoff_provider = 'simpay'", "handoff_reference = 'po_1'",
                       "handoff_provider = 'simpay', handoff_reference = 'po_1', external_completion = '[1]'",
                       *(f"{column} = updated_at" for column in ("completion_due_at", "parked_at", "overdue_at"))):
            def damaged(tx: UnitOfWork, assignment: str = damage) -> list[tuple[Any, ...]]:
                return backend.inspect(tx, f"UPDATE invocations SET {assignment}")

            with pytest.raises(Conflict):
                store.transact(damaged)
        got = invocation(store, "inv_1")
        assert (got.handoff_provider, got.handoff_reference, got.parked_at, got.external_completion) == (
            None, None, None, None)

    def test_parking_sets_parked_at_from_the_store_clock_and_keeps_the_invocation_running(
            self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert hand_off(store, "inv_1", lease, handoff())
        backend.advance(0.05)

        def fn(tx: UnitOfWork) -> tuple[bool, datetime]:
            parked = tx.host.park_invocation("inv_1", lease, {"result": {"payout": "po_1"}})
            tx.outbox.finish(lease, CommandStatus.DELIVERED)
            return parked, tx.now()

        parked, now = store.transact(fn)
        assert parked
        got = invocation(store, "inv_1")
        assert (got.status, got.parked_at, got.updated_at, got.pending_completion) == (
            InvocationStatus.RUNNING, now, now, {"result": {"payout": "po_1"}})
        assert got.parked_at is not None and got.parked_at.utcoffset() == timedelta(0)
        assert (got.command_status, got.lease_owner, got.handoff_reference) == (CommandStatus.DELIVERED, None, "po_1")
        assert store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=[KIND], limit=5,
                                                          lease_seconds=backend.long_lease)) == []

    def test_parking_is_refused_without_a_handoff_and_a_second_time(self, store: Store,
                                                                    backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert not park(store, "inv_1", lease)
        assert invocation(store, "inv_1").parked_at is None
        assert hand_off(store, "inv_1", lease, handoff())
        assert park(store, "inv_1", lease, {"v": 1}, deliver=False)
        first = invocation(store, "inv_1")
        backend.advance(0.05)
        assert not park(store, "inv_1", lease, {"v": 2}, deliver=False)
        assert invocation(store, "inv_1") == first

    def test_parking_needs_the_current_lease(self, store: Store, backend: ContractHarness) -> None:
        stale = running(store, "inv_1", backend.short_lease)
        assert hand_off(store, "inv_1", stale, handoff())
        current = take_over(store, backend)
        assert not park(store, "inv_1", stale)
        assert invocation(store, "inv_1").parked_at is None
        assert park(store, "inv_1", current)
        assert invocation(store, "inv_1").parked_at is not None

    def test_find_handoffs_matches_provider_and_reference_exactly_in_any_status(
            self, store: Store, backend: ContractHarness) -> None:
        for invocation_id, provider, reference in (("inv_a", "simpay", "po_12"), ("inv_b", "otherpay", "po_1"),
                                                   ("inv_c", "simpay", "po_1"), ("inv_d", "simpay", "po_1")):
            lease = running(store, invocation_id, backend.long_lease)
            assert hand_off(store, invocation_id, lease, handoff(reference, provider=provider))
            if invocation_id == "inv_c":
                def ended(tx: UnitOfWork, held: Lease = lease) -> bool:
                    return tx.host.update_leased_invocation("inv_c", held, InvocationVerdict(
                        InvocationStatus.FAILED, error="ended otherwise"))

                assert store.transact(ended)
            backend.advance(0.01)

        def found(provider: str, reference: str) -> list[str]:
            return [r.id for r in store.read(lambda tx: tx.host.find_handoffs(provider=provider,
                                                                              external_reference=reference))]

        assert found("simpay", "po_1") == ["inv_c", "inv_d"]  # oldest first, a failed one included
        assert found("simpay", "po_12") == ["inv_a"] and found("otherpay", "po_1") == ["inv_b"]
        for provider, reference in (("simpay", "po_"), ("simpay", "po_123"), ("simpay", "PO_1"), ("SIMPAY", "po_1"),
                                    ("otherpay", "po_12"), ("simpay", "po_1 "), ("simpay", "po_%")):
            assert found(provider, reference) == [], (provider, reference)
        [record] = store.read(lambda tx: tx.host.find_handoffs(provider="otherpay", external_reference="po_1"))
        assert record == invocation(store, "inv_b")

    def test_list_overdue_handoffs_lists_due_unleased_ones_oldest_due_first(self, store: Store,
                                                                            backend: ContractHarness) -> None:
        now = store_now(store)
        second = timedelta(seconds=1)
        leases = {}
        for invocation_id, due, parked in (("inv_a", now - 2 * second, True), ("inv_b", now - 3 * second, False),
                                           ("inv_d", now + 3600 * second, True), ("inv_e", None, True),
                                           ("inv_f", now - 4 * second, True), ("inv_g", now - 5 * second, True)):
            leases[invocation_id] = lease = running(store, invocation_id, backend.long_lease)
            assert hand_off(store, invocation_id, lease, handoff(f"po_{invocation_id}", due_at=due))
            if parked:
                assert park(store, invocation_id, lease)
        # inv_f was swept already (overdue_at set); inv_g ended otherwise
        assert unleased(store, "inv_f", InvocationStatus.RUNNING, verdict_of(invocation(store, "inv_f"),
                                                                              overdue_at=now))
        assert unleased(store, "inv_g", InvocationStatus.RUNNING, verdict_of(
            invocation(store, "inv_g"), status=InvocationStatus.RECONCILIATION_REQUIRED, error="other"))
        # inv_c: due, not parked, under a short lease that expires below
        leases["inv_c"] = running(store, "inv_c", backend.short_lease)
        assert hand_off(store, "inv_c", leases["inv_c"], handoff("po_inv_c", due_at=now - second))
        assert "inv_b" not in overdue(store)  # a live lease holds it
        backend.expire()
        listed = store.read(lambda tx: tx.host.list_overdue_handoffs())
        assert [r.id for r in listed] == ["inv_a", "inv_c"]
        assert listed[0] == invocation(store, "inv_a") and listed[1].completion_due_at == now - second
        assert [r.id for r in store.read(lambda tx: tx.host.list_overdue_handoffs(limit=1))] == ["inv_a"]
        for limit in (0, 1001):
            def listed_up_to(tx: UnitOfWork, most: int = limit) -> list[InvocationRecord]:
                return tx.host.list_overdue_handoffs(limit=most)

            with pytest.raises(ValueError):
                store.read(listed_up_to)

    def test_a_handoff_becomes_overdue_when_the_store_clock_passes_its_deadline(
            self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        due = store_now(store) + timedelta(seconds=1)
        assert hand_off(store, "inv_1", lease, handoff(due_at=due))
        assert park(store, "inv_1", lease)
        assert overdue(store) == []
        backend.advance(1.2)
        assert overdue(store) == ["inv_1"]

    def test_update_unleased_refuses_another_status_and_a_live_lease(self, store: Store,
                                                                     backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert hand_off(store, "inv_1", lease, handoff(due_at=store_now(store)))
        before = invocation(store, "inv_1")
        swept = verdict_of(before, status=InvocationStatus.RECONCILIATION_REQUIRED, error="did not complete",
                           overdue_at=store_now(store))
        assert not unleased(store, "inv_1", InvocationStatus.PENDING, swept)
        assert not unleased(store, "inv_1", InvocationStatus.RUNNING, swept)  # the live lease holds it
        assert not store.transact(lambda tx: tx.host.update_unleased_invocation(
            "inv_missing", InvocationStatus.RUNNING, swept))
        assert invocation(store, "inv_1") == before
        assert (before.command_status, before.lease_owner) == (CommandStatus.PROCESSING, "w1")
        assert store.transact(lambda tx: tx.host.update_leased_invocation(  # the lease still works
            "inv_1", lease, InvocationVerdict(InvocationStatus.SUCCEEDED)))

    def test_update_unleased_finishes_an_expired_command_so_that_no_claim_finds_it(
            self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.short_lease)
        assert hand_off(store, "inv_1", lease, handoff(due_at=store_now(store)))
        backend.expire()
        assert overdue(store) == ["inv_1"]

        def sweep(tx: UnitOfWork) -> tuple[bool, datetime]:
            record = tx.host.lock_invocation("inv_1")
            assert record is not None
            verdict = verdict_of(record, status=InvocationStatus.RECONCILIATION_REQUIRED,
                                 error="did not complete by its deadline", overdue_at=tx.now())
            return tx.host.update_unleased_invocation("inv_1", InvocationStatus.RUNNING, verdict), tx.now()

        done, now = store.transact(sweep)
        assert done
        got = invocation(store, "inv_1")
        assert (got.status, got.error, got.overdue_at, got.parked_at, got.handoff_reference, got.updated_at) == (
            InvocationStatus.RECONCILIATION_REQUIRED, "did not complete by its deadline", now, None, "po_1", now)
        assert (got.command_status, got.lease_owner, got.lease_until) == (CommandStatus.DELIVERED, None, None)
        assert store.transact(lambda tx: tx.outbox.claim(owner="w2", kinds=[KIND], limit=5,
                                                          lease_seconds=backend.long_lease)) == []
        assert not store.transact(lambda tx: tx.host.update_leased_invocation(
            "inv_1", lease, InvocationVerdict(InvocationStatus.SUCCEEDED)))
        history = store.read(lambda tx: tx.outbox.lease_events("inv_1"))
        assert (history[-1].event, history[-1].owner, history[-1].delivery) == ("deliver", None, 1)
        assert overdue(store) == []

    def test_update_unleased_finishes_a_pending_command(self, store: Store, backend: ContractHarness) -> None:
        dispatched(store, "inv_1")
        assert unleased(store, "inv_1", InvocationStatus.PENDING, verdict_of(
            invocation(store, "inv_1"), status=InvocationStatus.FAILED, error="withdrawn"))
        got = invocation(store, "inv_1")
        assert (got.status, got.error, got.command_status) == (InvocationStatus.FAILED, "withdrawn",
                                                                CommandStatus.DELIVERED)
        assert store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=[KIND], limit=5,
                                                          lease_seconds=backend.long_lease)) == []

    def test_update_unleased_settles_a_parked_handoff_and_roundtrips_every_field(
            self, store: Store, backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert hand_off(store, "inv_1", lease, handoff(due_at=store_now(store)))
        assert park(store, "inv_1", lease, {"result": {"a": 1}})
        parked = invocation(store, "inv_1")
        # N18: aware instants survive the round trip, a non-UTC offset read back as the same instant in UTC
        swept_at = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=-5)))
        completion = {"outcome": "completed", "digest": "cd1:" + "a" * 64, "result": {"paid": True, "n": [1.5]}}
        verdict = UnleasedVerdict(status=InvocationStatus.SUCCEEDED, error=None, result={"a": 1, "paid": True},
                                  reconciliation={"kind": "late"}, pending_completion=None,
                                  external_completion=completion, parked_at=parked.parked_at, overdue_at=swept_at)
        assert unleased(store, "inv_1", InvocationStatus.RUNNING, verdict)
        got = invocation(store, "inv_1")
        assert (got.status, got.error, got.result, got.reconciliation, got.pending_completion,
                got.external_completion) == (InvocationStatus.SUCCEEDED, None, {"a": 1, "paid": True},
                                             {"kind": "late"}, None, completion)
        assert got.parked_at == parked.parked_at and got.overdue_at == swept_at
        assert got.overdue_at is not None and got.overdue_at.utcoffset() == timedelta(0)
        assert got.command_status is CommandStatus.DELIVERED
        history = store.read(lambda tx: tx.outbox.lease_events("inv_1"))
        # only the park's deliver: a command already ended is left as it is
        assert [e.event for e in history].count(LeaseEventKind.DELIVER) == 1
        # the verdict is written under its expected status only
        assert not unleased(store, "inv_1", InvocationStatus.RUNNING, verdict_of(got, error="again"))
        assert invocation(store, "inv_1") == got

    def test_update_unleased_refused_by_the_schema_changes_nothing(self, store: Store) -> None:
        dispatched(store, "inv_1")
        before = invocation(store, "inv_1")
        with pytest.raises(Conflict):  # overdue_at needs a handoff
            unleased(store, "inv_1", InvocationStatus.PENDING, verdict_of(
                before, status=InvocationStatus.RECONCILIATION_REQUIRED, overdue_at=store_now(store)))
        assert invocation(store, "inv_1") == before and before.command_status is CommandStatus.PENDING

    # ── the race (I17) ──
    # ── operator resolutions and the operator's reads (migration 0007; ADRs 0048, 0049) ──
    def test_record_resolution_moves_only_the_status_and_keeps_a_copy_of_the_verdict(self, store: Store) -> None:
        awaiting(store, "inv_r", error="no answer", reconciliation={"kind": "adapter_outcome_ambiguous"})
        before = invocation(store, "inv_r")
        assert resolve_record(store, "inv_r", InvocationStatus.SUCCEEDED, evidence={"charge": "ch_1"})
        after = invocation(store, "inv_r")
        assert after.status is InvocationStatus.SUCCEEDED
        assert (after.error, after.result, after.reconciliation) == (before.error, before.result,
                                                                      before.reconciliation)
        found = store.read(lambda tx: tx.host.get_resolution("inv_r"))
        assert found is not None and found.created_at.tzinfo is not None
        assert (found.id, found.outcome, found.operator, found.note, found.evidence, found.prior_status,
                found.prior_error, found.prior_reconciliation, found.request_digest) == (
            "res_inv_r", InvocationStatus.SUCCEEDED, "ops:1", "looked it up", {"charge": "ch_1"},
            InvocationStatus.RECONCILIATION_REQUIRED, "no answer", {"kind": "adapter_outcome_ambiguous"},
            "sha256:request")
        assert store.read(lambda tx: tx.host.get_resolution("inv_missing")) is None

    def test_record_resolution_refuses_other_statuses_a_second_one_and_another_scope(self, store: Store) -> None:
        dispatched(store, "inv_p")
        assert not resolve_record(store, "inv_p", InvocationStatus.FAILED)  # pending
        assert not resolve_record(store, "inv_missing", InvocationStatus.FAILED)
        awaiting(store, "inv_r")
        assert not resolve_record(store, "inv_r", InvocationStatus.FAILED, tenant="other")
        assert resolve_record(store, "inv_r", InvocationStatus.FAILED)
        assert not resolve_record(store, "inv_r", InvocationStatus.SUCCEEDED)  # one resolution per invocation
        assert invocation(store, "inv_r").status is InvocationStatus.FAILED
        assert invocation(store, "inv_p").status is InvocationStatus.PENDING
        with pytest.raises(Conflict):
            resolve_record(store, "inv_p", InvocationStatus.RECONCILIATION_REQUIRED)

    def test_record_resolution_refuses_a_live_lease(self, store: Store) -> None:
        lease = running(store, "inv_l", 600)
        assert store.transact(lambda tx: tx.host.update_leased_invocation("inv_l", lease, InvocationVerdict(
            InvocationStatus.RECONCILIATION_REQUIRED, error="x")))  # the command is still leased
        assert not resolve_record(store, "inv_l", InvocationStatus.SUCCEEDED)
        assert invocation(store, "inv_l").status is InvocationStatus.RECONCILIATION_REQUIRED

    def test_page_invocations_walks_every_row_once_newest_first(self, store: Store,
                                                                backend: ContractHarness) -> None:
        for i in range(5):
            dispatched(store, f"inv_{i}", tenant="t2" if i == 4 else TENANT)
            backend.advance(0.01)
        seen: list[str] = []
        after: str | None = None

        def page_after(cursor: str | None, limit: int = 2) -> list[InvocationRecord]:
            found: list[InvocationRecord] = store.read(lambda tx: tx.host.page_invocations(after_id=cursor,
                                                                                            limit=limit))
            return found

        while True:
            page = page_after(after)
            seen += [r.id for r in page]
            if len(page) < 2:
                break
            after = page[-1].id
        assert seen == [f"inv_{i}" for i in (4, 3, 2, 1, 0)]
        assert [r.id for r in store.read(lambda tx: tx.host.page_invocations(tenant_id=TENANT, after_id="inv_3"))] \
            == ["inv_2", "inv_1", "inv_0"]
        assert store.read(lambda tx: tx.host.page_invocations(after_id="inv_missing")) == []
        assert store.read(lambda tx: tx.host.page_invocations(status=InvocationStatus.FAILED)) == []
        for limit in (0, 1001):
            with pytest.raises(ValueError):
                page_after(None, limit)

    def test_reconciliation_queue_is_oldest_verdict_first(self, store: Store, backend: ContractHarness) -> None:
        dispatched(store, "inv_pending")
        awaiting(store, "inv_b")
        backend.advance(0.01)
        awaiting(store, "inv_a", space="other")
        assert [r.id for r in store.read(lambda tx: tx.host.reconciliation_queue())] == ["inv_b", "inv_a"]
        assert [r.id for r in store.read(lambda tx: tx.host.reconciliation_queue(space_id="other"))] == ["inv_a"]
        assert resolve_record(store, "inv_b", InvocationStatus.FAILED)
        assert [r.id for r in store.read(lambda tx: tx.host.reconciliation_queue(limit=1))] == ["inv_a"]
        with pytest.raises(ValueError):
            store.read(lambda tx: tx.host.reconciliation_queue(limit=0))

    def test_conditional_write_race(self, store: Store, backend: ContractHarness) -> None:
        """Two threads: takeovers (each followed by the new owner's write) against stale writes of the old
        owner. A stale write may land only before its takeover, where the new owner's write overwrites it:
        every row must end as its new owner wrote it. ``FENCEPOST_RACE_ITERATIONS`` iterations (default 500)."""
        iterations = int(os.environ.get("FENCEPOST_RACE_ITERATIONS", "500"))
        for i in range(iterations):
            dispatched(store, f"inv_{i}")

        def claim_all(tx: UnitOfWork) -> dict[str, Lease]:
            leases = {c.id: c.lease for c in tx.outbox.claim(owner="old", kinds=[KIND], limit=iterations,
                                                             lease_seconds=backend.short_lease)}
            for invocation_id, lease in leases.items():
                assert tx.host.update_leased_invocation(invocation_id, lease, InvocationVerdict(
                    InvocationStatus.RUNNING, expected=frozenset({InvocationStatus.PENDING})))
                assert tx.host.write_adapter_invocation(AdapterWrite(
                    scope(invocation_id), CreateAdapterRow(row(invocation_id.replace("inv_", "ai_"))),
                    LeaseHeld(lease)))
            return leases

        stale = store.transact(claim_all)
        assert len(stale) == iterations
        backend.expire()
        taker, writer = backend.migrated(), backend.migrated()
        new_owner: dict[str, str] = {}
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def takeovers() -> None:
            barrier.wait()
            for _ in range(iterations):
                lease = taker.transact(lambda tx: tx.outbox.claim(
                    owner="new", kinds=[KIND], limit=1, lease_seconds=backend.long_lease))[0].lease
                number = lease.command_id.removeprefix("inv_")
                assert update(taker, lease.command_id, lease, f"ai_{number}", AdapterStatus.RUNNING,
                              error="new owner", attempts=1)
                new_owner[lease.command_id] = lease.owner

        def stale_writes() -> None:
            barrier.wait()
            for i in range(iterations):
                with contextlib.suppress(LeaseLost):
                    update(writer, f"inv_{i}", stale[f"inv_{i}"], f"ai_{i}", AdapterStatus.RUNNING,
                           error="stale owner", attempts=99)

        def guarded(fn: Callable[[], None]) -> Callable[[], None]:
            def body() -> None:
                try:
                    fn()
                except BaseException as error:  # reported below
                    errors.append(error)
            return body

        threads = [threading.Thread(target=guarded(takeovers)), threading.Thread(target=guarded(stale_writes))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not errors, errors
        assert len(new_owner) == iterations
        landed = [i for i in range(iterations) if adapter(store, f"ai_{i}").error != "new owner"]
        assert landed == [], f"stale writes landed after their takeover: {landed}"
        assert {invocation(store, f"inv_{i}").attempt_count for i in range(iterations)} == {2}


def event(event_id: str, *, tenant: str = TENANT, space: str = SPACE, payload: dict[str, Any] | None = None,
          type_: str = "AdapterInvocationSucceeded", subject: str = "inv_1") -> NewEvent:
    return NewEvent(id=event_id, tenant_id=tenant, space_id=space, subject=Subject("ActionInvocation", subject),
                    type=type_, payload=payload if payload is not None else {"n": 1},
                    occurred_at=datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC))


class EventsContract(StoreContract):
    """``EventsPort``: first-write-wins across the store, sequences per space, the outbox only when stored."""

    def test_envelope_roundtrip(self, store: Store) -> None:
        e = NewEvent(id="ev_1", tenant_id=TENANT, space_id=SPACE, subject=Subject("ActionInvocation", "inv_1"),
                     type="StateTransitioned", payload={"to": "charged", "n": [1, 2]},
                     occurred_at=datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC), actor={"id": "user:1"})
        assert store.transact(lambda tx: tx.events.append_event(e))
        got = store.read(lambda tx: tx.events.get_event("ev_1"))
        assert got is not None
        assert (got.id, got.tenant_id, got.space_id, got.subject, got.type, got.payload, got.actor) == (
            e.id, e.tenant_id, e.space_id, e.subject, e.type, e.payload, e.actor)
        assert got.occurred_at == e.occurred_at and got.sequence == 1 and got.recorded_at.tzinfo is not None

    def test_sequence_increases_per_space_inside_the_transaction(self, store: Store) -> None:
        def fn(tx: UnitOfWork) -> None:
            for i in range(3):
                assert tx.events.append_event(event(f"a_{i}"))
            assert tx.events.append_event(event("b_0", space="other"))

        store.transact(fn)
        assert store.transact(lambda tx: tx.events.append_event(event("a_3")))
        listed = store.read(lambda tx: tx.events.list_events(tenant_id=TENANT, space_id=SPACE))
        assert [(e.id, e.sequence) for e in listed] == [("a_0", 1), ("a_1", 2), ("a_2", 3), ("a_3", 4)]
        other = store.read(lambda tx: tx.events.list_events(tenant_id=TENANT, space_id="other"))
        assert [(e.id, e.sequence) for e in other] == [("b_0", 1)]
        after = store.read(lambda tx: tx.events.list_events(tenant_id=TENANT, space_id=SPACE, after=2, limit=1))
        assert [e.id for e in after] == ["a_2"]

    def test_event_spaces_list_every_space_with_its_last_sequence(self, store: Store) -> None:
        assert store.read(lambda tx: tx.events.list_event_spaces()) == []

        def fn(tx: UnitOfWork) -> list[EventSpace]:
            for i in range(3):
                tx.events.append_event(event(f"a_{i}"))
            tx.events.append_event(event("b_0", space="other"))
            tx.events.append_event(event("c_0", tenant="a-tenant", space="zz"))
            return tx.events.list_event_spaces()  # inside the appending transaction: sequences settled first

        expected = [EventSpace("a-tenant", "zz", 1), EventSpace(TENANT, "other", 1), EventSpace(TENANT, SPACE, 3)]
        expected.sort(key=lambda s: (s.tenant_id, s.space_id))
        assert store.transact(fn) == expected
        assert store.read(lambda tx: tx.events.list_event_spaces()) == expected
        assert store.read(lambda tx: tx.events.list_event_spaces(limit=1)) == expected[:1]
        paged: list[EventSpace] = []
        while True:  # one space per page, each page after the last one seen
            last = (paged[-1].tenant_id, paged[-1].space_id) if paged else None
            page = store.read(partial(_spaces_after, last))
            if not page:
                break
            paged.extend(page)
        assert paged == expected
        second = (expected[1].tenant_id, expected[1].space_id)
        assert store.read(lambda tx: tx.events.list_event_spaces(after=second)) == expected[2:]
        with pytest.raises(ValueError, match="limit"):
            store.read(lambda tx: tx.events.list_event_spaces(limit=0))

    def test_append_event_first_write_wins(self, store: Store) -> None:
        assert store.transact(lambda tx: tx.events.append_event(event("ev_1", payload={"v": "A"})))
        assert not store.transact(lambda tx: tx.events.append_event(event("ev_1", payload={"v": "B"},
                                                                          type_="Other")))
        listed = store.read(lambda tx: tx.events.list_events(tenant_id=TENANT, space_id=SPACE))
        assert [(e.id, e.payload, e.type) for e in listed] == [("ev_1", {"v": "A"}, "AdapterInvocationSucceeded")]

    def test_reappend_with_new_sequence_keeps_first(self, store: Store, backend: ContractHarness) -> None:
        store.transact(lambda tx: tx.events.append_event(event("ev_1")))
        first = store.read(lambda tx: tx.events.get_event("ev_1"))
        backend.advance(1.0)
        store.transact(lambda tx: tx.events.append_event(event("ev_2")))
        assert not store.transact(lambda tx: tx.events.append_event(event("ev_1", payload={"n": 2})))
        assert store.read(lambda tx: tx.events.get_event("ev_1")) == first

    def test_a_duplicate_buffered_in_the_same_unit_is_a_no_op(self, store: Store) -> None:
        def fn(tx: UnitOfWork) -> list[bool]:
            return [tx.events.append_event_with_outbox(event("ev_1", payload={"v": "A"})),
                    tx.events.append_event_with_outbox(event("ev_1", payload={"v": "B"}))]

        assert store.transact(fn) == [True, False]
        got = store.read(lambda tx: tx.events.get_event("ev_1"))
        assert got is not None and got.payload == {"v": "A"}

    def test_outbox_after_plain_adds_no_row(self, store: Store) -> None:
        assert store.transact(lambda tx: tx.events.append_event(event("ev_1")))
        assert not store.transact(lambda tx: tx.events.append_event_with_outbox(event("ev_1")))
        assert store.read(lambda tx: tx.events.get_event_outbox("ev_1")) is None

    def test_outbox_row_only_for_the_first_append(self, store: Store) -> None:
        assert store.transact(lambda tx: tx.events.append_event_with_outbox(
            event("ev_1"), destination="webhooks", headers={"h": "1"}))
        row = store.read(lambda tx: tx.events.get_event_outbox("ev_1"))
        assert row is not None
        assert (row.destination, row.headers, row.status, row.attempts) == (
            "webhooks", {"h": "1"}, EventOutboxStatus.PENDING, 0)
        assert not store.transact(lambda tx: tx.events.append_event_with_outbox(event("ev_1"), destination="x"))
        assert store.read(lambda tx: tx.events.get_event_outbox("ev_1")) == row

    def test_event_id_unique_across_tenants(self, store: Store) -> None:
        assert store.transact(lambda tx: tx.events.append_event(event("ev_1", tenant="a")))
        assert not store.transact(lambda tx: tx.events.append_event(event("ev_1", tenant="b")))
        assert not store.transact(lambda tx: tx.events.append_event(event("ev_1", tenant="a", space="s2")))
        assert store.read(lambda tx: tx.events.list_events(tenant_id="b", space_id=SPACE)) == []

    def test_concurrent_appends_get_distinct_sequences_and_one_winner_per_id(self, backend: ContractHarness) -> None:
        backend.migrated()
        stores = [backend.migrated() for _ in range(4)]
        barrier = threading.Barrier(4)
        outcomes: list[list[bool]] = [[] for _ in stores]
        errors: list[BaseException] = []

        def appender(e: NewEvent) -> Callable[[UnitOfWork], bool]:
            return lambda tx: tx.events.append_event(e)

        def body(index: int) -> None:
            try:
                barrier.wait()
                for i in range(10):
                    outcomes[index].append(stores[index].transact(appender(event(f"ev_{i}", payload={"by": index}))))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=body, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        assert [sum(o[i] for o in outcomes) for i in range(10)] == [1] * 10
        listed = stores[0].read(lambda tx: tx.events.list_events(tenant_id=TENANT, space_id=SPACE))
        assert sorted(e.id for e in listed) == sorted(f"ev_{i}" for i in range(10))
        sequences = [e.sequence for e in listed]
        assert sequences == sorted(set(sequences))
