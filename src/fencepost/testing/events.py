"""``EventsPort``, the relay's half (issue 15, ADR 0038; host-spec T8, U30): claiming publication rows under
fenced leases, marking them, dead letters and the operator's requeue.

Every stale-lease test checks both halves of the fence: the stale call answers False *and* the row is exactly
as the current holder left it (a stale relay writes nothing).
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from fencepost.core.errors import Conflict, NotFound
from fencepost.core.statuses import EventOutboxStatus
from fencepost.store.base import Store
from fencepost.store.host_records import ClaimedEvent, EventLease, EventOutboxRecord
from fencepost.store.ports import UnitOfWork
from fencepost.testing.backend import ContractHarness, StoreContract
from fencepost.testing.host import SPACE, event

PROBE = "event-append-probe-0b7c1d2e"


def _append(store: Store, *ids: str, space: str = SPACE) -> None:
    def fn(tx: UnitOfWork) -> None:
        for event_id in ids:
            assert tx.events.append_event_with_outbox(event(event_id, space=space))

    store.transact(fn)


def _claim(store: Store, backend: ContractHarness, *, owner: str = "relay-a", limit: int = 10,
           lease: float | None = None) -> list[ClaimedEvent]:
    seconds = backend.long_lease if lease is None else lease
    return store.transact(lambda tx: tx.events.claim_event_outbox(owner=owner, limit=limit, lease_seconds=seconds))


def _row(store: Store, event_id: str) -> EventOutboxRecord:
    row = store.read(lambda tx: tx.events.get_event_outbox(event_id))
    assert row is not None
    return row


class EventRelayContract(StoreContract):
    """The relay's store ports: claim, fence, fail with backoff, dead-letter, release, requeue, list."""

    def test_claim_leases_due_rows_with_fresh_tokens(self, store: Store, backend: ContractHarness) -> None:
        _append(store, "ev_1", "ev_2")
        claimed = _claim(store, backend)
        assert [c.lease.event_id for c in claimed] == ["ev_1", "ev_2"]
        assert all(c.lease.owner == "relay-a" and c.lease.attempts == 1 for c in claimed)
        assert len({c.lease.token for c in claimed}) == 2 and all(len(c.lease.token) >= 16 for c in claimed)
        assert claimed[0].event.id == "ev_1" and claimed[0].event.payload == {"n": 1}
        row = _row(store, "ev_1")
        assert (row.status, row.attempts, row.lease_owner) == (EventOutboxStatus.PROCESSING, 1, "relay-a")
        assert row.lease_until == claimed[0].lease.until
        assert _claim(store, backend, owner="relay-b") == []  # both leased: nothing is due

    def test_claim_respects_the_limit(self, store: Store, backend: ContractHarness) -> None:
        _append(store, *(f"ev_{i}" for i in range(5)))
        assert len(_claim(store, backend, limit=2)) == 2
        assert len(_claim(store, backend, owner="relay-b", limit=10)) == 3

    def test_claim_arguments_are_checked(self, store: Store) -> None:
        for owner, limit, seconds in (("", 1, 1.0), ("r", 0, 1.0), ("r", 1, 0.0)):
            def claim(tx: UnitOfWork, owner: str = owner, limit: int = limit, seconds: float = seconds) -> object:
                return tx.events.claim_event_outbox(owner=owner, limit=limit, lease_seconds=seconds)

            with pytest.raises(ValueError):
                store.transact(claim)

    def test_published_under_the_current_token_only(self, store: Store, backend: ContractHarness) -> None:
        _append(store, "ev_1")
        (claimed,) = _claim(store, backend)
        forged = EventLease(event_id="ev_1", owner="relay-a", token="0" * 32, until=claimed.lease.until, attempts=1)
        assert not store.transact(lambda tx: tx.events.mark_event_published(forged))
        assert _row(store, "ev_1").status == EventOutboxStatus.PROCESSING
        assert store.transact(lambda tx: tx.events.mark_event_published(claimed.lease))
        row = _row(store, "ev_1")
        assert (row.status, row.lease_owner, row.lease_until, row.last_error) == (
            EventOutboxStatus.PUBLISHED, None, None, None)
        assert row.published_at is not None
        # marked once: the same lease cannot mark it again, and a published row is never claimed
        assert not store.transact(lambda tx: tx.events.mark_event_published(claimed.lease))
        backend.expire()
        assert _claim(store, backend) == []

    def test_expired_lease_is_reclaimed_and_the_stale_relay_writes_nothing(
            self, store: Store, backend: ContractHarness) -> None:
        _append(store, "ev_1")
        (old,) = _claim(store, backend, lease=backend.short_lease)
        backend.expire()
        (new,) = _claim(store, backend, owner="relay-b")
        assert new.lease.token != old.lease.token and new.lease.attempts == 2
        before = _row(store, "ev_1")
        assert before.lease_owner == "relay-b"
        for write in (lambda tx: tx.events.mark_event_published(old.lease),
                      lambda tx: tx.events.mark_event_failed(old.lease, error="stale", retry_in_seconds=0),
                      lambda tx: tx.events.dead_letter_event(old.lease, error="stale"),
                      lambda tx: tx.events.release_event(old.lease)):
            assert store.transact(write) is False
            assert _row(store, "ev_1") == before
        assert store.transact(lambda tx: tx.events.renew_event_lease(old.lease, lease_seconds=60)) is None
        assert _row(store, "ev_1") == before
        assert store.transact(lambda tx: tx.events.mark_event_published(new.lease))

    def test_renewal_keeps_the_row_leased(self, store: Store, backend: ContractHarness) -> None:
        _append(store, "ev_1")
        (claimed,) = _claim(store, backend, lease=backend.short_lease)
        renewed = store.transact(lambda tx: tx.events.renew_event_lease(claimed.lease,
                                                                         lease_seconds=backend.long_lease))
        assert renewed is not None and renewed.until > claimed.lease.until and renewed.token == claimed.lease.token
        backend.expire()
        assert _claim(store, backend, owner="relay-b") == []  # renewed past the short lease: not taken over
        assert _row(store, "ev_1").lease_until == renewed.until

    def test_failure_sets_retry_availability_by_the_store_clock(self, store: Store, backend: ContractHarness) -> None:
        _append(store, "ev_1")
        (claimed,) = _claim(store, backend)
        retry_in = backend.short_lease
        assert store.transact(lambda tx: tx.events.mark_event_failed(claimed.lease, error="HTTP 500",
                                                                      retry_in_seconds=retry_in))
        row = _row(store, "ev_1")
        assert (row.status, row.last_error, row.lease_owner, row.attempts) == (
            EventOutboxStatus.RETRY_PENDING, "HTTP 500", None, 1)
        assert row.updated_at is not None
        assert row.available_at >= row.updated_at + timedelta(seconds=retry_in) - timedelta(milliseconds=1)
        assert _claim(store, backend) == []  # not due before its availability
        backend.expire()
        (again,) = _claim(store, backend)
        assert again.lease.attempts == 2 and again.outbox.last_error == "HTTP 500"
        with pytest.raises(ValueError):
            store.transact(lambda tx: tx.events.mark_event_failed(again.lease, error="x", retry_in_seconds=-1))

    def test_dead_letter_keeps_the_last_error_and_is_never_claimed(self, store: Store,
                                                                  backend: ContractHarness) -> None:
        _append(store, "ev_1")
        (claimed,) = _claim(store, backend)
        assert store.transact(lambda tx: tx.events.dead_letter_event(claimed.lease, error="refused: 403"))
        row = _row(store, "ev_1")
        assert (row.status, row.last_error, row.lease_owner) == (EventOutboxStatus.DEAD_LETTERED, "refused: 403", None)
        backend.expire()
        assert _claim(store, backend) == []
        listed = store.read(lambda tx: tx.events.list_event_outbox(status=EventOutboxStatus.DEAD_LETTERED))
        assert [r.event_id for r in listed] == ["ev_1"]

    def test_requeue_brings_a_dead_letter_back_with_a_fresh_budget(self, store: Store,
                                                                   backend: ContractHarness) -> None:
        _append(store, "ev_1", "ev_2")
        (first, _second) = _claim(store, backend)
        store.transact(lambda tx: tx.events.dead_letter_event(first.lease, error="gone"))
        row = store.transact(lambda tx: tx.events.requeue_event("ev_1"))
        assert (row.status, row.attempts) == (EventOutboxStatus.PENDING, 0)
        (again,) = _claim(store, backend)
        assert again.lease.event_id == "ev_1" and again.lease.attempts == 1
        with pytest.raises(Conflict, match="not dead_lettered"):  # processing now
            store.transact(lambda tx: tx.events.requeue_event("ev_1"))
        with pytest.raises(NotFound):
            store.transact(lambda tx: tx.events.requeue_event("ev_missing"))

    def test_probe_spaces_are_never_claimed_nor_requeued(self, store: Store, backend: ContractHarness) -> None:
        _append(store, "probe_1", space=PROBE)
        _append(store, "ev_1", space="event-append-prob")  # a near miss of the prefix is an ordinary space
        _append(store, "ev_2", space="EVENT-APPEND-PROBE-x")  # the prefix is case-sensitive on every backend
        claimed = _claim(store, backend, limit=100)
        assert sorted(c.lease.event_id for c in claimed) == ["ev_1", "ev_2"]
        backend.expire()
        assert all(c.lease.event_id != "probe_1" for c in _claim(store, backend, limit=100))
        assert _row(store, "probe_1").status == EventOutboxStatus.PENDING
        # a probe row that is dead-lettered (the conformance cleanup does so) stays one
        store.transact(lambda tx: backend.inspect(tx, "UPDATE host_event_outbox SET status = 'dead_lettered' "
                                                      "WHERE event_id = 'probe_1' RETURNING event_id"))
        with pytest.raises(Conflict, match="probe space"):
            store.transact(lambda tx: tx.events.requeue_event("probe_1"))
        assert _row(store, "probe_1").status == EventOutboxStatus.DEAD_LETTERED

    def test_release_gives_the_row_back_now_with_its_attempt(self, store: Store, backend: ContractHarness) -> None:
        _append(store, "ev_1")
        (claimed,) = _claim(store, backend)
        backend.advance(backend.short_lease)
        _append(store, "ev_2")  # newer than ev_1, older than its release
        backend.advance(backend.short_lease)
        assert store.transact(lambda tx: tx.events.release_event(claimed.lease))
        row = _row(store, "ev_1")
        assert (row.status, row.attempts, row.lease_owner) == (EventOutboxStatus.PENDING, 0, None)
        (again,) = _claim(store, backend, limit=1)  # it kept its place: claimed before the newer row (ADR 0109)
        assert (again.lease.event_id, again.lease.attempts) == ("ev_1", 1)

    def test_summary_counts_and_oldest_backlog(self, store: Store, backend: ContractHarness) -> None:
        empty = store.read(lambda tx: tx.events.summarize_event_outbox())
        assert (empty.counts, empty.backlog, empty.oldest_unpublished_age_seconds) == ({}, 0, None)
        _append(store, "ev_1")
        backend.advance(backend.short_lease)
        _append(store, "ev_2", "ev_3")
        (first, *_rest) = _claim(store, backend, limit=1)
        store.transact(lambda tx: tx.events.mark_event_published(first.lease))
        summary = store.read(lambda tx: tx.events.summarize_event_outbox())
        assert summary.counts == {"published": 1, "pending": 2} and summary.backlog == 2
        age = summary.oldest_unpublished_age_seconds
        assert age is not None and 0 <= age < backend.long_lease
        listed = store.read(lambda tx: tx.events.list_event_outbox())
        assert [r.event_id for r in listed] == ["ev_1", "ev_2", "ev_3"]
        assert listed[1].space_id == SPACE and listed[1].event_type == "AdapterInvocationSucceeded"
        pending = store.read(lambda tx: tx.events.list_event_outbox(status=EventOutboxStatus.PENDING, limit=1))
        assert [r.event_id for r in pending] == ["ev_2"]

    def test_concurrent_claimers_never_share_a_row(self, backend: ContractHarness) -> None:
        backend.migrated()
        stores = [backend.migrated() for _ in range(4)]
        _append(stores[0], *(f"ev_{i:02d}" for i in range(40)))
        barrier = threading.Barrier(4)
        got: list[list[str]] = [[] for _ in stores]
        errors: list[BaseException] = []

        def body(index: int) -> None:
            try:
                barrier.wait()
                while True:
                    claimed = _claim(stores[index], backend, owner=f"relay-{index}", limit=3)
                    if not claimed:
                        return
                    got[index].extend(c.lease.event_id for c in claimed)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=body, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        every = [event_id for ids in got for event_id in ids]
        assert sorted(every) == [f"ev_{i:02d}" for i in range(40)]  # each row exactly once
