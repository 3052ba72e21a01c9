"""The store contract of the recorded state of bound entities (``HostPort.lock_entity_state``,
``get_entity_state``, ``set_entity_state`` and the invocation's state binding; host-spec A13, A17, A19; ADR 0077).

``EntityStateContract``: an invocation keeps the binding it was inserted with (all of it or none, by the
schema); an entity has no state until a running invocation records one under its own lease; ``previous_state``
is the state before the invocation that last changed it first changed it; the same state again changes nothing;
a write outside the invocation's scope, for an invocation not running or under another command's lease is
refused, and a stale lease found at the fence rolls the unit back; the schema bounds every value; and the
entity's lock holds while the entity has no state yet, so two first transitions of one entity are serialized
(the second reads the first's state).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fencepost.core.errors import Conflict, LeaseLost
from fencepost.core.statuses import InvocationStatus
from fencepost.store.base import Store
from fencepost.store.host_records import (
    EntityBinding,
    EntityKey,
    EntityStateRecord,
    InvocationVerdict,
    NewEvent,
    Subject,
)
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import Lease
from fencepost.testing.backend import ContractHarness, StoreContract
from fencepost.testing.host import KIND, SPACE, TENANT, dispatched, invocation, running, take_over

ORDER = EntityKey(TENANT, SPACE, "order", "o-1")


def set_state(store: Store, state: str, invocation_id: str, lease: Lease,
              key: EntityKey = ORDER) -> EntityStateRecord | None:
    """``set_entity_state`` in its own unit."""
    return store.transact(lambda tx: tx.host.set_entity_state(key, state, invocation_id=invocation_id, lease=lease))


def recorded(store: Store, key: EntityKey = ORDER) -> EntityStateRecord | None:
    return store.read(lambda tx: tx.host.get_entity_state(key))


def claim_running(store: Store, backend: ContractHarness, *invocation_ids: str) -> dict[str, Lease]:
    """Dispatch ``invocation_ids`` and claim them all in one unit, each moved to ``running``: their leases."""
    for invocation_id in invocation_ids:
        dispatched(store, invocation_id)

    def fn(tx: UnitOfWork) -> dict[str, Lease]:
        leases = {c.id: c.lease for c in tx.outbox.claim(owner="w1", kinds=[KIND], limit=100,
                                                         lease_seconds=backend.long_lease)}
        for invocation_id, lease in leases.items():
            assert tx.host.update_leased_invocation(invocation_id, lease, InvocationVerdict(
                InvocationStatus.RUNNING, expected=frozenset({InvocationStatus.PENDING})))
        return leases

    leases = store.transact(fn)
    assert set(leases) == set(invocation_ids)
    return leases


class EntityStateContract(StoreContract):
    """The state binding's records (ADR 0077): the invocation's binding and the entity's recorded state."""

    # ── the invocation's binding ──
    def test_an_invocation_keeps_the_state_binding_it_was_inserted_with(self, store: Store) -> None:
        dispatched(store, "inv_1", state_binding=EntityBinding("order", "o-1", "charged"))
        dispatched(store, "inv_2")
        assert invocation(store, "inv_1").state_binding == EntityBinding("order", "o-1", "charged")
        assert invocation(store, "inv_2").state_binding is None
        listed = {r.id: r.state_binding for r in store.read(lambda tx: tx.host.list_invocations())}
        assert listed == {"inv_1": EntityBinding("order", "o-1", "charged"), "inv_2": None}

    @pytest.mark.parametrize("binding", [
        EntityBinding("", "o-1", "charged"), EntityBinding("order", "", "charged"), EntityBinding("order", "o-1", ""),
        EntityBinding("s" * 101, "o-1", "x"), EntityBinding("order", "e" * 201, "x"),
        EntityBinding("order", "o", "t" * 101)])
    def test_the_schema_refuses_a_binding_out_of_bounds(self, store: Store, binding: EntityBinding) -> None:
        with pytest.raises(Conflict):
            dispatched(store, "inv_1", state_binding=binding)
        assert store.read(lambda tx: tx.host.get_invocation("inv_1")) is None

    def test_the_schema_keeps_a_binding_whole(self, store: Store, backend: ContractHarness) -> None:
        dispatched(store, "inv_1", state_binding=EntityBinding("order", "o-1", "charged"))
        dispatched(store, "inv_2")
        for damage in ("state_target = NULL WHERE id = 'inv_1'", "state_subject = NULL WHERE id = 'inv_1'",
                       "state_subject = 'order' WHERE id = 'inv_2'"):
            def damaged(tx: UnitOfWork, assignment: str = damage) -> list[tuple[Any, ...]]:
                return backend.inspect(tx, f"UPDATE invocations SET {assignment}")

            with pytest.raises(Conflict):
                store.transact(damaged)
        assert invocation(store, "inv_1").state_binding == EntityBinding("order", "o-1", "charged")
        assert invocation(store, "inv_2").state_binding is None

    # ── the recorded state ──
    def test_an_entity_has_no_state_until_a_running_invocation_records_one(self, store: Store,
                                                                           backend: ContractHarness) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        assert recorded(store) is None
        assert store.transact(lambda tx: tx.host.lock_entity_state(ORDER)) is None
        got = set_state(store, "charged", "inv_1", lease)
        assert got is not None and got == recorded(store)
        assert (got.key, got.state, got.previous_state, got.updated_by_invocation) == (
            ORDER, "charged", None, "inv_1")
        assert got.updated_at.tzinfo is not None and got.updated_at >= invocation(store, "inv_1").created_at
        assert store.transact(lambda tx: tx.host.lock_entity_state(ORDER)) == got
        other = EntityKey(TENANT, SPACE, "order", "o-2")
        assert recorded(store, other) is None and recorded(store, EntityKey(TENANT, SPACE, "invoice", "o-1")) is None

    def test_previous_state_is_the_state_before_the_invocation_that_last_changed_it(
            self, store: Store, backend: ContractHarness) -> None:
        leases = claim_running(store, backend, "inv_1", "inv_2")
        assert set_state(store, "reserved", "inv_1", leases["inv_1"]) is not None
        second = set_state(store, "charging", "inv_1", leases["inv_1"])
        assert second is not None and (second.state, second.previous_state) == ("charging", None)
        assert second.state_before("inv_1") is None and second.state_before("inv_2") == "charging"
        third = set_state(store, "charged", "inv_2", leases["inv_2"])
        assert third is not None
        assert (third.state, third.previous_state, third.updated_by_invocation) == ("charged", "charging", "inv_2")
        assert third.state_before("inv_2") == "charging" and third.state_before("inv_1") == "charged"

    def test_the_same_state_again_changes_nothing(self, store: Store, backend: ContractHarness) -> None:
        leases = claim_running(store, backend, "inv_1", "inv_2")
        first = set_state(store, "charged", "inv_1", leases["inv_1"])
        backend.advance(0.05)
        assert set_state(store, "charged", "inv_2", leases["inv_2"]) == first  # kept with its provenance
        assert set_state(store, "charged", "inv_1", leases["inv_1"]) == first
        assert recorded(store) == first

    def test_a_write_needs_the_invocation_running_in_the_entitys_scope_under_its_own_lease(
            self, store: Store, backend: ContractHarness) -> None:
        leases = claim_running(store, backend, "inv_1", "inv_2")
        dispatched(store, "inv_pending")
        refused = [
            set_state(store, "charged", "inv_1", leases["inv_1"], EntityKey("other", SPACE, "order", "o-1")),
            set_state(store, "charged", "inv_1", leases["inv_1"], EntityKey(TENANT, "other", "order", "o-1")),
            set_state(store, "charged", "inv_1", leases["inv_2"]),          # another command's lease
            set_state(store, "charged", "inv_pending", leases["inv_1"]),    # not running
            set_state(store, "charged", "inv_missing", leases["inv_1"]),
        ]
        assert refused == [None] * len(refused)
        assert recorded(store) is None
        assert recorded(store, EntityKey("other", SPACE, "order", "o-1")) is None

    def test_a_stale_lease_found_at_the_fence_rolls_the_whole_unit_back(self, store: Store,
                                                                        backend: ContractHarness) -> None:
        stale = running(store, "inv_1", backend.short_lease)
        take_over(store, backend)

        def fn(tx: UnitOfWork) -> None:
            tx.events.append_event(NewEvent("ev_1", TENANT, SPACE, Subject("order", "o-1"), "StateTransitioned"))
            tx.host.set_entity_state(ORDER, "charged", invocation_id="inv_1", lease=stale)

        with pytest.raises(LeaseLost):
            store.transact(fn)
        assert recorded(store) is None
        assert store.read(lambda tx: tx.events.get_event("ev_1")) is None

    @pytest.mark.parametrize("state, entity_id", [("", "o-1"), ("s" * 101, "o-1"), ("charged", "e" * 201)])
    def test_the_schema_refuses_a_state_or_an_entity_out_of_bounds(self, store: Store, backend: ContractHarness,
                                                                  state: str, entity_id: str) -> None:
        lease = running(store, "inv_1", backend.long_lease)
        key = EntityKey(TENANT, SPACE, "order", entity_id)
        with pytest.raises(Conflict):
            set_state(store, state, "inv_1", lease, key)
        assert recorded(store, key) is None
        assert set_state(store, "s" * 100, "inv_1", lease, EntityKey(TENANT, SPACE, "o" * 100, "e" * 200))

    # ── the entity's lock ──
    def test_the_lock_serializes_two_first_transitions_of_one_entity(self, store: Store,
                                                                    backend: ContractHarness) -> None:
        """Two units lock an entity that has no state yet; the first records ``a`` after a pause. The second's
        read, under the lock, must see ``a`` (a lock that only a row could hold would let it read nothing)."""
        leases = claim_running(store, backend, "inv_a", "inv_b")
        first, second = backend.migrated(busy_wait_seconds=30), backend.migrated(busy_wait_seconds=30)
        locked = threading.Event()
        seen: list[EntityStateRecord | None] = []
        errors: list[BaseException] = []

        def unit_a(tx: UnitOfWork) -> None:
            assert tx.host.lock_entity_state(ORDER) is None
            locked.set()
            time.sleep(0.5)
            assert tx.host.set_entity_state(ORDER, "a", invocation_id="inv_a", lease=leases["inv_a"])

        def unit_b(tx: UnitOfWork) -> None:
            before = tx.host.lock_entity_state(ORDER)
            seen.append(before)
            if before is None:
                tx.host.set_entity_state(ORDER, "b", invocation_id="inv_b", lease=leases["inv_b"])

        def run_a() -> None:
            try:
                first.transact(unit_a)
            except BaseException as error:  # reported below
                locked.set()
                errors.append(error)

        thread = threading.Thread(target=run_a)
        thread.start()
        assert locked.wait(30)
        second.transact(unit_b)
        thread.join(60)
        assert not errors, errors
        assert [s.state if s is not None else None for s in seen] == ["a"], seen
        final = recorded(store)
        assert final is not None and (final.state, final.updated_by_invocation) == ("a", "inv_a")
