"""PostgreSQL-only behaviour: connection errors, the database clock, SKIP LOCKED, locks, error translation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from fencepost.core.clock import ManualClock
from fencepost.core.errors import Conflict, InvalidInput, StoreUnavailable
from fencepost.core.statuses import CommandStatus
from fencepost.store import Store, open_store
from fencepost.store.base import StoreBusy
from fencepost.store.host_records import NewEvent, Subject
from fencepost.store.ports import UnitOfWork
from fencepost.store.postgres.store import _CREATE_SCHEMA_TABLE, PostgresStore, _Scrubber, translate_postgres_error
from helpers.store_backends import (
    StoreBackend,
    admin_connect,
    create_schema,
    drop_schema,
    new_schema_name,
    postgres_url,
    schema_url,
)
from helpers.store_reads import raw, read_command

pytestmark = pytest.mark.postgres


def seed(store: Store, *ids: str) -> None:
    def fn(tx: UnitOfWork) -> None:
        for command_id in ids:
            tx.outbox.insert(command_id=command_id, kind="k", payload={})

    store.transact(fn)


@contextmanager
def locked_by_other_session(backend: StoreBackend, command_id: str) -> Iterator[None]:
    """Another session holds ``command_id``'s row lock inside this block.

    The lock is released by an explicit ROLLBACK: merely closing the connection would let the server
    release it a moment later, racing the next statement.
    """
    conn = admin_connect()
    try:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(str(backend.schema))))
        conn.execute(b"BEGIN")
        conn.execute(b"SELECT id FROM commands WHERE id = %s FOR UPDATE", (command_id,))
        yield
        conn.execute(b"ROLLBACK")
    finally:
        conn.close()


# ── connecting ──

@pytest.mark.parametrize("url", [
    "postgresql://fencepost:hunter2secret@127.0.0.1:1/test",
    "postgresql://postgres:hunter2secret@127.0.0.1:5432/fencepost_no_such_database",
    "postgresql://postgres:hunter2secret@127.0.0.1:5432/te st",
])
def test_an_unreachable_or_wrong_url_is_one_clear_line(url: str) -> None:
    with pytest.raises(StoreUnavailable) as caught:
        open_store(url, connect_timeout_seconds=2)
    message = str(caught.value)
    assert message.startswith("cannot connect to the PostgreSQL control database")
    assert "\n" not in message and "hunter2secret" not in message and url not in message
    assert "postgresql://" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_missing_database_says_to_create_it_then_migrate() -> None:
    url = "postgresql://postgres:hunter2secret@127.0.0.1:5432/fencepost_no_such_database"
    with pytest.raises(StoreUnavailable) as caught:
        open_store(url, connect_timeout_seconds=2)
    message = str(caught.value)
    assert 'database "fencepost_no_such_database" does not exist' in message
    assert 'CREATE DATABASE "fencepost_no_such_database"' in message and "fencepost migrate" in message
    assert "hunter2secret" not in message and "\n" not in message


def test_a_server_not_reached_names_where_fencepost_looked() -> None:
    """From a new user's trial: a wrong port said only "Connection refused"."""
    with pytest.raises(StoreUnavailable) as caught:
        open_store("postgresql://postgres:hunter2secret@127.0.0.1:1/test", connect_timeout_seconds=2)
    message = str(caught.value)
    assert "127.0.0.1 port 1: Connection refused; is PostgreSQL running there" in message, message
    assert "hunter2secret" not in message


