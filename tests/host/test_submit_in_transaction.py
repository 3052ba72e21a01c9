"""Submission in the caller's own transaction (host-spec §1.Y-16, ADR 0033), on every backend.

The caller's transaction is what an application has: on SQLite fencepost's own unit (``store.transaction()``)
with the application's row written on ``SQLiteStore.connection()``; on PostgreSQL the application's own psycopg
connection (autocommit off, default ``search_path``) wrapped by ``PostgresStore.unit_on``. The application's
table ``orders`` lives in the same database (on PostgreSQL in the test's schema, written schema-qualified).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from psycopg import sql

from fencepost.core.errors import Conflict, IdempotencyConflict, InvalidInput
from fencepost.core.statuses import CommandStatus, InvocationStatus
from fencepost.host import Dispatch, Inline
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.sqlite.store import SQLiteStore
from helpers.store_backends import StoreBackend, admin_connect, postgres_url
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host, run_worker

KIND = "host.invoke:shop.charge@1"


class Rollback(Exception):
    """The application gives up on its transaction."""


def _orders_table(backend: StoreBackend) -> sql.Composable:
    assert backend.schema is not None
    return sql.SQL("{}.orders").format(sql.Identifier(backend.schema))


@pytest.fixture
def orders(backend: StoreBackend, store: Store) -> None:
    """The application's own table, next to fencepost's."""
    if backend.is_postgres:
        with admin_connect() as conn:
            conn.execute(sql.SQL("CREATE TABLE {} (id TEXT PRIMARY KEY)").format(_orders_table(backend)))
    else:
        cast(SQLiteStore, store).connection().execute("CREATE TABLE orders (id TEXT PRIMARY KEY)")


@contextmanager
def caller_transaction(backend: StoreBackend, store: Store) -> Iterator[tuple[UnitOfWork, Callable[[str], None]]]:
    """The application's transaction: ``(unit for fencepost, write an order)``; commits on exit, rolls back on
    an exception."""
    if not backend.is_postgres:
        lite = cast(SQLiteStore, store)
        with store.transaction(name="app.order") as tx:
            yield tx, lambda order: lite.connection().execute("INSERT INTO orders (id) VALUES (?)", (order,)).close()
        return
    conn = psycopg.connect(postgres_url(), connect_timeout=5)  # autocommit off: the application commits
    try:
        before = conn.execute("SELECT current_setting('search_path')").fetchone()

        def write(order: str) -> None:
            conn.execute(sql.SQL("INSERT INTO {} (id) VALUES (%s)").format(_orders_table(backend)), (order,))

        with store.unit_on(conn) as tx:
            yield tx, write
        # The unit put the application's own settings back for the rest of its transaction.
        assert conn.execute("SELECT current_setting('search_path')").fetchone() == before
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


def snapshot(backend: StoreBackend, store: Store) -> dict[str, Any]:
    """What is committed, read on connections of their own: orders, invocations, commands, events."""
    if backend.is_postgres:
        with admin_connect() as conn:
            rows = conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(_orders_table(backend))).fetchall()
    else:
        lite = sqlite3.connect(cast(SQLiteStore, store).path)
        try:
            rows = lite.execute("SELECT id FROM orders ORDER BY id").fetchall()
        finally:
            lite.close()
    other = backend.open()
    return {"orders": [r[0] for r in rows],
            "invocations": [r.id for r in other.read(lambda tx: tx.host.list_invocations())],
            "commands": other.read(lambda tx: tx.outbox.count_by_status()),
            "events": len(other.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default")))}


def test_commit_makes_the_order_and_the_invocation_durable_together(backend: StoreBackend, store: Store,
                                                                    orders: None, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    with caller_transaction(backend, store) as (tx, write):
        write("o-1")
        queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="o-1/charge", tx=tx)
        assert queued.status is InvocationStatus.PENDING and queued.attempt_count == 0 and queued.steps == ()
        # Nothing is visible outside the caller's transaction before it commits.
        assert snapshot(backend, store) == {"orders": [], "invocations": [], "commands": {}, "events": 0}
    assert snapshot(backend, store) == {"orders": ["o-1"], "invocations": [queued.id],
                                        "commands": {CommandStatus.PENDING: 1}, "events": 0}
    assert host.get(queued.id).status is InvocationStatus.PENDING


def test_rollback_leaves_neither_the_order_nor_the_invocation(backend: StoreBackend, store: Store, orders: None,
                                                              ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    with pytest.raises(Rollback), caller_transaction(backend, store) as (tx, write):
        write("o-1")
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="o-1/charge", tx=tx)
        raise Rollback
    assert snapshot(backend, store) == {"orders": [], "invocations": [], "commands": {}, "events": 0}
    assert run_worker(host, backend) == 0 and ledger.requests == []
    # The key is free again: the application's retry of the whole transaction submits afresh.
    with caller_transaction(backend, store) as (tx, write):
        write("o-1")
        again = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="o-1/charge", tx=tx)
    assert snapshot(backend, store)["invocations"] == [again.id]


def test_a_worker_claims_the_invocation_only_after_the_caller_commits(backend: StoreBackend, store: Store,
                                                                      orders: None, ledger: Ledger) -> None:
    spy = Spy()
    host = make_host(store, charge_action(spy), Scripted(ledger))
    claimed: list[int] = []
    with caller_transaction(backend, store) as (tx, write):
        write("o-1")
        queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="o-1/charge", tx=tx)
        if backend.is_postgres:
            # The uncommitted row is invisible to a claim, which neither waits for the caller's transaction
            # nor finds anything (well under the 5 s lock timeout a wait would run into).
            started = time.monotonic()
            assert run_worker(host, backend) == 0
            assert time.monotonic() - started < 2.0
        else:
            # SQLite has one writer: a worker's claim waits for the caller's transaction to end.
            worker = threading.Thread(target=lambda: claimed.append(run_worker(host, backend)))
            worker.start()
            worker.join(0.5)
            assert worker.is_alive() and claimed == [] and spy.calls == 0
    if backend.is_postgres:
        claimed.append(run_worker(host, backend))
    else:
        worker.join(30)
    assert claimed == [1] and spy.calls == 1 and len(ledger.charges) == 1
    assert host.get(queued.id).status is InvocationStatus.SUCCEEDED


def test_replay_inside_a_caller_transaction(backend: StoreBackend, store: Store, orders: None,
                                            ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    first = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")  # committed on its own
    with caller_transaction(backend, store) as (tx, write):
        write("o-1")
        again = host.submit("shop.charge", dict(PARAMS), actor="u1", idempotency_key="k", tx=tx)
        assert (again.id, again.status, again.created_at) == (first.id, first.status, first.created_at)
        with pytest.raises(IdempotencyConflict) as raised:
            host.submit("shop.charge", {**PARAMS, "amount_cents": 1}, actor="u1", idempotency_key="k", tx=tx)
        assert raised.value.field == "parameters"
        # The conflict wrote nothing and left the caller's transaction usable: it goes on and commits.
        fresh = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k2", tx=tx)
        twice = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k2", tx=tx)
        assert twice.id == fresh.id  # a key first written in this same transaction replays too
        with pytest.raises(IdempotencyConflict):
            host.submit("shop.charge", PARAMS, actor="u2", idempotency_key="k2", tx=tx)
    state = snapshot(backend, store)
    assert state["orders"] == ["o-1"] and sorted(state["invocations"]) == sorted([first.id, fresh.id])
    assert state["commands"] == {CommandStatus.PENDING: 2}


def test_inline_in_a_caller_transaction_is_refused(backend: StoreBackend, store: Store, orders: None,
                                                   ledger: Ledger) -> None:
    spy = Spy()
    host = make_host(store, charge_action(spy), Scripted(ledger))
    with caller_transaction(backend, store) as (tx, write):
        write("o-1")
        with pytest.raises(InvalidInput, match="Inline"):
            host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline(), tx=tx)
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k2", mode=Dispatch(), tx=tx)
    assert spy.calls == 0 and ledger.requests == []
    state = snapshot(backend, store)
    assert state["orders"] == ["o-1"] and len(state["invocations"]) == 1


def test_sqlite_refuses_an_application_connection(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "control.db"))
    conn = sqlite3.connect(":memory:")
    try:
        with pytest.raises(InvalidInput, match=r"store\.transaction\(\)"), store.unit_on(conn):
            pass
    finally:
        conn.close()
        store.close()


# ── PostgreSQL: the application's own psycopg connection ──

@pytest.fixture
def pg_store(pg_backend: StoreBackend) -> Store:
    return pg_backend.migrated()


def _count(store: Store) -> int:
    return len(store.read(lambda tx: tx.host.list_invocations()))


def _ours(listener: psycopg.Connection[Any], schema: str, timeout: float, *, first: bool = False) -> list[str]:
    """The ``fencepost_commands`` payloads of this test's ``schema`` that arrive within ``timeout`` seconds (the
    channel is shared by the whole database: tests running beside this one notify it for their own schemas);
    with ``first``, return as soon as one arrives."""
    found: list[str] = []
    for notify in listener.notifies(timeout=timeout):
        if notify.payload.startswith(f"{schema}/"):
            found.append(notify.payload)
            if first:
                break
    return found


def test_postgres_wakeup_is_delivered_at_commit_only(pg_backend: StoreBackend, pg_store: Store,
                                                     ledger: Ledger) -> None:
    host = make_host(pg_store, charge_action(Spy()), Scripted(ledger))
    schema = str(pg_backend.schema)
    listener = admin_connect()
    try:
        listener.execute("LISTEN fencepost_commands")
        with psycopg.connect(postgres_url()) as conn:
            with pg_store.unit_on(conn) as tx:
                host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k1", tx=tx)
            assert _ours(listener, schema, 0.5) == []  # not before the commit
            conn.rollback()
        assert _ours(listener, schema, 0.5) == []  # nor for a rollback
        with psycopg.connect(postgres_url()) as conn:
            with pg_store.unit_on(conn) as tx:
                host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k2", tx=tx)
            conn.commit()
        assert _ours(listener, schema, 5, first=True) == [f"{schema}/{KIND}"]
    finally:
        listener.close()
    assert _count(pg_store) == 1


def test_postgres_refuses_an_autocommit_connection_outside_a_transaction_block(pg_store: Store,
                                                                              ledger: Ledger) -> None:
    host = make_host(pg_store, charge_action(Spy()), Scripted(ledger))
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        with pytest.raises(InvalidInput, match="autocommit"), pg_store.unit_on(conn):
            pass
        # The same connection inside a transaction block is the application's transaction.
        with pytest.raises(Rollback), conn.transaction(), pg_store.unit_on(conn) as tx:
            host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", tx=tx)
            raise Rollback
        assert _count(pg_store) == 0
        with conn.transaction(), pg_store.unit_on(conn) as tx:
            host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", tx=tx)
    assert _count(pg_store) == 1


def test_postgres_refuses_a_failed_transaction_or_another_database(pg_store: Store) -> None:
    with psycopg.connect(postgres_url()) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(InvalidInput, match="roll it back"), pg_store.unit_on(conn):
            pass
        conn.rollback()
        conn.close()
        with pytest.raises(InvalidInput, match="closed"), pg_store.unit_on(conn):
            pass
    with admin_connect() as admin:
        other = admin.execute("SELECT current_database()").fetchone()
    assert other is not None
    elsewhere = "postgres" if other[0] != "postgres" else "template1"
    with (psycopg.connect(postgres_url(), dbname=elsewhere) as conn,
          pytest.raises(InvalidInput, match="another database"), pg_store.unit_on(conn)):
        pass
    with pytest.raises(InvalidInput, match="psycopg"), pg_store.unit_on(object()):
        pass


def test_postgres_a_swallowed_statement_error_is_raised_when_the_unit_ends(pg_store: Store) -> None:
    with psycopg.connect(postgres_url()) as conn:
        with pytest.raises(Conflict, match="rolled back"), pg_store.unit_on(conn) as tx, pytest.raises(Conflict):
            cast(Any, tx).execute_raw("SELECT 1/0")
        conn.rollback()


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_postgres_two_callers_racing_on_one_key(pg_store: Store, ledger: Ledger, first_ends: str) -> None:
    """The second caller's insert waits on the first one's uncommitted key (READ COMMITTED): after a commit it
    replays the winner, after a rollback it inserts its own; one invocation either way."""
    host = make_host(pg_store, charge_action(Spy()), Scripted(ledger))
    first, second = psycopg.connect(postgres_url()), psycopg.connect(postgres_url())
    try:
        with pg_store.unit_on(first) as tx:
            winner = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", tx=tx)
        ended = threading.Event()

        def end_first() -> None:
            time.sleep(0.3)
            ended.set()
            first.commit() if first_ends == "commit" else first.rollback()

        ender = threading.Thread(target=end_first)
        ender.start()
        with pg_store.unit_on(second) as tx:
            got = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", tx=tx)
            assert ended.is_set()  # it waited for the first transaction to end
        ender.join(10)
        second.commit()
    finally:
        first.close()
        second.close()
    assert got.id == winner.id and _count(pg_store) == 1
    counts = pg_store.read(lambda tx: tx.outbox.count_by_status())
    assert counts == {CommandStatus.PENDING: 1}
    if first_ends == "commit":
        assert got.created_at == winner.created_at
    else:
        assert got.created_at > winner.created_at  # written afresh by the second caller
