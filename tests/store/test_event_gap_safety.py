"""A reader that tails the event log by sequence never skips an event (issue 15; ADRs 0041, 0096), on every backend.

The known failure of event stores that tail by a serial id: transaction A takes sequence 5, transaction B takes 6
and commits first; a reader that saw 6 moves its cursor past 5, which commits a moment later and is never read.
fencepost takes a space's sequence from its ``host_event_sequences`` row, locked until COMMIT, so sequence order
is commit order. On SQLite the append takes it and a second appender waits for the first transaction to end
(one writer at a time). On PostgreSQL the sequence is taken as the transaction commits (ADR 0096): a second
appender of the space commits while the first is still open, and takes the first number. The test holds A open
on one connection, appends B on another, tails with a third, and checks the reader's view at every point.
"""

from __future__ import annotations

import threading
import time

from fencepost.store.base import Store
from fencepost.store.host_records import NewEvent, Subject
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import StoreBackend


def event(n: int, space: str = "s") -> NewEvent:
    return NewEvent(id=f"evt-{space}-{n}", tenant_id="t", space_id=space, subject=Subject("Test", str(n)),
                    type="Tested", payload={"n": n})


def tail(store: Store, after: int, space: str = "s") -> list[int]:
    return [e.sequence for e in store.read(lambda tx: tx.events.list_events(tenant_id="t", space_id=space,
                                                                             after=after))]


def ids(store: Store, space: str = "s") -> list[tuple[int, str]]:
    return [(e.sequence, e.id) for e in store.read(lambda tx: tx.events.list_events(tenant_id="t", space_id=space))]


def test_a_tailing_reader_never_sees_a_later_sequence_before_an_earlier_one(backend: StoreBackend) -> None:
    first, second, reader = backend.migrated(), backend.open(), backend.open()
    b_done = threading.Event()
    b_error: list[BaseException] = []

    def append_b() -> None:
        try:
            second.transact(lambda tx: tx.events.append_event_with_outbox(event(2)), name="test.append.b")
        except BaseException as error:  # reported to the main thread
            b_error.append(error)
        finally:
            b_done.set()

    with first.transaction(name="test.append.a") as tx:
        assert tx.events.append_event_with_outbox(event(1))
        worker = threading.Thread(target=append_b)
        worker.start()
        if backend.is_postgres:
            # ADR 0096: A holds no sequence until its COMMIT, so B neither waits nor leaves a number below A's
            assert b_done.wait(timeout=30) and not b_error, b_error
            assert ids(reader) == [(1, "evt-s-2")]
        else:
            time.sleep(0.05)  # B is now waiting for SQLite's write lock
            assert not b_done.is_set(), "a second appender of the space committed while the first was open"
            assert tail(reader, 0) == []  # nothing committed yet: the reader's cursor stays at 0
    worker.join(timeout=30)
    assert b_done.is_set() and not b_error, b_error
    # commit order is sequence order: no cursor can have moved past a number before its event was there
    expected = ([(1, "evt-s-2"), (2, "evt-s-1")] if backend.is_postgres else [(1, "evt-s-1"), (2, "evt-s-2")])
    assert ids(reader) == expected


def test_a_read_in_the_appending_transaction_sees_its_events_with_their_sequences(backend: StoreBackend) -> None:
    """On PostgreSQL the sequence is taken at COMMIT (ADR 0096); a read of the log before then settles it, so
    the appending transaction never sees an event without its number nor has ``after=`` pass one by."""
    store = backend.migrated()
    store.transact(lambda tx: tx.events.append_event(event(1)))

    def unit(tx: UnitOfWork) -> tuple[list[tuple[int, str]], int | None, list[str]]:
        assert tx.events.append_event(event(2))
        assert tx.events.append_event(event(3))
        listed = [(e.sequence, e.id) for e in tx.events.list_events(tenant_id="t", space_id="s")]
        got = tx.events.get_event("evt-s-3")
        assert tx.events.append_event(event(4))  # after the settle: taken at once, in order
        after = [e.id for e in tx.events.list_events(tenant_id="t", space_id="s", after=3)]
        return listed, None if got is None else got.sequence, after

    listed, third, after = store.transact(unit, name="test.append.read")
    assert listed == [(1, "evt-s-1"), (2, "evt-s-2"), (3, "evt-s-3")]
    assert third == 3 and after == ["evt-s-4"]
    assert ids(store) == [(1, "evt-s-1"), (2, "evt-s-2"), (3, "evt-s-3"), (4, "evt-s-4")]