def test_a_database_dropped_under_a_running_store_is_named_when_no_connection_comes() -> None:
    """A break-it trial: after DROP DATABASE under a running worker, its log said only "no PostgreSQL connection
    became available within the pool timeout" (the pool logs its connect errors without their reason)."""
    name = f"fp_dropped_{new_schema_name('d')}"
    with admin_connect() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = postgres_url().rsplit("/", 1)[0] + f"/{name}"
    store = PostgresStore(url, pool_timeout_seconds=1, connect_timeout_seconds=2)
    store.busy_wait_seconds = 0.5  # one pool timeout per read, not half a minute of retries
    try:
        assert store.read(lambda tx: tx.now()) is not None
        with admin_connect() as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        messages = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                store.read(lambda tx: tx.now())
            except StoreBusy as error:
                messages.append(str(error))
                if f'database "{name}" does not exist' in str(error):
                    break
        assert messages and f'database "{name}" does not exist' in messages[-1], messages
        assert "within the pool timeout" in messages[-1]
    finally:
        store.close()
        with admin_connect() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_malformed_url_is_refused_as_input_before_any_connection() -> None:
    url = "postgresql://postgres:hunter2secret@127.0.0.1:notaport/test"
    with pytest.raises(InvalidInput) as caught:
        open_store(url, connect_timeout_seconds=2)
    message = str(caught.value)
    assert message.startswith("malformed database URL")
    assert "\n" not in message and "hunter2secret" not in message and "postgresql://" not in message


def test_scrubber_removes_dsn_password_and_urls() -> None:
    dsn = "postgresql://u:longpassword@db.internal:5432/x"
    scrub = _Scrubber(dsn)
    assert scrub(f"failed for {dsn}\nsecond line") == "failed for ***"
    assert scrub("see postgres://other:pw@host/db now") == "see <url> now"
    assert scrub("auth failed: longpassword was wrong") == "auth failed: *** was wrong"


def test_display_url_and_session_settings(pg: Store, pg_backend: StoreBackend) -> None:
    assert pg.display_url == "postgresql" and pg.backend == "postgres"
    rows = pg.read(lambda tx: raw(
        tx, "SELECT current_setting('TimeZone'), current_schema(), current_setting('lock_timeout')"))
    assert rows == [("UTC", pg_backend.schema, "5s")]


# ── the database clock decides ──

def test_the_server_clock_rules_not_the_client_clock(pg_backend: StoreBackend) -> None:
    # A client clock 26 years off changes nothing: instants and deadlines come from the server.
    store = pg_backend.migrated(clock=ManualClock(datetime(2000, 1, 1, tzinfo=UTC)))
    seed(store, "c1")
    server_now = store.read(lambda tx: tx.now())
    assert abs(server_now - datetime.now(UTC)) < timedelta(seconds=60)  # same machine in the test
    assert server_now.tzinfo is UTC
    lease = store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["k"], limit=1, lease_seconds=60))[0].lease
    assert lease.until.tzinfo is UTC and lease.until > server_now + timedelta(seconds=59)
    record = read_command(store, "c1")
    assert record.created_at.year == server_now.year != 2000


def test_tx_now_is_the_server_instant_the_statements_use(pg: Store) -> None:
    def fn(tx: UnitOfWork) -> Any:
        now = tx.now()
        tx.outbox.insert(command_id="c1", kind="k", payload={})
        claimed = tx.outbox.claim(owner="w", kinds=["k"], limit=1, lease_seconds=2.5)
        return now, claimed[0].lease.until

    now, until = pg.transact(fn)
    record = read_command(pg, "c1")
    assert record.created_at == record.last_heartbeat_at == now
    assert until == now + timedelta(seconds=2.5)


# ── FOR UPDATE SKIP LOCKED ──

def test_claim_skips_a_locked_row_without_waiting(pg: Store, pg_backend: StoreBackend) -> None:
    seed(pg, "a", "b", "c")
    with locked_by_other_session(pg_backend, "b"):
        started = time.monotonic()
        got = pg.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["k"], limit=10, lease_seconds=60))
        assert time.monotonic() - started < 2.0  # lock_timeout is 5 s: it never waited
        assert sorted(c.id for c in got) == ["a", "c"]
    assert [c.id for c in pg.transact(
        lambda tx: tx.outbox.claim(owner="w", kinds=["k"], limit=10, lease_seconds=60))] == ["b"]


