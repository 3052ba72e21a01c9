"""The outbox contract (``OutboxPort``): insert, claim, renew, finish, batched finish, release, reconcile, abort.

Seed: "Durable Command", "Heartbeat And Takeover"; ADR 0002 (the fence), ADR 0008 (batched completion).
Expiry uses ``backend.short_lease`` and ``backend.expire()`` (a clock step, or a short sleep on a server
clock); everything that must stay active uses ``backend.long_lease``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, LeaseActive, LeaseLost, NotFound
from fencepost.core.statuses import CommandStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import ClaimedCommand, CommandRecord, Lease, LeaseEvent
from fencepost.testing.backend import ContractHarness, StoreContract


def insert(store: Store, *ids: str, kind: str = "k", **extra: Any) -> None:
    """Insert PENDING commands ``ids`` of ``kind`` (payload ``{"id": id}``) in one unit."""

    def fn(tx: UnitOfWork) -> None:
        for command_id in ids:
            tx.outbox.insert(command_id=command_id, kind=kind, payload={"id": command_id}, **extra)

    store.transact(fn)


def claim(store: Store, owner: str, lease_seconds: float, kinds: list[str] | None = None,
          limit: int = 10, command_ids: list[str] | None = None) -> list[ClaimedCommand]:
    """Claim up to ``limit`` due commands of ``kinds`` (default ``["k"]``) for ``lease_seconds`` (seconds),
    only among ``command_ids`` when given."""
    return store.transact(lambda tx: tx.outbox.claim(owner=owner, kinds=kinds or ["k"], limit=limit,
                                                        lease_seconds=lease_seconds, command_ids=command_ids))


def claim_one(store: Store, owner: str, lease_seconds: float) -> ClaimedCommand:
    """Claim exactly one command; fails the test when none or more is claimed."""
    got = claim(store, owner, lease_seconds, limit=1)
    assert len(got) == 1
    return got[0]


def read_command(store: Store, command_id: str) -> CommandRecord:
    """The command ``command_id``; fails the test when it does not exist."""
    record = store.read(lambda tx: tx.outbox.get(command_id))
    assert record is not None, f"no command {command_id}"
    return record


def lease_events(store: Store, command_id: str) -> list[LeaseEvent]:
    """The command's heartbeat history, oldest first."""
    return store.read(lambda tx: tx.outbox.lease_events(command_id))


def raw_token(backend: ContractHarness, tx: UnitOfWork, command_id: str) -> str | None:
    """The private ``lease_token`` column, read below the port to prove it never leaks anywhere else."""
    rows = backend.inspect(tx, f"SELECT lease_token FROM commands WHERE id = '{command_id}'")
    return None if rows[0][0] is None else str(rows[0][0])


