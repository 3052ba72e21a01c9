"""How an idle worker waits (``Store.work_waiter``), on every backend, and LISTEN/NOTIFY on PostgreSQL.

Every backend: a wait ends by its timeout or at once when the worker's wake event is set, and a polling
waiter never claims to have heard of work. PostgreSQL (ADR 0014): a listening waiter wakes when a command
of its kinds in its schema becomes due (enqueue, release, reconcile) and only at COMMIT; it ignores other
kinds, other schemas, rolled-back and future commands; it survives its connection being terminated and falls
back to sleeping while it cannot listen. SQLite has no notifications between processes: its workers poll.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from outbox_contract_support import KIND, OTHER, Running, command, insert, worker

from fencepost.core.statuses import CommandStatus
from fencepost.store import Store
from fencepost.store.base import WorkWaiter
from fencepost.store.ports import UnitOfWork
from fencepost.store.postgres.listen import PostgresWorkWaiter
from fencepost.store.postgres.store import PostgresStore
from helpers.store_backends import StoreBackend, postgres_url, store_backend
from helpers.waiting import wait_until

LONG = 30.0  # a wait no test sits out: returning well before it proves a wake-up


def _timed_wait(waiter: WorkWaiter, timeout: float, wake: threading.Event | None = None) -> tuple[bool, float]:
    started = time.monotonic()
    announced = waiter.wait_for_work(timeout, wake)
    return announced, time.monotonic() - started


def _later(seconds: float, fn: object) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        fn()  # type: ignore[operator]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# ── every backend ──
@pytest.mark.parametrize("listen", [True, False])
def test_a_wait_ends_at_its_timeout_or_at_once_when_woken(store: Store, backend: StoreBackend, listen: bool) -> None:
    waiter = store.work_waiter([KIND], listen=listen, name="contract")
    try:
        if isinstance(waiter, PostgresWorkWaiter):
            assert waiter.wait_until_listening(10)
            assert waiter.wait_for_work(LONG) is True  # it announces that it listens (see the PG tests)
        announced, took = _timed_wait(waiter, 0.3)
        assert announced is False and 0.25 <= took < 5
        wake = threading.Event()
        _later(0.2, wake.set)
        announced, took = _timed_wait(waiter, LONG, wake)
        assert announced is False and took < 5, "the wake event did not end the wait"
    finally:
        waiter.close()
        waiter.close()  # idempotent


def test_a_polling_waiter_never_hears_of_work(store: Store, backend: StoreBackend) -> None:
    waiter = store.work_waiter([KIND], listen=False)
    try:
        assert waiter.mode == "poll"
        _later(0.1, lambda: insert(store, "c1"))
        announced, took = _timed_wait(waiter, 0.6)
        assert announced is False and took >= 0.55
    finally:
        waiter.close()


def test_the_mode_is_notify_only_where_the_backend_announces_work(store: Store, backend: StoreBackend) -> None:
    waiter = store.work_waiter([KIND], listen=True)
    try:
        assert waiter.mode == ("notify" if backend.is_postgres else "poll")
    finally:
        waiter.close()


# ── PostgreSQL: LISTEN/NOTIFY ──
@pytest.fixture
def pg(pg_backend: StoreBackend) -> Store:
    return pg_backend.migrated()


@pytest.fixture
def waiter_name(pg_backend: StoreBackend) -> str:
    """The waiter's name, unique to this test: its LISTEN connection is found in ``pg_stat_activity`` by it, and
    tests running beside this one (pytest-xdist, ADR 0054) have waiters of their own on the same server."""
    return f"waiter-{pg_backend.schema}"


@pytest.fixture
def waiter(pg: Store, waiter_name: str) -> Iterator[PostgresWorkWaiter]:
    w = pg.work_waiter([KIND], listen=True, name=waiter_name)
    assert isinstance(w, PostgresWorkWaiter)
    try:
        assert w.wait_until_listening(10), "the waiter never started listening"
        assert w.wait_for_work(LONG) is True, "a new listener must announce itself once (it may have missed work)"
        yield w
    finally:
        w.close()


def _listeners(application_name: str) -> list[tuple[int, str]]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        rows = conn.execute("SELECT pid, query FROM pg_stat_activity WHERE application_name = %s",
                            (application_name,)).fetchall()
    return [(int(pid), str(query)) for pid, query in rows]


@pytest.mark.postgres
def test_an_enqueue_wakes_the_listening_waiter_at_commit(pg: Store, pg_backend: StoreBackend,
                                                         waiter: PostgresWorkWaiter, waiter_name: str) -> None:
    assert waiter.mode == "notify" and waiter.listening
    assert _listeners(f"fencepost-listen {waiter_name}")[0][1] == "LISTEN fencepost_commands"
    producer = pg_backend.open()
    _later(0.2, lambda: insert(producer, "c1"))
    announced, took = _timed_wait(waiter, LONG)
    assert announced is True and took < 10


@pytest.mark.postgres
def test_nothing_wakes_the_waiter_but_due_committed_work_of_its_kinds_in_its_schema(
        pg: Store, pg_backend: StoreBackend, waiter: PostgresWorkWaiter, tmp_path: Path) -> None:
    producer = pg_backend.open()

    def rolled_back() -> None:
        def unit(tx: UnitOfWork) -> None:
            tx.outbox.insert(command_id="c-rolled-back", kind=KIND, payload={})
            raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            producer.transact(unit)

    with store_backend("postgres", tmp_path / "other") as other_backend:
        other_schema = other_backend.migrated()
        for quiet in (lambda: insert(producer, "c-other-kind", kind=OTHER),
                      lambda: insert(producer, "c-future", delay=3600),
                      rolled_back,
                      lambda: insert(other_schema, "c-other-schema")):
            _later(0.1, quiet)
            announced, took = _timed_wait(waiter, 1.0)
            assert announced is False and took >= 0.95, "the waiter woke for work it cannot claim"
    insert(producer, "c-due")
    assert waiter.wait_for_work(LONG) is True


@pytest.mark.postgres
def test_release_and_reconcile_wake_the_waiter(pg: Store, pg_backend: StoreBackend,
                                               waiter: PostgresWorkWaiter) -> None:
    insert(pg, "c1")
    insert(pg, "c2")
    assert waiter.wait_for_work(LONG) is True  # the enqueues (two transactions: one or two wake-ups)
    while waiter.wait_for_work(0.5):
        pass
    leases = pg.transact(lambda tx: tx.outbox.claim(owner="w", kinds=[KIND], limit=2,
                                                    lease_seconds=pg_backend.short_lease))
    assert waiter.wait_for_work(0.3) is False, "a claim woke the waiter"
    _later(0.1, lambda: pg.transact(lambda tx: tx.outbox.release(leases[0].lease)))
    assert _timed_wait(waiter, LONG)[0] is True
    pg_backend.expire()
    _later(0.1, lambda: pg.transact(lambda tx: tx.outbox.reconcile(leases[1].id)))
    assert _timed_wait(waiter, LONG)[0] is True
    assert {command(pg, c).status for c in ("c1", "c2")} == {CommandStatus.PENDING}


@pytest.mark.postgres
def test_a_terminated_listening_connection_is_replaced(pg: Store, pg_backend: StoreBackend,
                                                       waiter: PostgresWorkWaiter, waiter_name: str) -> None:
    [(pid, _)] = _listeners(f"fencepost-listen {waiter_name}")
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    # It reconnects on its own, and announces that it may have missed work meanwhile.
    wait_until(lambda: waiter.connections >= 2 and waiter.listening, what="the waiter to listen again")
    assert waiter.wait_for_work(LONG) is True
    [(new_pid, query)] = _listeners(f"fencepost-listen {waiter_name}")
    assert new_pid != pid and query == "LISTEN fencepost_commands"
    _later(0.1, lambda: insert(pg_backend.open(), "c-after"))
    announced, took = _timed_wait(waiter, LONG)
    assert announced is True and took < 10


@pytest.mark.postgres
def test_a_waiter_that_cannot_listen_sleeps_out_its_waits(pg_backend: StoreBackend) -> None:
    store = pg_backend.migrated()
    assert isinstance(store, PostgresStore)
    store.dsn = "postgresql://postgres@127.0.0.1:1/nowhere"  # only the listener connects with it from now on
    waiter = store.work_waiter([KIND], listen=True)
    assert isinstance(waiter, PostgresWorkWaiter)
    try:
        for _ in range(3):
            announced, took = _timed_wait(waiter, 0.3)
            assert announced is False and 0.25 <= took < 5
        assert not waiter.listening
        insert(store, "c1")  # the store itself still works: the listener is only a hint
        assert command(store, "c1").status is CommandStatus.PENDING
    finally:
        waiter.close()


class _Watched(WorkWaiter):
    """Wraps a worker's waiter to show when the worker sits in an idle wait."""

    def __init__(self, inner: WorkWaiter) -> None:
        self.inner = inner
        self.mode = inner.mode
        self.waiting = threading.Event()

    def wait_for_work(self, timeout_seconds: float, wake: threading.Event | None = None) -> bool:
        self.waiting.set()
        try:
            return self.inner.wait_for_work(timeout_seconds, wake)
        finally:
            self.waiting.clear()

    def close(self) -> None:
        self.inner.close()