def test_claim_skips_a_locked_expired_lease_and_fills_the_limit(pg: Store, pg_backend: StoreBackend) -> None:
    seed(pg, "x", "y")
    pg.transact(lambda tx: tx.outbox.claim(owner="dead", kinds=["k"], limit=2, lease_seconds=0.1))
    seed(pg, "p1", "p2")
    pg_backend.advance(0.2)
    with locked_by_other_session(pg_backend, "x"):
        got = pg.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["k"], limit=3, lease_seconds=60))
    ids = sorted(c.id for c in got)
    assert len(ids) == 3 and "x" not in ids and "y" in ids


def test_lock_attempt_holds_the_attempt_row_lock(pg: Store, pg_backend: StoreBackend) -> None:
    from fencepost.core.fingerprint import sha256_bytes

    def enqueue(tx: UnitOfWork) -> None:
        tx.rehearsal.insert_run(run_id="r", package_name="p", package_version="1", previous_version=None,
                                content_digest=sha256_bytes(b"p"), manifest={}, files=[])
        tx.outbox.insert(command_id="c", kind="k", payload={})
        tx.rehearsal.insert_attempt(attempt_id="a", run_id="r", seq=1, command_id="c", receipts=[])

    pg.transact(enqueue)
    other = admin_connect()
    other.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(str(pg_backend.schema))))
    try:
        with pg.transaction() as tx:
            assert tx.rehearsal.lock_attempt("a") is not None
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(b"SELECT id FROM rehearsal_attempts WHERE id = 'a' FOR UPDATE NOWAIT")
        other.execute(b"SELECT id FROM rehearsal_attempts WHERE id = 'a' FOR UPDATE NOWAIT")
    finally:
        other.close()


# ── contention and lost connections are StoreBusy ──

def test_a_lock_wait_past_lock_timeout_is_store_busy_after_bounded_retries(pg_backend: StoreBackend) -> None:
    store = pg_backend.migrated(lock_timeout_seconds=0.05, busy_wait_seconds=0.3)
    seed(store, "c1")
    with locked_by_other_session(pg_backend, "c1"):
        started = time.monotonic()
        with pytest.raises(StoreBusy, match="lock"):
            store.transact(lambda tx: tx.outbox.abort("c1"))
        assert time.monotonic() - started < 5
    assert store.transact(lambda tx: tx.outbox.abort("c1")) is True


def test_a_lost_connection_is_store_busy_and_the_store_recovers(pg: Store) -> None:
    def killed(tx: UnitOfWork) -> None:
        pid = raw(tx, "SELECT pg_backend_pid()")[0][0]
        with admin_connect() as admin:
            admin.execute(b"SELECT pg_terminate_backend(%s)", (pid,))
        tx.outbox.insert(command_id="c1", kind="k", payload={})

    with pytest.raises(StoreBusy), pg.transaction() as tx:
        killed(tx)
    seed(pg, "c2")
    assert pg.read(lambda tx: (tx.outbox.get("c1"), tx.outbox.get("c2") is not None)) == (None, True)


# ── failed statements doom the transaction ──

def test_a_swallowed_error_cannot_commit_part_of_a_transaction(pg: Store) -> None:
    seed(pg, "dup")
    with pytest.raises(Conflict, match="rolled back"), pg.transaction() as tx:
        tx.outbox.insert(command_id="c1", kind="k", payload={})
        with pytest.raises(Conflict):
            tx.outbox.insert(command_id="dup", kind="k", payload={})
        with pytest.raises(Conflict, match="earlier statement"):
            tx.outbox.get("c1")
    assert pg.read(lambda tx: tx.outbox.get("c1")) is None


def test_read_transactions_are_read_only(pg: Store) -> None:
    with pytest.raises(StoreUnavailable, match="read-only"), pg.transaction(write=False) as tx:
        tx.outbox.insert(command_id="c1", kind="k", payload={})
    assert pg.read(lambda tx: tx.outbox.count_by_status()) == {}


