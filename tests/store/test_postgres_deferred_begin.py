"""PostgreSQL sends a unit's BEGIN with its first statement, in one pipeline (ADR 0098).

What must hold: a lazily clocked write unit and a read unit put BEGIN and their first statement on the wire in
one round trip (one pipeline, BEGIN first); a unit that runs no statement sends nothing at all; a first statement
that fails is reported as the same translated error as before and leaves the pooled connection usable; a unit
whose first act is a savepoint or an ad-hoc statement still runs inside its transaction (its writes roll back
with it); and the units that read the clock with BEGIN (``EAGER_CLOCK_UNITS``) keep doing so.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from fencepost.core.errors import Conflict
from fencepost.host import Dispatch
from fencepost.store import Store
from fencepost.store.postgres import store as pg_store_module
from helpers.store_backends import postgres_url
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host

pytestmark = pytest.mark.postgres


def _insert(tx: Any, command_id: str) -> None:
    tx.outbox.insert(command_id=command_id, kind="k.a", payload={"i": 1})


@pytest.mark.parametrize("unit", ["read", "write"])
def test_begin_travels_with_the_first_statement(pg: Store, wire: list[tuple[str, bool]], unit: str) -> None:
    wire.clear()
    if unit == "read":
        assert pg.read(lambda tx: tx.outbox.get("absent")) is None
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    else:
        assert pg.transact(lambda tx: tx.outbox.get("absent")) is None
        begin = "BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE"
    assert wire[0] == (begin, True), wire
    assert wire[1][1] is True and "FROM commands" in wire[1][0], wire  # the first statement, same pipeline
    assert wire[2:] == [("COMMIT", False)], wire


def test_a_write_unit_commits_what_it_wrote_after_a_pipelined_start(pg: Store, wire: list[tuple[str, bool]]) -> None:
    wire.clear()
    pg.transact(lambda tx: _insert(tx, "c1"))  # its first statement is the lazy clock read
    assert [piped for _, piped in wire[:2]] == [True, True] and "clock_timestamp" in wire[1][0], wire
    assert all(not piped for _, piped in wire[2:]), wire
    assert pg.read(lambda tx: tx.outbox.get("c1")) is not None


def test_a_unit_that_runs_no_statement_sends_nothing(pg: Store, wire: list[tuple[str, bool]]) -> None:
    wire.clear()
    assert pg.transact(lambda tx: 7) == 7
    assert pg.read(lambda tx: 8) == 8
    assert wire == []


def test_a_failing_first_statement_is_translated_and_the_connection_stays_usable(pg: Store) -> None:
    pg.transact(lambda tx: _insert(tx, "dup"))
    for _ in range(3):  # more attempts than the pool has idle connections: each must come back clean
        with pytest.raises(Conflict):
            pg.transact(lambda tx: _insert(tx, "dup"))
    pg.transact(lambda tx: _insert(tx, "after"))
    assert pg.read(lambda tx: tx.outbox.get("after")) is not None


def test_a_unit_opening_with_a_savepoint_or_raw_sql_is_still_one_transaction(pg: Store) -> None:
    class Boom(Exception):
        pass

    def savepoint_first(tx: Any) -> None:
        with tx.savepoint():
            _insert(tx, "sp")
        raise Boom

    def raw_first(tx: Any) -> None:
        tx.execute_raw("SELECT 1")
        _insert(tx, "raw")
        raise Boom

    for unit in (savepoint_first, raw_first):
        with pytest.raises(Boom):
            pg.transact(unit)
    assert pg.read(lambda tx: (tx.outbox.get("sp"), tx.outbox.get("raw"))) == (None, None)


def test_eager_clock_units_still_read_the_clock_with_begin(pg: Store, wire: list[tuple[str, bool]]) -> None:
    wire.clear()
    pg.transact(lambda tx: _insert(tx, "e1"), name="outbox.enqueue")
    assert wire[0][0].startswith("BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE; SELECT clock_timestamp()")
    assert wire[0][1] is False


def test_without_pipeline_mode_begin_goes_alone_and_the_unit_still_commits(
    pg: Store, wire: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_store_module, "_PIPELINE", False)  # a libpq older than 14
    wire.clear()
    pg.transact(lambda tx: _insert(tx, "old-libpq"))
    assert wire[0] == ("BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE", False), wire
    assert not any(piped for _, piped in wire), wire
    assert pg.read(lambda tx: tx.outbox.get("old-libpq")) is not None


def _invocation(pg: Store) -> str:
    host = make_host(pg, charge_action(Spy()), Scripted(Ledger()))
    return host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k1", mode=Dispatch()).id


def test_the_invocation_lock_brings_the_clock_read_in_its_round_trip(pg: Store, wire: list[tuple[str, bool]]) -> None:
    invocation_id = _invocation(pg)
    wire.clear()

    def unit(tx: Any) -> Any:
        assert tx.host.lock_invocation(invocation_id) is not None
        return tx.now()

    now = pg.transact(unit)
    assert now.utcoffset() == timedelta(0)
    assert [piped for _, piped in wire[:3]] == [True, True, True], wire
    assert "FOR UPDATE OF i" in wire[1][0] and wire[2][0] == "SELECT clock_timestamp()", wire
    assert wire[3:] == [("COMMIT", False)], wire  # now() sent nothing more


def test_the_clock_read_with_the_lock_is_taken_after_the_lock_is_granted(pg: Store) -> None:
    invocation_id = _invocation(pg)
    locked = threading.Event()

    def holder(tx: Any) -> datetime:
        tx.execute_raw("SELECT id FROM invocations WHERE id = %s FOR UPDATE", (invocation_id,))
        locked.set()
        time.sleep(0.5)
        return tx.execute_raw("SELECT clock_timestamp()")[0][0]  # the lock is released after this, at COMMIT

    released: list[datetime] = []
    thread = threading.Thread(target=lambda: released.append(pg.transact(holder)))
    thread.start()
    assert locked.wait(10)

    def waiter(tx: Any) -> datetime:
        tx.host.lock_invocation(invocation_id)  # waits for the holder's COMMIT
        return tx.now()

    now = pg.transact(waiter)
    thread.join(10)
    assert released and now > released[0], (now, released)


def test_an_application_connection_never_gets_a_pipeline(pg: Store, wire: list[tuple[str, bool]]) -> None:
    invocation_id = _invocation(pg)
    with psycopg.connect(postgres_url()) as conn:
        wire.clear()
        with pg.unit_on(conn) as tx:
            tx.host.lock_invocation(invocation_id)
            tx.now()
        conn.rollback()
    assert wire and not any(piped for _, piped in wire), wire
    assert any(text.startswith("SELECT clock_timestamp()") for text, _ in wire), wire