def _settled(watched: list[_Watched]) -> bool:
    """The worker has been in one idle wait for 0.3 s: only a notification, wake() or 30 s can end it."""
    if not watched or not watched[0].waiting.is_set():
        return False
    time.sleep(0.3)
    return watched[0].waiting.is_set()


@pytest.mark.postgres
@pytest.mark.parametrize("listen", [True, False])
def test_an_idle_worker_is_woken_by_another_process_s_enqueue_only_when_listening(
        pg: Store, pg_backend: StoreBackend, listen: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    handled: list[str] = []
    watched: list[_Watched] = []
    opened = pg.work_waiter

    def watching(*args: object, **kwargs: object) -> WorkWaiter:
        watched.append(_Watched(opened(*args, **kwargs)))  # type: ignore[arg-type]
        return watched[-1]

    monkeypatch.setattr(pg, "work_waiter", watching)
    w = worker(pg, pg_backend, lambda ctx: handled.append(ctx.command.id), worker_id=f"w-listen-{listen}",
               lease=pg_backend.long_lease, poll=LONG, listen=listen)
    producer = pg_backend.open()  # another pool: to the worker this is another process
    insert(producer, "c-first")  # due before the worker starts: its first claim takes it
    running = Running(w)
    try:
        wait_until(lambda: "c-first" in handled, what="the first command")
        wait_until(lambda: _settled(watched), what="the worker to settle into its 30 s idle wait")
        assert watched[0].mode == ("notify" if listen else "poll")
        insert(producer, "c-second")
        if listen:
            wait_until(lambda: "c-second" in handled, timeout=10,
                       what="the listening worker to wake for the new command well before its 30 s poll")
        else:
            time.sleep(1.5)
            assert "c-second" not in handled, "a polling worker claimed before its poll interval"
            w.wake()
            wait_until(lambda: "c-second" in handled, timeout=10, what="the polling worker after wake()")
    finally:
        running.stop()
    assert command(pg, "c-second").status is CommandStatus.DELIVERED
    assert len(watched) == 1, "the worker opened more than one waiter"