def test_a_closed_store_is_unavailable(pg_backend: StoreBackend) -> None:
    store = pg_backend.migrated()
    store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        store.read(lambda tx: tx.outbox.get("x"))


def test_values_the_database_refuses_are_conflicts(pg: Store) -> None:
    with pytest.raises(Conflict, match="value rejected"):
        pg.transact(lambda tx: tx.outbox.insert(command_id="c\x00", kind="k", payload={}))
    assert pg.read(lambda tx: tx.outbox.count_by_status()) == {}


@pytest.mark.parametrize(("error", "expected"), [
    (psycopg.errors.SerializationFailure("could not serialize access"), StoreBusy),
    (psycopg.errors.DeadlockDetected("deadlock detected"), StoreBusy),
    (psycopg.errors.LockNotAvailable("could not obtain lock"), StoreBusy),
    (psycopg.OperationalError("server closed the connection unexpectedly"), StoreBusy),
    (psycopg.errors.UniqueViolation("duplicate key"), Conflict),
    (psycopg.errors.CheckViolation("check"), Conflict),
    (psycopg.errors.NumericValueOutOfRange("out of range"), Conflict),
    (psycopg.errors.UndefinedTable("relation does not exist"), StoreUnavailable),
    (psycopg.errors.SyntaxError("syntax error"), StoreUnavailable),
])
def test_driver_errors_are_translated_once(error: psycopg.Error, expected: type[Exception]) -> None:
    translated = translate_postgres_error(error, _Scrubber("postgresql://u:pw@h/d"))
    assert type(translated) is expected
    assert "\n" not in str(translated)


def test_status_values_match_the_check_constraint(pg: Store) -> None:
    rows = pg.read(lambda tx: raw(
        tx, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'commands_status_check' "
            "AND connamespace = current_schema()::regnamespace"))  # not another test's schema
    assert len(rows) == 1
    for status in CommandStatus:
        assert f"'{status.value}'" in rows[0][0]


def test_postgres_store_is_the_backend_of_postgresql_urls(pg_backend: StoreBackend) -> None:
    assert isinstance(pg_backend.open(), PostgresStore)


# ── the event sequence, taken at COMMIT (ADR 0096) ──

def _event(n: int) -> NewEvent:
    return NewEvent(id=f"evt-{n}", tenant_id="t", space_id="s", subject=Subject("Test", str(n)), type="Tested",
                    payload={"n": n})


def _log(store: Store) -> list[tuple[int, str]]:
    return [(e.sequence, e.id) for e in store.read(lambda tx: tx.events.list_events(tenant_id="t", space_id="s"))]


def test_a_unit_on_an_application_transaction_sees_earlier_units_events_with_their_sequences(
        pg_backend: StoreBackend, pg: Store) -> None:
    """Two units on one application transaction: the second reads the log after the first appended, before
    COMMIT. Without settling first it would see the event without its number and ``after=0`` would skip it."""
    with psycopg.connect(postgres_url()) as conn:
        with pg.unit_on(conn) as tx:
            assert tx.events.append_event(_event(1))
        with pg.unit_on(conn) as tx:
            listed = [(e.sequence, e.id) for e in tx.events.list_events(tenant_id="t", space_id="s")]
        conn.commit()
    assert listed == [(1, "evt-1")]
    assert [(e.sequence, e.id) for e in pg.read(lambda tx: tx.events.list_events(tenant_id="t", space_id="s"))] == [
        (1, "evt-1")]