class OutboxContract(StoreContract):
    """Every ``OutboxPort`` operation on one backend (subclass as ``TestOutbox``)."""

    # ── insert and read ──

    def test_insert_command_is_pending_with_store_times(self, store: Store) -> None:
        def fn(tx: UnitOfWork) -> Any:
            now = tx.now()
            tx.outbox.insert(command_id="c1", kind="k", payload={"b": [1, 2], "a": "é"})
            return now, tx.outbox.get("c1")

        now, record = store.transact(fn)
        assert record.status is CommandStatus.PENDING
        assert record.payload == {"a": "é", "b": [1, 2]}
        assert record.available_at == record.created_at == record.updated_at == now
        assert now.utcoffset() == timedelta(0)
        assert record.delivery_count == 0
        assert record.lease_owner is None and record.lease_until is None and record.finished_at is None

    def test_payload_is_stored_as_canonical_json_text(self, store: Store, backend: ContractHarness) -> None:
        payload = {"z": 1, "a": {"y": [True, None, 1.5]}, "ü": "ß"}
        insert(store, "c1")
        store.transact(lambda tx: tx.outbox.insert(command_id="c2", kind="k", payload=payload))
        text = store.read(lambda tx: backend.inspect(tx, "SELECT payload FROM commands WHERE id = 'c2'"))[0][0]
        assert text == canonical_json(payload)

    def test_get_unknown_command_is_none(self, store: Store) -> None:
        assert store.read(lambda tx: tx.outbox.get("nope")) is None

    def test_duplicate_command_id_is_a_conflict(self, store: Store) -> None:
        insert(store, "c1")
        with pytest.raises(Conflict):
            insert(store, "c1")

    def test_count_commands_by_status(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a", "b", "c")
        claim(store, "w", backend.long_lease, limit=1)
        assert store.read(lambda tx: tx.outbox.count_by_status()) == {
            CommandStatus.PENDING: 2, CommandStatus.PROCESSING: 1}

    def test_pending_by_kind_counts_only_pending_oldest_first(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "y1", kind="y")
        backend.advance(0.01)  # distinct creation instants, also on a real clock
        insert(store, "x1", "x2", "x3", kind="x")
        backend.advance(0.01)  # distinct creation instants, also on a real clock
        insert(store, "z1", kind="z")
        claim(store, "w", backend.long_lease, kinds=["z"], limit=1)  # z is PROCESSING now: not a backlog
        claim(store, "w", backend.long_lease, kinds=["x"], limit=1)
        got = store.read(lambda tx: tx.outbox.pending_by_kind())
        assert [(p.kind, p.pending) for p in got] == [("y", 1), ("x", 2)]
        assert got[0].oldest_created_at == read_command(store, "y1").created_at
        assert got[1].oldest_created_at == read_command(store, "x1").created_at
        assert got[0].oldest_created_at.utcoffset() == timedelta(0)
        # the totals count every kind, also past the limit (a verification trial: a cut list's sum was shown)
        [first] = store.read(lambda tx: tx.outbox.pending_by_kind(limit=1))
        assert (first.kind, first.kinds_total, first.pending_total) == ("y", 2, 3)
        # a prefix selects before the limit: a newer kind is not lost behind older ones of other kinds
        [x] = store.read(lambda tx: tx.outbox.pending_by_kind(prefix="x", limit=1))
        assert (x.kind, x.pending, x.kinds_total, x.pending_total) == ("x", 2, 1, 2)
        assert store.read(lambda tx: tx.outbox.pending_by_kind(prefix="q")) == []

    # ── claim ──

    def test_claim_issues_a_fenced_lease_from_the_store_clock(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        got = claim_one(store, "w1", 30)
        assert (got.id, got.kind, got.payload, got.delivery) == ("c1", "k", {"id": "c1"}, 1)
        lease = got.lease
        assert lease.owner == "w1" and lease.delivery == 1
        events = store.read(lambda tx: tx.outbox.lease_events("c1"))
        assert [(e.event, e.owner, e.delivery) for e in events] == [("claim", "w1", 1)]
        # The deadline is exactly lease_seconds after the instant the claim decision was made.
        assert lease.until - events[0].at == timedelta(seconds=30)
        assert events[0].lease_until == lease.until
        record = read_command(store, "c1")
        assert record.status is CommandStatus.PROCESSING and record.delivery_count == 1
        assert record.lease_owner == "w1" and record.lease_until == lease.until
        assert record.last_heartbeat_at == record.updated_at == events[0].at

    def test_an_active_lease_cannot_be_claimed(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        claim_one(store, "w1", backend.long_lease)
        assert claim(store, "w2", backend.long_lease) == []
        assert read_command(store, "c1").lease_owner == "w1"

    def test_takeover_of_an_expired_lease_fences_the_old_worker(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        old = claim_one(store, "w1", backend.short_lease)
        old_token = store.read(lambda tx: raw_token(backend, tx, "c1"))
        backend.expire()
        new = claim_one(store, "w2", backend.long_lease)
        assert new.id == "c1" and new.delivery == 2 and new.lease.owner == "w2"
        assert new.lease.token != old.lease.token
        assert store.read(lambda tx: raw_token(backend, tx, "c1")) not in (None, old_token)
        events = store.read(lambda tx: tx.outbox.lease_events("c1"))
        assert [(e.event, e.owner, e.delivery) for e in events] == [("claim", "w1", 1), ("takeover", "w2", 2)]
        assert read_command(store, "c1").delivery_count == 2
        # The stale worker can persist nothing more.
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.renew(old.lease, lease_seconds=backend.long_lease))
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.finish(old.lease, CommandStatus.DELIVERED))
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.release(old.lease))
        assert store.transact(lambda tx: tx.outbox.finish_many([old.lease])) == [False]
        record = read_command(store, "c1")
        assert record.status is CommandStatus.PROCESSING and record.lease_owner == "w2"
        store.transact(lambda tx: tx.outbox.finish(new.lease, CommandStatus.DELIVERED))
        assert read_command(store, "c1").status is CommandStatus.DELIVERED

    def test_claim_respects_kinds(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a1", kind="a")
        insert(store, "b1", kind="b")
        insert(store, "c1", kind="c")
        got = claim(store, "w", backend.long_lease, kinds=["c", "a", "a"])
        assert sorted(c.id for c in got) == ["a1", "c1"]
        assert claim(store, "w", backend.long_lease, kinds=["zzz"]) == []
        assert [c.id for c in claim(store, "w", backend.long_lease, kinds=["b"])] == ["b1"]

    def test_claim_respects_limit(self, store: Store, backend: ContractHarness) -> None:
        insert(store, *(f"c{i}" for i in range(5)))
        assert len(claim(store, "w", backend.long_lease, limit=2)) == 2
        assert claim(store, "w", backend.long_lease, limit=0) == []
        assert store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=[], limit=5, lease_seconds=1)) == []
        assert len(claim(store, "w", backend.long_lease, limit=10)) == 3

    def test_claim_limit_spans_kinds(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a1", "a2", kind="a")
        insert(store, "b1", "b2", kind="b")
        assert len(claim(store, "w", backend.long_lease, kinds=["a", "b"], limit=3)) == 3

    def test_claims_are_fair_across_kinds(self, store: Store, backend: ContractHarness) -> None:
        # Issue 10 item 4: 30 of one kind and 5 of another; the first claim of 10 must not be all "a".
        insert(store, *(f"a{i:02d}" for i in range(30)), kind="a")
        insert(store, *(f"b{i}" for i in range(5)), kind="b")
        first = claim(store, "w", backend.long_lease, kinds=["a", "b"], limit=10)
        assert sorted(c.kind for c in first) == ["a"] * 5 + ["b"] * 5
        # What a kind cannot use goes to the kinds that have more.
        second = claim(store, "w", backend.long_lease, kinds=["b", "a"], limit=10)
        assert [c.kind for c in second] == ["a"] * 10

    def test_a_kind_with_little_work_leaves_the_rest_of_the_limit_to_others(
            self, store: Store, backend: ContractHarness) -> None:
        insert(store, *(f"a{i:02d}" for i in range(20)), kind="a")
        insert(store, "b1", "b2", kind="b")
        insert(store, "c1", kind="c")
        got = claim(store, "w", backend.long_lease, kinds=["a", "b", "c"], limit=10)
        assert sorted(c.kind for c in got) == ["a"] * 7 + ["b"] * 2 + ["c"]

    def test_claims_of_one_alternate_between_kinds(self, store: Store, backend: ContractHarness) -> None:
        insert(store, *(f"a{i}" for i in range(4)), kind="a")
        insert(store, *(f"b{i}" for i in range(4)), kind="b")
        kinds = [c.kind for _ in range(6) for c in claim(store, "w", backend.long_lease, kinds=["a", "b"], limit=1)]
        assert len(kinds) == 6
        # The kind served first rotates: no two claims in a row serve the same kind while both have work.
        assert all(x != y for x, y in pairwise(kinds)), kinds

    def test_a_small_kind_is_served_within_two_claims_behind_a_backlog(
            self, store: Store, backend: ContractHarness) -> None:
        # Issue 10's proof: 1,000 commands of kind A and 10 of kind B, claims of 10 (one worker whose batch
        # and concurrency are 10): every B is claimed within the first two claim cycles.
        insert(store, *(f"A{i:04d}" for i in range(1000)), kind="A")
        insert(store, *(f"B{i}" for i in range(10)), kind="B")
        claimed = [c.kind for _ in range(2) for c in claim(store, "w", backend.long_lease, kinds=["A", "B"])]
        assert claimed.count("B") == 10 and len(claimed) == 20

    def test_claim_only_given_commands(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1", "c2", "c3")
        insert(store, "o1", kind="other")
        got = claim(store, "w", backend.long_lease, kinds=["k", "other"], command_ids=["c3", "c1", "nope", "c3"])
        assert sorted(c.id for c in got) == ["c1", "c3"]
        assert [(e.event, e.owner, e.delivery) for e in lease_events(store, "c1")] == [("claim", "w", 1)]
        # An empty list claims nothing; a listed command of another kind, or already leased, is not claimed.
        assert claim(store, "w", backend.long_lease, kinds=["k", "other"], command_ids=[]) == []
        assert claim(store, "w", backend.long_lease, kinds=["k"], command_ids=["o1", "c1"]) == []
        assert [c.id for c in claim(store, "w", backend.long_lease, command_ids=["c2"], limit=5)] == ["c2"]
        assert read_command(store, "o1").status is CommandStatus.PENDING

    def test_claim_of_given_commands_takes_over_expired_leases(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1", "c2")
        claim(store, "w1", backend.short_lease)
        backend.expire()
        got = claim(store, "w2", backend.long_lease, command_ids=["c2"])
        assert [(c.id, c.lease.delivery) for c in got] == [("c2", 2)]
        assert [(e.event, e.owner) for e in lease_events(store, "c2")] == [("claim", "w1"), ("takeover", "w2")]
        assert read_command(store, "c1").lease_owner == "w1"

    def test_claim_takes_expired_leases_first_then_oldest_due(self, store: Store, backend: ContractHarness) -> None:
        now = store.read(lambda tx: tx.now())
        store.transact(lambda tx: tx.outbox.insert(command_id="x", kind="k", payload={},
                                                   available_at=now - timedelta(seconds=100)))
        claim_one(store, "w1", backend.short_lease)
        store.transact(lambda tx: tx.outbox.insert(command_id="late", kind="k", payload={},
                                                   available_at=now - timedelta(seconds=10)))
        store.transact(lambda tx: tx.outbox.insert(command_id="early", kind="k", payload={},
                                                   available_at=now - timedelta(seconds=20)))
        backend.expire()
        assert claim_one(store, "w2", backend.long_lease).id == "x"
        assert claim_one(store, "w2", backend.long_lease).id == "early"
        assert claim_one(store, "w2", backend.long_lease).id == "late"

    def test_a_command_is_not_claimable_before_available_at(self, store: Store, backend: ContractHarness) -> None:
        now = store.read(lambda tx: tx.now())
        store.transact(lambda tx: tx.outbox.insert(command_id="later", kind="k", payload={},
                                                   available_at=now + timedelta(seconds=backend.short_lease)))
        assert claim(store, "w", backend.long_lease) == []
        backend.expire()
        assert [c.id for c in claim(store, "w", backend.long_lease)] == ["later"]

    def test_every_claim_gets_a_fresh_random_token(self, store: Store, backend: ContractHarness) -> None:
        insert(store, *(f"c{i}" for i in range(30)))
        tokens = [c.lease.token for c in claim(store, "w", backend.long_lease, limit=30)]
        assert len(tokens) == 30 and len(set(tokens)) == 30
        assert all(len(t) >= 32 and all(ch in "0123456789abcdef" for ch in t) for t in tokens)

    # ── renew ──

    def test_renew_extends_the_lease_and_records_a_heartbeat(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        first = claim_one(store, "w1", backend.long_lease).lease
        backend.advance(0.05)
        renewed = store.transact(lambda tx: tx.outbox.renew(first, lease_seconds=backend.long_lease))
        assert renewed.token == first.token and renewed.delivery == 1 and renewed.until > first.until
        backend.advance(0.05)
        store.transact(lambda tx: tx.outbox.renew(renewed, lease_seconds=backend.long_lease, record=False))
        events = store.read(lambda tx: tx.outbox.lease_events("c1"))
        assert [e.event for e in events] == ["claim", "heartbeat"]
        assert events[1].lease_until == renewed.until
        assert renewed.until - events[1].at == timedelta(seconds=backend.long_lease)
        record = read_command(store, "c1")
        assert record.last_heartbeat_at is not None and record.last_heartbeat_at > events[1].at

    def test_an_expired_lease_can_still_be_renewed_until_someone_takes_it_over(
            self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        lease = claim_one(store, "w1", backend.short_lease).lease
        backend.expire()
        renewed = store.transact(lambda tx: tx.outbox.renew(lease, lease_seconds=backend.long_lease))
        assert claim(store, "w2", backend.long_lease) == []
        assert read_command(store, "c1").lease_until == renewed.until

    # ── finish and release ──

    @pytest.mark.parametrize(("status", "event"),
                             [(CommandStatus.DELIVERED, "deliver"), (CommandStatus.FAILED, "fail")])
    def test_finish_command_is_terminal_and_clears_the_lease(
            self, store: Store, backend: ContractHarness, status: CommandStatus, event: str) -> None:
        insert(store, "c1")
        lease = claim_one(store, "w1", backend.long_lease).lease
        store.transact(lambda tx: tx.outbox.finish(lease, status, error="boom" if event == "fail" else None))
        record = read_command(store, "c1")
        assert record.status is status and record.finished_at is not None
        assert record.lease_owner is None and record.lease_until is None
        assert record.last_error == ("boom" if event == "fail" else None)
        assert store.read(lambda tx: raw_token(backend, tx, "c1")) is None
        assert [e.event for e in store.read(lambda tx: tx.outbox.lease_events("c1"))] == ["claim", event]
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.finish(lease, status))
        assert claim(store, "w2", backend.long_lease) == []

    def test_finish_command_refuses_a_non_terminal_status(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        lease = claim_one(store, "w1", backend.long_lease).lease
        with pytest.raises(ValueError):
            store.transact(lambda tx: tx.outbox.finish(lease, CommandStatus.PENDING))

    def test_finish_commands_reports_each_lease(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a", "b")
        leases = {c.id: c.lease for c in claim(store, "w1", backend.long_lease)}
        assert store.transact(lambda tx: tx.outbox.abort("b")) is True
        outcome = store.transact(lambda tx: tx.outbox.finish_many([leases["a"], leases["b"]]))
        assert outcome == [True, False]
        assert (read_command(store, "a").status, read_command(store, "b").status) == (
            CommandStatus.DELIVERED, CommandStatus.ABORTED)

    def test_release_returns_the_command_due_now(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        lease = claim_one(store, "w1", backend.long_lease).lease
        store.transact(lambda tx: tx.outbox.release(lease))
        record = read_command(store, "c1")
        assert record.status is CommandStatus.PENDING and record.lease_owner is None
        assert record.available_at == record.updated_at
        again = claim_one(store, "w2", backend.long_lease)
        assert again.delivery == 2
        assert [e.event for e in store.read(lambda tx: tx.outbox.lease_events("c1"))] == [
            "claim", "release", "takeover"]
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.release(lease))

    # ── reconcile ──

    def test_reconcile_an_unknown_command_is_not_found(self, store: Store) -> None:
        with pytest.raises(NotFound):
            store.transact(lambda tx: tx.outbox.reconcile("nope"))

    def test_reconcile_refuses_an_active_lease(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        lease = claim_one(store, "w1", backend.long_lease).lease
        with pytest.raises(LeaseActive) as caught:
            store.transact(lambda tx: tx.outbox.reconcile("c1"))
        assert caught.value.lease_until == lease.until
        assert read_command(store, "c1").status is CommandStatus.PROCESSING
        store.transact(lambda tx: tx.outbox.renew(lease, lease_seconds=backend.long_lease))

    def test_reconcile_returns_an_expired_lease_to_pending(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        lease = claim_one(store, "w1", backend.short_lease).lease
        backend.expire()
        record = store.transact(lambda tx: tx.outbox.reconcile("c1"))
        assert record.status is CommandStatus.PENDING and record.lease_owner is None
        assert record.lease_until is None and record.delivery_count == 1
        assert store.read(lambda tx: raw_token(backend, tx, "c1")) is None
        events = store.read(lambda tx: tx.outbox.lease_events("c1"))
        assert [(e.event, e.owner, e.delivery) for e in events] == [("claim", "w1", 1), ("reconcile", None, 1)]
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.renew(lease, lease_seconds=backend.long_lease))
        assert claim_one(store, "w2", backend.long_lease).delivery == 2

    @pytest.mark.parametrize("state", ["pending", "delivered", "aborted"])
    def test_reconcile_refuses_a_command_that_is_not_processing(
            self, store: Store, backend: ContractHarness, state: str) -> None:
        insert(store, "c1")
        if state == "delivered":
            lease = claim_one(store, "w1", backend.long_lease).lease
            store.transact(lambda tx: tx.outbox.finish(lease, CommandStatus.DELIVERED))
        elif state == "aborted":
            store.transact(lambda tx: tx.outbox.abort("c1"))
        with pytest.raises(Conflict) as caught:
            store.transact(lambda tx: tx.outbox.reconcile("c1"))
        assert not isinstance(caught.value, LeaseActive)

    # ── abort ──

    def test_abort_a_pending_command(self, store: Store) -> None:
        insert(store, "c1")
        assert store.transact(lambda tx: tx.outbox.abort("c1", error="operator")) is True
        record = read_command(store, "c1")
        assert record.status is CommandStatus.ABORTED and record.finished_at is not None
        assert record.last_error == "operator"
        assert [(e.event, e.delivery) for e in store.read(lambda tx: tx.outbox.lease_events("c1"))] == [("abort", 0)]

    def test_abort_fences_the_active_worker(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        lease = claim_one(store, "w1", backend.long_lease).lease
        assert store.transact(lambda tx: tx.outbox.abort("c1")) is True
        assert store.read(lambda tx: raw_token(backend, tx, "c1")) is None
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.renew(lease, lease_seconds=backend.long_lease))
        with pytest.raises(LeaseLost):
            store.transact(lambda tx: tx.outbox.finish(lease, CommandStatus.DELIVERED))
        assert read_command(store, "c1").status is CommandStatus.ABORTED
        assert claim(store, "w2", backend.long_lease) == []

    def test_abort_of_a_terminal_or_unknown_command_changes_nothing(self, store: Store) -> None:
        insert(store, "c1")
        assert store.transact(lambda tx: tx.outbox.abort("c1")) is True
        assert store.transact(lambda tx: tx.outbox.abort("c1")) is False
        assert store.transact(lambda tx: tx.outbox.abort("nope")) is False
        assert len(store.read(lambda tx: tx.outbox.lease_events("c1"))) == 1

    # ── heartbeat history and the private token ──

    def test_lease_events_keep_the_whole_history_in_order(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        first = claim_one(store, "w1", backend.short_lease).lease
        store.transact(lambda tx: tx.outbox.renew(first, lease_seconds=backend.short_lease))
        backend.expire()
        second = claim_one(store, "w2", backend.long_lease).lease
        store.transact(lambda tx: tx.outbox.finish(second, CommandStatus.FAILED, error="x"))
        events = store.read(lambda tx: tx.outbox.lease_events("c1"))
        assert [(e.event, e.owner, e.delivery) for e in events] == [
            ("claim", "w1", 1), ("heartbeat", "w1", 1), ("takeover", "w2", 2), ("fail", "w2", 2)]
        assert [e.seq for e in events] == sorted(e.seq for e in events)
        assert [e.at for e in events] == sorted(e.at for e in events)
        assert all(e.command_id == "c1" and e.at.utcoffset() == timedelta(0) for e in events)
        assert store.read(lambda tx: tx.outbox.lease_events("other")) == []

    def test_the_token_never_leaves_the_lease(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        claimed = claim_one(store, "w1", backend.short_lease)
        token = claimed.lease.token
        assert store.read(lambda tx: raw_token(backend, tx, "c1")) == token
        record = read_command(store, "c1")
        events = store.read(lambda tx: tx.outbox.lease_events("c1"))
        for shown in (repr(claimed), repr(claimed.lease), repr(record), repr(events), str(vars(record))):
            assert token not in shown
        assert "token" not in vars(record)
        backend.expire()
        claim_one(store, "w2", backend.long_lease)
        with pytest.raises(LeaseLost) as lost:
            store.transact(lambda tx: tx.outbox.renew(claimed.lease, lease_seconds=1))
        assert token not in str(lost.value)

    def test_a_constraint_error_never_shows_the_token(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "c1")
        token = claim_one(store, "w1", backend.long_lease).lease.token
        # finished_at on a PROCESSING row violates a CHECK; PostgreSQL's DETAIL would echo the row and its token.
        with pytest.raises(Conflict) as caught:
            store.transact(lambda tx: backend.inspect(
                tx, "UPDATE commands SET finished_at = available_at WHERE id = 'c1'"))
        assert token not in str(caught.value) and backend.hides_location(str(caught.value))

    def test_lease_record_repr_hides_the_token(self) -> None:
        lease = Lease("c1", "w", "secret-token-value", 1, datetime(2026, 1, 1, tzinfo=UTC))
        assert "secret-token-value" not in repr(lease)

    # ── batched completion (ADR 0008) ──

    def test_batch_completion_skips_stale_and_foreign_leases(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a", "b", "c")
        first = {c.id: c for c in store.transact(
            lambda tx: tx.outbox.claim(owner="w1", kinds=["k"], limit=3, lease_seconds=backend.short_lease))}
        assert sorted(first) == ["a", "b", "c"]
        claim_events = store.read(lambda tx: tx.outbox.lease_events("a"))
        assert [(e.event, e.owner, e.delivery, e.lease_until) for e in claim_events] == [
            ("claim", "w1", 1, first["a"].lease.until)]
        backend.expire()
        # "b" is taken over by w2; "c" is aborted; "a" stays w1's (expired but not yet taken over).
        taken = store.transact(lambda tx: tx.outbox.claim(owner="w2", kinds=["k"], limit=1,
                                                          lease_seconds=backend.long_lease))
        assert len(taken) == 1
        stolen = taken[0]
        assert store.transact(lambda tx: tx.outbox.abort("c" if stolen.id != "c" else "b")) is True
        leases = [first[i].lease for i in ("a", "b", "c")]
        outcome = store.transact(lambda tx: tx.outbox.finish_many([*leases, leases[0]]))
        current = [i for i in ("a", "b", "c") if i != stolen.id and read_command(store, i).status is not
                   CommandStatus.ABORTED]
        assert outcome[:3] == [i in current for i in ("a", "b", "c")]
        assert outcome[3] is False, "a lease listed twice is delivered once"
        for i in current:
            assert read_command(store, i).status is CommandStatus.DELIVERED
            events = lease_events(store, i)
            assert [(e.event, e.owner, e.delivery, e.lease_until) for e in events][-1] == ("deliver", "w1", 1, None)
            assert sum(e.event == "deliver" for e in events) == 1
        record = read_command(store, stolen.id)
        assert record.status is CommandStatus.PROCESSING and record.lease_owner == "w2"
        assert [e.event for e in store.read(lambda tx: tx.outbox.lease_events(stolen.id))] == ["claim", "takeover"]
        assert store.transact(lambda tx: tx.outbox.finish_many([stolen.lease])) == [True]
        assert store.transact(lambda tx: tx.outbox.finish_many([])) == []

    def test_batched_completion_tells_the_current_lease_from_a_stale_one_of_the_same_command(
            self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a")
        (stale,) = store.transact(lambda tx: tx.outbox.claim(owner="w1", kinds=["k"], limit=1,
                                                              lease_seconds=backend.short_lease))
        backend.expire()
        (current,) = store.transact(lambda tx: tx.outbox.claim(owner="w2", kinds=["k"], limit=1,
                                                               lease_seconds=backend.long_lease))
        assert store.transact(lambda tx: tx.outbox.finish_many([stale.lease, current.lease])) == [False, True]
        (deliver,) = [e for e in store.read(lambda tx: tx.outbox.lease_events("a")) if e.event == "deliver"]
        assert (deliver.owner, deliver.delivery) == ("w2", 2)

    # ── a completion riding on the next claim (ADR 0093) ──

    def test_finish_and_claim_delivers_one_batch_and_claims_the_next_together(
            self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a", "b")
        first = claim(store, "w1", backend.long_lease)
        insert(store, "c", "d")
        outcome, claimed = store.transact(lambda tx: tx.outbox.finish_and_claim(
            [c.lease for c in first], owner="w1", kinds=["k"], limit=5, lease_seconds=backend.long_lease),
            name="outbox.deliver")
        assert outcome == [True, True]
        assert sorted(c.id for c in claimed) == ["c", "d"] and {c.lease.delivery for c in claimed} == {1}
        for command in claimed:
            record = read_command(store, command.id)
            assert (record.status, record.lease_owner, record.lease_until) == (
                CommandStatus.PROCESSING, "w1", command.lease.until)
            assert [(e.event, e.delivery) for e in lease_events(store, command.id)] == [("claim", 1)]
        for done in ("a", "b"):
            assert read_command(store, done).status is CommandStatus.DELIVERED
            assert [(e.event, e.owner) for e in lease_events(store, done)] == [("claim", "w1"), ("deliver", "w1")]
        # The claimed leases are real: they complete like any other.
        assert store.transact(lambda tx: tx.outbox.finish_many([c.lease for c in claimed])) == [True, True]

    def test_finish_and_claim_never_takes_over_a_command_it_delivers(
            self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a", "b")
        first = {c.id: c for c in claim(store, "w1", backend.short_lease)}
        backend.expire()  # both leases expired, neither taken over
        outcome, claimed = store.transact(lambda tx: tx.outbox.finish_and_claim(
            [first["a"].lease], owner="w1", kinds=["k"], limit=5, lease_seconds=backend.long_lease),
            name="outbox.deliver")
        assert outcome == [True]
        assert [(c.id, c.lease.delivery) for c in claimed] == [("b", 2)], "only the other expired lease is taken over"
        assert read_command(store, "a").status is CommandStatus.DELIVERED
        assert [e.event for e in lease_events(store, "a")] == ["claim", "deliver"]
        assert [e.event for e in lease_events(store, "b")] == ["claim", "takeover"]

    def test_finish_and_claim_with_a_stale_lease_delivers_nothing_and_still_claims(
            self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a")
        (stale,) = claim(store, "w1", backend.short_lease)
        backend.expire()
        (current,) = claim(store, "w2", backend.long_lease)
        insert(store, "b")
        outcome, claimed = store.transact(lambda tx: tx.outbox.finish_and_claim(
            [stale.lease], owner="w1", kinds=["k"], limit=5, lease_seconds=backend.long_lease),
            name="outbox.deliver")
        assert outcome == [False] and [c.id for c in claimed] == ["b"]
        record = read_command(store, "a")
        assert (record.status, record.lease_owner, record.delivery_count) == (CommandStatus.PROCESSING, "w2", 2)
        assert [e.event for e in lease_events(store, "a")] == ["claim", "takeover"]
        assert store.transact(lambda tx: tx.outbox.finish_many([current.lease])) == [True]

    @pytest.mark.parametrize("shape", ["several kinds", "given commands", "a lease listed twice"])
    def test_finish_and_claim_of_every_shape_commits_both_parts(
            self, store: Store, backend: ContractHarness, shape: str) -> None:
        insert(store, "a")
        (first,) = claim(store, "w1", backend.long_lease)
        insert(store, "b")
        leases = [first.lease, first.lease] if shape == "a lease listed twice" else [first.lease]
        kinds = ["k", "other"] if shape == "several kinds" else ["k"]
        given = ["b"] if shape == "given commands" else None
        outcome, claimed = store.transact(lambda tx: tx.outbox.finish_and_claim(
            leases, owner="w1", kinds=kinds, limit=5, lease_seconds=backend.long_lease, command_ids=given),
            name="outbox.deliver")
        assert outcome == [True, False][:len(leases)] and [c.id for c in claimed] == ["b"]
        assert (read_command(store, "a").status, read_command(store, "b").status) == (
            CommandStatus.DELIVERED, CommandStatus.PROCESSING)

    def test_finish_and_claim_is_undone_with_its_transaction(self, store: Store, backend: ContractHarness) -> None:
        insert(store, "a")
        (first,) = claim(store, "w1", backend.long_lease)
        insert(store, "b")

        def unit(tx: UnitOfWork) -> None:
            outcome, claimed = tx.outbox.finish_and_claim([first.lease], owner="w1", kinds=["k"], limit=5,
                                                          lease_seconds=backend.long_lease)
            assert outcome == [True] and [c.id for c in claimed] == ["b"]
            raise RuntimeError("the caller's unit fails after both parts ran")

        with pytest.raises(RuntimeError):
            store.transact(unit)
        assert (read_command(store, "a").status, read_command(store, "b").status) == (
            CommandStatus.PROCESSING, CommandStatus.PENDING)
        assert [e.event for e in lease_events(store, "a")] == ["claim"] and lease_events(store, "b") == []
