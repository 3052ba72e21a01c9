"""A reader that tails the event log by sequence never skips an event (issue 15; ADR 0041), on every backend.

The known failure of event stores that tail by a serial id: transaction A takes sequence 5, transaction B takes 6
and commits first; a reader that saw 6 moves its cursor past 5, which commits a moment later and is never read.
fencepost's sequence is taken from the space's ``host_event_sequences`` row, whose update is held until COMMIT, so
a second appender of the same space waits for the first to end: sequence order is commit order. The test holds A
open on one connection, starts B on another, tails with a third, and checks the reader's view at every point.
"""

from __future__ import annotations

import threading
import time

from fencepost.store.base import Store
from fencepost.store.host_records import NewEvent, Subject
from helpers.store_backends import StoreBackend


def event(n: int, space: str = "s") -> NewEvent:
    return NewEvent(id=f"evt-{space}-{n}", tenant_id="t", space_id=space, subject=Subject("Test", str(n)),
                    type="Tested", payload={"n": n})


def tail(store: Store, after: int, space: str = "s") -> list[int]:
    return [e.sequence for e in store.read(lambda tx: tx.events.list_events(tenant_id="t", space_id=space,
                                                                             after=after))]


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
        time.sleep(0.3 if backend.is_postgres else 0.05)  # B is now waiting on the space's sequence row
        assert not b_done.is_set(), "a second appender of the space committed while the first was open"
        assert tail(reader, 0) == []  # nothing committed yet: the reader's cursor stays at 0
    worker.join(timeout=30)
    assert b_done.is_set() and not b_error, b_error
    seen = tail(reader, 0)
    assert seen == [1, 2]  # commit order is sequence order: no cursor can have moved past 1 before it was there


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