def test_audit_finds_an_event_committed_without_its_sequence(pg_backend: StoreBackend, pg: Store) -> None:
    """With the trigger disabled (by hand; fencepost never does) an event commits without a sequence, and no
    reader tailing by sequence would ever see it: ``fencepost audit`` says so."""
    pg.transact(lambda tx: tx.events.append_event(_event(1)))
    assert not [f for f in pg.read(lambda tx: tx.audit.invariant_findings()) if f.check == "event_without_sequence"]
    with admin_connect() as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(str(pg_backend.schema))))
        conn.execute(b"ALTER TABLE host_events DISABLE TRIGGER host_events_sequence_at_commit")
        conn.commit()
    pg.transact(lambda tx: tx.events.append_event(_event(2)))
    found = [(f.subject, f.detail) for f in pg.read(lambda tx: tx.audit.invariant_findings())
             if f.check == "event_without_sequence"]
    assert found == [("evt-2", "Tested event of space t/s has no sequence (its trigger was disabled or bypassed; a "
                               "reader tailing by sequence never sees it)")]


def test_the_sequence_trigger_numbers_the_events_of_its_own_schema(pg_backend: StoreBackend) -> None:
    """The trigger runs in the writing session. Bound to the migrating session's search_path (``b, a``, with
    ``b`` absent then), it took a later fencepost's numbers in ``b`` and left ``a``'s events without any (a
    break-it trial); it is bound to the schema its tables were created in. After that schema is renamed it
    names the event's own schema."""
    a, b = new_schema_name("seqa"), new_schema_name("seqb")
    renamed = f"{a}_renamed"
    create_schema(a)
    stores: list[Store] = []
    try:
        base = postgres_url()
        path = quote(f"-csearch_path={b},{a}", safe="")
        stores.append(open_store(f"{base}{'&' if '?' in base else '?'}options={path}"))
        stores[-1].migrate()  # into a: b does not exist yet
        create_schema(b)
        stores.append(open_store(schema_url(b)))
        stores[-1].migrate()
        in_a, in_b = open_store(schema_url(a)), stores[-1]
        stores.append(in_a)
        in_a.transact(lambda tx: tx.events.append_event(_event(1)))
        in_b.transact(lambda tx: tx.events.append_event(_event(2)))
        assert _log(in_a) == [(1, "evt-1")]
        assert _log(in_b) == [(1, "evt-2")]
        for store in stores:
            store.close()
        stores.clear()
        with admin_connect() as conn:
            conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(a), sql.Identifier(renamed)))
        stores.append(open_store(schema_url(renamed)))
        stores[-1].transact(lambda tx: tx.events.append_event(_event(3)))
        assert _log(stores[-1]) == [(1, "evt-1"), (2, "evt-3")]
    finally:
        for store in stores:
            store.close()
        for name in (a, renamed, b):
            drop_schema(name)


def test_a_temporary_table_of_the_counters_name_cannot_stand_in_for_it(pg_backend: StoreBackend, pg: Store) -> None:
    """A break-it trial: a session's temporary ``host_event_sequences`` was found before the schema's (PostgreSQL
    searches pg_temp first unless told otherwise), so the event took its number from it, the real counter
    stayed behind, and every later append of the space failed on a duplicate sequence."""
    with psycopg.connect(postgres_url()) as conn:
        conn.execute(b"CREATE TEMP TABLE host_event_sequences (tenant_id text, space_id text, last int, "
                     b"PRIMARY KEY (tenant_id, space_id))")
        conn.commit()
        with pg.unit_on(conn) as tx:
            assert tx.events.append_event(_event(1))
        conn.commit()
        assert conn.execute(b"SELECT count(*) FROM pg_temp.host_event_sequences").fetchone() == (0,)
    pg.transact(lambda tx: tx.events.append_event(_event(2)))
    assert _log(pg) == [(1, "evt-1"), (2, "evt-2")]