def test_an_append_rolled_back_with_its_savepoint_takes_no_sequence(backend: StoreBackend) -> None:
    """A group commit's unit that fails is rolled back to its savepoint (ADR 0079): its event takes no number,
    and the events after it leave no gap."""
    store = backend.migrated()

    def unit(tx: UnitOfWork) -> None:
        assert tx.events.append_event(event(1))
        try:
            with tx.savepoint():
                assert tx.events.append_event(event(2))
                raise ValueError("this unit fails")
        except ValueError:
            pass
        assert tx.events.append_event(event(3))

    store.transact(unit, name="test.append.savepoint")
    assert ids(store) == [(1, "evt-s-1"), (2, "evt-s-3")]


def test_a_read_after_a_savepoint_rolled_back_its_settle_still_sees_the_sequences(backend: StoreBackend) -> None:
    """A settle inside a savepoint is undone with it (PostgreSQL fires the trigger again at COMMIT), so a later
    read of the same transaction settles again; a group commit's units share the transaction (a break-it trial
    found the second read seeing no sequence)."""
    store = backend.migrated()

    def unit(tx: UnitOfWork) -> tuple[int | None, list[tuple[int, str]]]:
        assert tx.events.append_event(event(1))
        try:
            with tx.savepoint():
                assert [e.sequence for e in tx.events.list_events(tenant_id="t", space_id="s")] == [1]
                raise ValueError("this unit fails")
        except ValueError:
            pass
        got = tx.events.get_event("evt-s-1")
        return (None if got is None else got.sequence,
                [(e.sequence, e.id) for e in tx.events.list_events(tenant_id="t", space_id="s")])

    assert store.transact(unit, name="test.append.savepoint-settle") == (1, [(1, "evt-s-1")])
    assert ids(store) == [(1, "evt-s-1")]


def test_the_relay_claim_and_the_audit_in_the_appending_transaction_see_the_sequences(backend: StoreBackend) -> None:
    store = backend.migrated()

    def unit(tx: UnitOfWork) -> tuple[list[int], list[str]]:
        assert tx.events.append_event_with_outbox(event(1))
        claimed = tx.events.claim_event_outbox(owner="relay-1", limit=10, lease_seconds=30)
        findings = [f.check for f in tx.audit.invariant_findings() if f.check == "event_without_sequence"]
        return [c.event.sequence for c in claimed], findings

    assert store.transact(unit, name="test.append.claim") == ([1], [])


def test_the_audit_finds_a_space_counter_behind_its_log(backend: StoreBackend) -> None:
    """A counter behind the log would hand out a number already taken (ADR 0096's trial reached it through a
    temporary table of the counter's name): the audit says so."""
    store = backend.migrated()
    store.transact(lambda tx: [tx.events.append_event(event(n)) for n in (1, 2)])

    def findings() -> list[tuple[str, str]]:
        return [(f.subject, f.detail) for f in store.read(lambda tx: tx.audit.invariant_findings())
                if f.check == "event_sequence_counter_behind"]

    assert findings() == []
    store.transact(lambda tx: tx.execute_raw("UPDATE host_event_sequences SET last = 1"))
    assert findings() == [("t/s", "event sequence counter 1 is behind the log's highest sequence 2")]


def test_many_concurrent_appenders_commit_in_sequence_order(backend: StoreBackend) -> None:
    """Eight appenders race in one space while a reader tails with a cursor: the reader's view is always a
    gap-free prefix of the final log (it never skips a sequence it later finds below its cursor)."""
    stores = [backend.migrated()] + [backend.open() for _ in range(7)]
    reader = backend.open()
    stop = threading.Event()
    views: list[list[int]] = []

    def append(index: int, store: Store) -> None:
        for n in range(10):
            store.transact(lambda tx, k=index * 100 + n: tx.events.append_event_with_outbox(event(k)),
                           name="test.append")

    def watch() -> None:
        while not stop.is_set():
            views.append(tail(reader, 0))

    watcher = threading.Thread(target=watch)
    watcher.start()
    appenders = [threading.Thread(target=append, args=(i, s)) for i, s in enumerate(stores)]
    for thread in appenders:
        thread.start()
    for thread in appenders:
        thread.join(timeout=60)
    stop.set()
    watcher.join(timeout=30)
    final = tail(reader, 0)
    assert final == list(range(1, 81))
    assert views and all(view == final[:len(view)] for view in views)  # every view a prefix: no gap, ever