def test_migrate_waits_for_another_runs_step_longer_than_the_lock_timeout(pg_backend: StoreBackend) -> None:
    """A second ``fencepost migrate`` waits for the first however long its step takes (a step rebuilding an
    index over a large history takes longer than the 5 s lock timeout), instead of failing with StoreBusy."""
    store = pg_backend.open(lock_timeout_seconds=0.2)
    with psycopg.connect(postgres_url(), autocommit=True) as holder:
        holder.execute("SET search_path TO " + str(pg_backend.schema))
        holder.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (0x6670, pg_backend.schema))
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(store.migrate()))
        thread.start()
        time.sleep(1.0)  # five lock timeouts
        assert done == [] and thread.is_alive()
        holder.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (0x6670, pg_backend.schema))
        thread.join(60)
    assert done and len(done[0]) == store.expected_version  # type: ignore[arg-type]
    store.require_schema()


def test_a_migration_step_blocked_on_its_tables_says_what_to_stop(pg_backend: StoreBackend) -> None:
    store = pg_backend.open(lock_timeout_seconds=0.3)
    steps = store.migrations()
    with store._connection() as conn:  # apply the steps before 0015 by hand, as an older fencepost did
        for step in steps[:14]:
            with conn.transaction():
                conn.execute(step.sql.encode("utf-8"))
                conn.execute(_CREATE_SCHEMA_TABLE.encode("utf-8"))
                conn.execute("INSERT INTO fencepost_schema VALUES (%s, %s, %s, clock_timestamp())",
                             (step.version, step.name, step.checksum))
    rebuild = steps[14]  # 0015 rebuilds the lease history's key under the table's lock
    with psycopg.connect(postgres_url()) as reader:  # an open session reading the history, as a report would
        reader.execute("SET search_path TO " + str(pg_backend.schema))
        reader.execute("SELECT count(*) FROM lease_events")
        with pytest.raises(StoreBusy) as refused:
            store.migrate()
        reader.rollback()
    message = str(refused.value)
    assert f"migration {rebuild.version:04d}_{rebuild.name}" in message and "stop the workers" in message, message
    assert [s.version for s in store.migrate()] == [s.version for s in steps[14:]]  # once the session is gone


@pytest.mark.parametrize("call", [
    "fencepost_is_json(payload)", "fencepost_is_json_object(payload)",
    "fencepost_json_field(payload, ARRAY['i'])", "fencepost_json_array_length(payload, ARRAY['a'])",
])
def test_the_json_check_functions_work_in_a_parallel_query(pg: Store, call: str) -> None:
    """A parallel worker cannot open the subtransaction of a PL/pgSQL EXCEPTION block; with the functions marked
    PARALLEL SAFE, `fencepost audit` failed on a commands table large enough for a parallel scan."""
    seed(pg, "c1", "c2")

    def unit(tx: UnitOfWork) -> int:
        version = int(tx.execute_raw("SHOW server_version_num")[0][0])
        forced = "debug_parallel_query" if version >= 160000 else "force_parallel_mode"
        tx.execute_raw(f"SET LOCAL {forced} = on")  # plan every parallel-safe query as a parallel one
        return int(tx.execute_raw(f"SELECT count(*) FROM commands WHERE ({call}) IS NOT DISTINCT FROM ({call})")[0][0])

    assert pg.read(unit) == 2


def test_a_connection_lost_inside_a_savepoint_is_busy_so_the_whole_unit_is_retried(pg: Store) -> None:
    """A group commit runs each unit in a savepoint. When the connection drops, rolling back to the savepoint
    fails too; that must surface as StoreBusy (Store.transact retries the whole group), not as
    TransactionAborted, which ended every unit of the group failed after an outage of seconds."""
    with pytest.raises(StoreBusy), pg.transaction() as tx:  # type: ignore[attr-defined]
        pid = tx.execute_raw("SELECT pg_backend_pid()")[0][0]
        with tx.savepoint():
            with psycopg.connect(postgres_url(), autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            tx.execute_raw("SELECT 1")
    assert pg.read(lambda tx: tx.execute_raw("SELECT 1")) == [(1,)]  # the pool hands out a live connection
