"""PostgreSQL store: psycopg 3 with a ``psycopg_pool.ConnectionPool``; the server's clock rules leases.

Why the database clock: workers run on many machines whose clocks drift. A lease is only safe if one
clock decides when it expires, and the one clock every worker shares is the server's. Each transaction
reads ``clock_timestamp()`` once (``PostgresExecutor.now``) and every statement of that decision uses
that instant, so the rows it writes and the lease events it records agree, exactly as on SQLite; lease
deadlines are computed by the server (``:now + make_interval(secs => :lease_seconds)``). The hot outbox
units (``EAGER_CLOCK_UNITS``) read the instant in the same round trip as their BEGIN (ADR 0018), a host unit
in the same round trip as its invocation row lock, after it (``CLOCK_WITH_LOCK``, ADR 0098), every other unit
at its first ``now()``, after the locks it takes first. So a statement that later waits on a row lock
judges expiry by a slightly earlier instant: it can only see a lease as *less* expired (and a deadline it
computes is only nearer), never steal an active one.

Why READ COMMITTED plus explicit row locks for writes: every decision is a conditional statement that
re-checks its condition on the newest row version after any lock wait (claims lock with
``FOR UPDATE SKIP LOCKED``; ``lock_attempt`` with ``FOR UPDATE``; fenced writes name the token), so the
stronger isolation levels would only add serialization failures. Read-only units of work
(``write=False``) run REPEATABLE READ READ ONLY: one consistent snapshot, never a serialization failure.

Why connections are in autocommit mode with explicit BEGIN/COMMIT: the crash points
``<name>:before-commit``/``<name>:after-commit`` must sit exactly around COMMIT, as in the SQLite store.
A unit's BEGIN goes out with its first statement, in one pipeline (ADR 0098), unless it carries the clock
read (``EAGER_CLOCK_UNITS``): BEGIN takes no snapshot and no lock, so only the round trip it cost is saved.

Driver errors are translated once, here, into ``fencepost.core.errors``. No message ever carries the
DSN, a password or a lease token: only PostgreSQL's primary message is used (never its DETAIL, which can
echo a failing row with its token), and it is scrubbed of the DSN and password.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from types import MappingProxyType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from fencepost.core.clock import Clock
from fencepost.core.crashpoints import crashpoint
from fencepost.core.errors import (
    Conflict,
    FencepostError,
    InvalidInput,
    SchemaNotReady,
    StoreUnavailable,
    TransactionAborted,
)
from fencepost.store.base import MigrationStep, Store, StoreBusy, WorkWaiter
from fencepost.store.migrations import load_migrations
from fencepost.store.postgres.listen import PostgresWorkWaiter
from fencepost.store.sql.executor import Result
from fencepost.store.sql.queries import Query, dialect_queries, to_pyformat
from fencepost.store.sql.unit import SqlUnitOfWork

# SQLSTATEs of transient contention: serialization failure, deadlock, lock not available.
_BUSY_STATES = {"40001", "40P01", "55P03"}
# First key of the migration advisory lock ("fp" in ASCII); the second is a hash of the schema name, so
# migrations of different schemas in one database do not wait for each other.
_MIGRATION_LOCK_CLASS = 0x6670
_SERVER_IN_TEXT = re.compile(r'connection to server (?:at "([^"]*)", port (\d+)|on socket "([^"]*)") failed:')
_MISSING_DATABASE = re.compile(r'^database "(.*)" does not exist$')
_URL_IN_TEXT = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)

#: A write unit's BEGIN together with the store clock's read (``store_now``'s clock_timestamp()).
_BEGIN_WRITE = b"BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE; SELECT clock_timestamp()"
_BEGIN_WRITE_LAZY = b"BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE"
_BEGIN_READ = b"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
#: Whether libpq has pipeline mode (14 and newer; psycopg's binary wheel bundles one), for ADR 0098.
_PIPELINE = psycopg.Pipeline.is_supported()
_READ_CLOCK = b"SELECT clock_timestamp()"
#: The statements that take the first lock of the host's lock order, the invocation row (ADR 0022). A unit
#: that has no instant yet reads the clock in the same round trip, on the server right after the lock is
#: granted (ADR 0098): every host writer serializes on that lock, so the instant is read where it would be
#: read at the unit's first ``now()``, or earlier only by locks that cannot wait (the same row again) or that
#: come later in the lock order, which can only make a lease look less expired, as for ``EAGER_CLOCK_UNITS``.
CLOCK_WITH_LOCK = frozenset({"lock_invocation", "lock_invocation_for_adapter_write"})
#: The units whose instant is read with BEGIN (one round trip less on the hot path, ADR 0018): they take no
#: lock before deciding by the instant, so reading it earlier can only make a lease look less expired. Every
#: other unit reads it at its first use, after the locks it takes first (the package lock of an admission or
#: a guard change), so that recorded instants follow the order in which the units serialized.
EAGER_CLOCK_UNITS = frozenset({"outbox.claim", "outbox.deliver", "outbox.heartbeat", "outbox.enqueue"})
#: The worker's batch units, run without a transaction block (ADR 0090): their one statement commits by itself
#: and takes the server's ``statement_timestamp()`` as its instant, so a claim or a completion is one round
#: trip instead of three. A unit that must run more than one statement opens the block first
#: (``Executor.begin_block``).
SINGLE_STATEMENT_UNITS = frozenset({"outbox.claim", "outbox.deliver"})
#: The session settings a unit on an application's connection saves, sets for itself and restores (ADR 0033).
_READ_SESSION = (b"SELECT current_database(), current_setting('search_path'), current_setting('TimeZone'), "
                 b"current_setting('lock_timeout')")
#: ``is_local`` true: the values also revert when the transaction ends, whatever happens to it.
_SET_SESSION = (b"SELECT set_config('search_path', %s, true), set_config('TimeZone', %s, true), "
                b"set_config('lock_timeout', %s, true)")
_MIGRATION_LOCK = b"SELECT pg_advisory_xact_lock(%s, hashtext(coalesce(current_schema(), '')))"
_CREATE_SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS fencepost_schema (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL
)"""


class _Scrubber:
    """Removes the DSN, its password and any URL from a driver message and keeps one line."""

    def __init__(self, dsn: str) -> None:
        self._secrets = [dsn]
        try:
            password = conninfo_to_dict(dsn).get("password")
        except psycopg.Error:
            password = None
        if isinstance(password, str) and len(password) >= 3:
            self._secrets.append(password)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = _URL_IN_TEXT.sub("<url>", text)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[0] if lines else "no detail"


def _primary_message(error: BaseException, scrub: _Scrubber) -> str:
    diag = getattr(error, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    return scrub(primary or str(error))


def translate_postgres_error(error: BaseException, scrub: _Scrubber) -> FencepostError:
    """Map a psycopg error to fencepost's error types.

    Args:
        error: the driver (or pool) exception.
        scrub: removes the DSN and password from driver text.
    Returns:
        ``StoreBusy`` for transient contention and lost connections (serialization failure, deadlock,
        lock not available, any ``OperationalError``, pool timeout); ``Conflict`` for a constraint or
        value the database refused (``IntegrityError``, ``DataError``); ``StoreUnavailable`` otherwise.
    """
    if isinstance(error, PoolClosed):
        return StoreUnavailable("the PostgreSQL control store is closed")
    if isinstance(error, PoolTimeout):
        return StoreBusy("no PostgreSQL connection became available within the pool timeout")
    message = _primary_message(error, scrub)
    if isinstance(error, psycopg.IntegrityError):
        return Conflict(f"constraint failed: {message}")
    if isinstance(error, psycopg.DataError):
        # A value the database refuses (out of range, malformed) is the caller's conflict with the schema,
        # exactly as the CHECK constraint that catches the same value on SQLite.
        return Conflict(f"value rejected: {message}")
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate in _BUSY_STATES or isinstance(error, psycopg.OperationalError):
        return StoreBusy(f"PostgreSQL is busy or unreachable: {message}")
    return StoreUnavailable(f"PostgreSQL error: {message}")


def _has_rows(cursor: psycopg.Cursor[Any]) -> bool:
    """Whether the last statement returned a result set (a SELECT, or a write with RETURNING).

    Asked of the result's status rather than through ``cursor.description``, which builds a ``Column`` object
    per column on every access: about a third of the client's time per statement for the invocation's
    32-column rows, measured.
    """
    result = cursor.pgresult
    return result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK


def _utc_row(row: dict[str, Any]) -> dict[str, Any]:
    for key, value in row.items():
        if isinstance(value, datetime):
            row[key] = value.astimezone(UTC)
        elif isinstance(value, memoryview):
            row[key] = bytes(value)
    return row


class PostgresExecutor:
    """The ``Executor`` of one open PostgreSQL transaction on one pooled connection.

    After any failed statement PostgreSQL has aborted the transaction; every later statement and the
    commit then raise the same error type instead of silently committing nothing.
    """

    backend = "postgres"

    def __init__(self, conn: psycopg.Connection[Any], store: PostgresStore, *, single_name: str | None = None,
                 own_connection: bool = True) -> None:
        self._conn = conn
        #: Whether the connection is the store's own (pooled): only then may a statement take the clock read
        #: into a pipeline with it; an application's connection (``unit_on``) is used exactly as before.
        self._own_connection = own_connection
        self._store = store
        self._now: datetime | None = None
        self.failure: FencepostError | None = None
        #: Set for a unit of ``SINGLE_STATEMENT_UNITS`` until ``begin_block``: no BEGIN was sent, so the one
        #: statement the unit runs commits by itself (ADR 0090).
        self.single_statement = single_name is not None
        self._single_name = single_name
        self._statements = 0
        #: The BEGIN of a unit whose instant is read lazily, not sent yet: it travels with the unit's first
        #: statement in one pipeline (one round trip less per unit), or is never sent if the unit runs none.
        self._pending_begin: bytes | None = None

    def defer_begin(self, begin: bytes) -> None:
        """Send ``begin`` together with this unit's first statement instead of now (ADR 0098).

        BEGIN takes no snapshot and no lock, and a transaction's snapshot is taken by its first statement, so
        sending it later, in the same pipeline as that statement, changes nothing the unit can observe.
        """
        self._pending_begin = begin

    @property
    def began(self) -> bool:
        """Whether the unit's BEGIN was sent (False only for a unit that ran no statement yet)."""
        return self._pending_begin is None

    def _send_begin(self) -> None:
        """Send a deferred BEGIN on its own (before a savepoint or an ad-hoc statement)."""
        begin, self._pending_begin = self._pending_begin, None
        if begin is not None:
            self._conn.execute(begin)

    @property
    def ran_statement(self) -> bool:
        """A single-statement unit's statement was sent (and committed, unless it failed)."""
        return self._statements > 0

    def begin_block(self) -> None:
        """Open the transaction block a single-statement unit needs once it is to run more than one statement
        (BEGIN and the clock read in one round trip); a no-op for a unit that has one.

        Raises:
            RuntimeError: a statement already ran on its own (a programming error: call this first).
            StoreBusy, StoreUnavailable: the BEGIN failed.
        """
        if not self.single_statement:
            return
        if self._statements:
            raise RuntimeError("begin_block() after a single statement already committed on its own")
        try:
            with self._conn.cursor() as cursor:
                cursor.execute(_BEGIN_WRITE)
                cursor.nextset()
                row = cursor.fetchone()
        except psycopg.Error as error:
            raise translate_postgres_error(error, self._store.scrub) from None
        assert row is not None
        self.start(row[0])
        self.single_statement = False

    def now(self) -> datetime:
        """The server's ``clock_timestamp()``, read once per transaction (aware UTC ``datetime``).

        Raises:
            RuntimeError: in a single-statement unit, whose instant is its statement's own (ADR 0090).
        """
        if self.single_statement:
            raise RuntimeError("a single-statement unit takes its statement's own instant; call begin_block() first")
        # One instant per transaction: every row a decision writes carries the same server time.
        if self._now is None:
            self._now = self.run(self._store.queries["store_now"], {}).rows[0]["now"]
        assert self._now is not None
        return self._now

    def start(self, now: datetime) -> None:
        """Take ``now`` (read by the server together with BEGIN) as this transaction's instant."""
        self._now = now.astimezone(UTC)

    def _guard(self) -> None:
        if self.failure is not None:
            raise type(self.failure)(
                f"an earlier statement of this transaction failed ({self.failure}); it will be rolled back")

    def _fail(self, error: psycopg.Error) -> FencepostError:
        self.failure = translate_postgres_error(error, self._store.scrub)
        return self.failure

    def run(self, query: Query, params: Mapping[str, Any]) -> Result:
        self._guard()
        if _reads_with_nul(query, params):
            # PostgreSQL text cannot hold NUL, so no stored value equals one: the read finds nothing, as it does
            # on SQLite (an unknown id is 404, a cursor naming nothing 422), instead of a 409 "value rejected"
            # (issue 11 item 8). Every read compares its text parameters for equality (or ``IS NULL OR =``).
            return Result(rows=[], rowcount=0)
        if self.single_statement:
            if self._statements:
                raise RuntimeError(f"a single-statement unit ran a second statement ({query.name}); "
                                   "call begin_block() first")
            self._statements += 1
            # Nothing is committed before the statement is sent: a crash here leaves what a crash before COMMIT
            # leaves in a transaction block (ADR 0090).
            crashpoint(f"{self._single_name}:before-commit")
        try:
            with self._conn.cursor(row_factory=dict_row) as cursor:
                begin, self._pending_begin = self._pending_begin, None
                clock = (_PIPELINE and self._own_connection and not self.single_statement and self._now is None
                         and query.name in CLOCK_WITH_LOCK)
                if not _PIPELINE and begin is not None:  # a libpq older than 14: BEGIN on its own (ADR 0098)
                    self._conn.execute(begin)
                    cursor.execute(query.sql, params)
                elif begin is None and not clock:
                    cursor.execute(query.sql, params)
                else:
                    # One round trip: the deferred BEGIN, the statement, and the clock read after its lock.
                    with self._conn.pipeline():
                        if begin is not None:
                            self._conn.execute(begin)
                        cursor.execute(query.sql, params)
                        instant = self._conn.execute(_READ_CLOCK) if clock else None
                    if instant is not None:
                        row = instant.fetchone()
                        assert row is not None
                        self.start(row[0])
                rows = [_utc_row(r) for r in cursor.fetchall()] if _has_rows(cursor) else []
                return Result(rows=rows, rowcount=cursor.rowcount if cursor.rowcount >= 0 else len(rows))
        except psycopg.Error as error:
            raise self._fail(error) from None

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run ad-hoc SQL with ``%s`` placeholders for tests and benchmarks. Not for application paths.

        Returns:
            The result rows as tuples (empty for statements without a result).
        Raises:
            Conflict, StoreBusy, StoreUnavailable: translated driver errors.
        """
        self._guard()
        try:
            self._send_begin()
            with self._conn.cursor() as cursor:
                cursor.execute(sql.encode("utf-8"), params or None)
                return list(cursor.fetchall()) if _has_rows(cursor) else []
        except psycopg.Error as error:
            raise self._fail(error) from None

    def savepoint(self, name: str) -> None:
        self._guard()
        try:
            self._send_begin()
            self._conn.execute(f"SAVEPOINT {name}".encode())
        except psycopg.Error as error:
            raise self._fail(error) from None

    def release(self, name: str) -> None:
        self._guard()
        try:
            self._conn.execute(f"RELEASE SAVEPOINT {name}".encode())
        except psycopg.Error as error:
            raise self._fail(error) from None

    def rollback_to(self, name: str) -> None:
        # After a failed statement PostgreSQL accepts only ROLLBACK (TO SAVEPOINT); once rolled back to the
        # savepoint the transaction is usable again, so the remembered failure is cleared.
        try:
            self._conn.execute(f"ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}".encode())
        except psycopg.Error as error:
            failure = self._fail(error)
            if isinstance(failure, StoreBusy):
                # The connection is gone (or the server too busy to answer): the whole transaction is lost and
                # nothing of it committed, so Store.transact retries all of it, a group commit's other units
                # included, as for any busy error, rather than ending every unit of the group as failed.
                raise failure from None
            raise TransactionAborted(f"a nested unit could not be rolled back alone: {error}") from None
        self.failure = None


def _reads_with_nul(query: Query, params: Mapping[str, Any]) -> bool:
    """A ``SELECT`` one of whose text parameters (or list items) holds a NUL character."""
    if not query.sql.lstrip().upper().startswith("SELECT"):
        return False
    for value in params.values():
        items = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(item, str) and "\x00" in item for item in items):
            return True
    return False


@cache
def _pyformat_queries(package: str) -> Mapping[str, Query]:
    """The dialect's queries with psycopg ``%(name)s`` parameters, converted once per process."""
    return MappingProxyType({name: replace(q, sql=to_pyformat(q.sql)) for name, q in dialect_queries(package).items()})


class PostgresStore(Store):
    """A PostgreSQL control database shared by fencepost processes on any number of machines.

    Args:
        dsn: a libpq URL or conninfo string (``postgresql://user@host:5432/dbname``). Never shown.
        clock: accepted for symmetry with SQLite; informational only (the server's clock rules leases).
        schema: run in this PostgreSQL schema (sets ``search_path``); default: the DSN's search_path.
        min_size, max_size: connection pool bounds (connections).
        connect_timeout_seconds: libpq connect timeout (seconds, at least 1).
        pool_timeout_seconds: how long a unit of work waits for a pooled connection (seconds).
        lock_timeout_seconds: how long one statement waits on a row lock before ``StoreBusy`` (seconds),
            the counterpart of SQLite's busy timeout; ``Store.transact`` then retries within its bound.
        busy_wait_seconds: bound on retrying transient contention inside ``transact`` (seconds).
    Raises:
        StoreUnavailable: the URL is malformed or the server cannot be reached (one line, no DSN).
    """

    backend = "postgres"

    def __init__(self, dsn: str, clock: Clock | None = None, *, schema: str | None = None, min_size: int = 1,
                 max_size: int = 10, connect_timeout_seconds: float = 5.0, pool_timeout_seconds: float = 30.0,
                 lock_timeout_seconds: float = 5.0, busy_wait_seconds: float = 30.0) -> None:
        super().__init__(clock=clock, busy_wait_seconds=busy_wait_seconds)
        self.display_url = "postgresql"
        self.schema = schema
        self.lock_timeout_seconds = lock_timeout_seconds
        self.scrub = _Scrubber(dsn)
        self.queries = _pyformat_queries("fencepost.store.postgres")
        self._local = threading.local()
        self._home_settings: tuple[str, str] | None = None
        try:
            conninfo_to_dict(dsn)
        except psycopg.Error:
            raise StoreUnavailable(
                "cannot connect to the PostgreSQL control database: the URL is malformed") from None
        connect_kwargs: dict[str, Any] = {"autocommit": True,
                                          "connect_timeout": max(1, round(connect_timeout_seconds)),
                                          "application_name": "fencepost"}
        self.dsn = dsn  # never shown: messages go through ``scrub``
        self.connect_kwargs = dict(connect_kwargs)
        # Probe once so that an unreachable server or a wrong URL fails here with one clear line, instead
        # of a pool retrying (and logging) in the background.
        try:
            probe = psycopg.connect(dsn, **connect_kwargs)
        except psycopg.Error as error:
            raise StoreUnavailable(
                f"cannot connect to the PostgreSQL control database: {self._connect_reason(error)}") from None
        try:
            self._configure(probe)
        except psycopg.Error as error:
            raise translate_postgres_error(error, self.scrub) from None
        finally:
            probe.close()
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            dsn, kwargs=connect_kwargs, min_size=min_size, max_size=max_size, open=True,
            configure=self._configure, timeout=pool_timeout_seconds, name="fencepost")

    def _connect_reason(self, error: psycopg.Error) -> str:
        # libpq: "connection failed: connection to server at "h", port p failed: FATAL:  <reason>\n\t<hint>"
        line = self.scrub(str(error))
        reason = line.rsplit("failed:", 1)[-1].strip() if "failed:" in line else line
        if not reason.startswith("FATAL:"):  # the server was not reached: say where fencepost looked
            where = _SERVER_IN_TEXT.search(line)
            if where:
                place = (f"{where.group(1)} port {where.group(2)}" if where.group(1) is not None
                         else f"socket {where.group(3)}")
                return f"{place}: {reason}; is PostgreSQL running there and accepting connections?"
        reason = reason.removeprefix("FATAL:").strip() or "no detail"
        missing = _MISSING_DATABASE.search(reason)
        if missing:  # the first thing a new user meets: say what to do (the server sends no SQLSTATE here)
            name = missing.group(1).replace('"', '""')
            reason += (f"; create it first (createdb, or CREATE DATABASE \"{name}\" as a user allowed to), "
                       "then run fencepost migrate")
        return reason

    def _why_no_connection(self) -> StoreBusy:
        """The pool gave no connection in time: say why when the server itself refuses one (the database was
        dropped, the server stopped), which the pool only logs without its reason (a break-it trial); otherwise
        every connection is in use."""
        try:
            psycopg.connect(self.dsn, **self.connect_kwargs).close()
        except psycopg.Error as error:
            return StoreBusy("no PostgreSQL connection became available within the pool timeout: "
                             f"{self._connect_reason(error)}")
        return StoreBusy("no PostgreSQL connection became available within the pool timeout: every pooled "
                         "connection is in use")

    def configure_session(self, conn: psycopg.Connection[Any]) -> None:
        """Apply this store's session settings to a connection it did not pool (the LISTEN connection)."""
        self._configure(conn)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Session settings of every connection: UTC, the schema, the lock timeout."""
        lock_timeout = f"{max(1, round(self.lock_timeout_seconds * 1000))}ms"
        statements: list[sql.SQL | sql.Composed] = [
            sql.SQL("SET TIME ZONE 'UTC'"),
            sql.SQL("SET lock_timeout = {}").format(sql.Literal(lock_timeout)),
        ]
        if self.schema is not None:
            statements.append(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        for statement in statements:
            conn.execute(statement)

    # ── units of work ──
    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            conn = self._pool.getconn()
        except PoolTimeout:
            raise self._why_no_connection() from None
        except psycopg.Error as error:
            raise translate_postgres_error(error, self.scrub) from None
        try:
            yield conn
        finally:
            # A connection left broken or inside a transaction is discarded/reset by the pool.
            self._pool.putconn(conn)

    @contextmanager
    def transaction(self, *, write: bool = True, name: str | None = None) -> Iterator[SqlUnitOfWork]:
        """Open a unit of work: READ COMMITTED for writes, REPEATABLE READ READ ONLY for reads.

        Commits on normal exit and rolls back on any exception; crash points ``<name>:before-commit`` and
        ``<name>:after-commit`` fire around COMMIT.

        Raises:
            RuntimeError: a transaction is already open on this thread.
            StoreBusy: contention or a lost connection (``Store.transact`` retries it).
            Conflict: a constraint or value refused by the database.
            StoreUnavailable: any other database error.
        """
        if getattr(self._local, "open", False):
            raise RuntimeError("a transaction is already open on this thread")
        self._local.open = True
        try:
            with self._connection() as conn:
                single = name if write and name in SINGLE_STATEMENT_UNITS else None
                executor = PostgresExecutor(conn, self, single_name=single)
                tx = SqlUnitOfWork(executor, self.queries, self.claim_rotation)
                try:
                    if single is not None:
                        pass  # no block: the unit's statement commits by itself (ADR 0090)
                    elif write and name not in EAGER_CLOCK_UNITS:
                        executor.defer_begin(_BEGIN_WRITE_LAZY)
                    elif write:
                        # BEGIN and the clock read in one round trip (one simple-protocol message).
                        with conn.cursor() as cursor:
                            cursor.execute(_BEGIN_WRITE)
                            cursor.nextset()
                            row = cursor.fetchone()
                            assert row is not None
                            executor.start(row[0])
                    else:
                        executor.defer_begin(_BEGIN_READ)
                except psycopg.Error as error:
                    raise translate_postgres_error(error, self.scrub) from None
                try:
                    yield tx
                    if executor.failure is not None:
                        # The caller swallowed a store error; PostgreSQL would answer COMMIT with ROLLBACK.
                        raise type(executor.failure)(
                            f"the transaction was rolled back after an error: {executor.failure}")
                    if executor.single_statement:
                        if name and not executor.ran_statement:
                            crashpoint(f"{name}:before-commit")  # a unit that had nothing to do
                    else:
                        if name:
                            crashpoint(f"{name}:before-commit")
                        if executor.began:  # a unit that sent no statement has no transaction to commit
                            conn.execute(b"COMMIT")
                except BaseException as error:
                    if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                        with suppress(psycopg.Error):
                            conn.execute(b"ROLLBACK")
                    if isinstance(error, psycopg.Error):
                        raise translate_postgres_error(error, self.scrub) from None
                    raise
        finally:
            self._local.open = False
        if name:
            crashpoint(f"{name}:after-commit")

    def _home(self) -> tuple[str, str]:
        """This store's database name and effective ``search_path`` (read once from a pooled connection)."""
        home = self._home_settings
        if home is None:
            with self._connection() as conn:
                try:
                    with conn.cursor(row_factory=tuple_row) as cursor:
                        row = cursor.execute(_READ_SESSION).fetchone()
                except psycopg.Error as error:
                    raise translate_postgres_error(error, self.scrub) from None
            assert row is not None
            home = (str(row[0]), str(row[1]))
            self._home_settings = home
        return home

    @contextmanager
    def unit_on(self, connection: Any) -> Iterator[SqlUnitOfWork]:
        """A unit of work inside the application's own open transaction on its own psycopg 3 connection
        (host-spec §1.Y-16, ADR 0033): ``with store.unit_on(conn) as tx: host.submit(..., tx=tx)``.

        Its statements run in the application's transaction and commit or roll back with it: this never
        commits, rolls back, closes or pools ``connection``. For its own statements it sets this store's
        ``search_path``, UTC and lock timeout as transaction-local settings (``set_config(..., true)``) and puts
        the application's values back when the block ends. The instant is the server's ``clock_timestamp()``
        at its first use, as in the store's own units.

        Args:
            connection: a ``psycopg.Connection`` to this store's database that is in a transaction or will
                start one at its first statement: not autocommit (the application calls ``conn.commit()``),
                or autocommit inside a ``with conn.transaction():`` block.
        Raises:
            InvalidInput: not a psycopg connection; closed, busy or broken; in autocommit mode outside a
                transaction block; its transaction already failed; connected to another database.
            StoreBusy, Conflict, StoreUnavailable: translated driver errors of the unit's statements, which
                leave the application's transaction failed (it must roll back). A statement error that the
                block swallowed is raised again when the block ends, since that transaction can no longer
                commit.
        """
        if not isinstance(connection, psycopg.Connection):
            raise InvalidInput("unit_on takes a psycopg 3 Connection")
        conn: psycopg.Connection[Any] = connection
        states = psycopg.pq.TransactionStatus
        status = states.UNKNOWN if conn.closed else conn.info.transaction_status
        if status == states.UNKNOWN:
            raise InvalidInput("the connection is closed or broken")
        if status == states.ACTIVE:
            raise InvalidInput("the connection is running a statement")
        if status == states.INERROR:
            raise InvalidInput("the connection's transaction has already failed: roll it back first")
        if status == states.IDLE and conn.autocommit:
            # Each statement would commit on its own: the invocation would be durable without the
            # application's rows, which is what this unit exists to prevent.
            raise InvalidInput("the connection is in autocommit mode outside a transaction block: use a "
                               "connection with autocommit off, or open `with conn.transaction():` first")
        database, search_path = self._home()
        try:
            with conn.cursor(row_factory=tuple_row) as cursor:
                saved = cursor.execute(_READ_SESSION).fetchone()
                assert saved is not None
                if saved[0] != database:
                    raise InvalidInput("the connection is to another database than this store's")
                lock_timeout = f"{max(1, round(self.lock_timeout_seconds * 1000))}ms"
                cursor.execute(_SET_SESSION, (search_path, "UTC", lock_timeout))
        except psycopg.Error as error:
            raise translate_postgres_error(error, self.scrub) from None
        executor = PostgresExecutor(conn, self, own_connection=False)

        def restore() -> None:
            # After a failed statement the transaction is aborted and its rollback reverts the settings.
            if executor.failure is None and not conn.closed and conn.info.transaction_status == states.INTRANS:
                with conn.cursor(row_factory=tuple_row) as cursor:
                    cursor.execute(_SET_SESSION, (saved[1], saved[2], saved[3]))

        try:
            unit = SqlUnitOfWork(executor, self.queries, self.claim_rotation)
            unit.events.may_hold_appends()  # earlier units of the application's transaction may have appended
            yield unit
        except BaseException:
            with suppress(psycopg.Error):  # the caller's error is the one to see
                restore()
            raise
        if executor.failure is not None:
            raise type(executor.failure)(
                f"a statement of this unit failed ({executor.failure}); the transaction must be rolled back")
        try:
            restore()
        except psycopg.Error as error:
            raise translate_postgres_error(error, self.scrub) from None

    def work_waiter(self, kinds: Sequence[str], *, listen: bool = True, name: str | None = None) -> WorkWaiter:
        """With ``listen``, a waiter on its own LISTEN connection (``application_name``
        ``fencepost-listen <name>``) that wakes the idle worker as soon as a command of ``kinds`` is
        enqueued, released or reconciled (ADR 0014); without it, polling."""
        if not listen:
            return WorkWaiter()
        return PostgresWorkWaiter(self, kinds, name=name)

    # ── schema ──
    def migrations(self) -> list[MigrationStep]:
        return load_migrations("fencepost.store.postgres")

    @staticmethod
    def _applied(conn: psycopg.Connection[Any]) -> dict[int, str]:
        exists = conn.execute(b"SELECT to_regclass('fencepost_schema') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return {}
        return {int(v): str(c) for v, c in conn.execute(b"SELECT version, checksum FROM fencepost_schema")}

    def schema_version(self) -> int:
        """The highest applied migration version (0 when unmigrated).

        Raises:
            StoreBusy, StoreUnavailable: the server cannot be reached.
        """
        with self._connection() as conn:
            try:
                return max(self._applied(conn), default=0)
            except psycopg.Error as error:
                raise translate_postgres_error(error, self.scrub) from None

    def migrate(self) -> list[MigrationStep]:
        """Apply pending migrations in order, each file as one script in its own transaction.

        Each transaction first takes a transaction-scoped advisory lock (per schema), waiting for it without
        a timeout, then re-reads the applied versions, so concurrent ``fencepost migrate`` runs are safe: the
        second waits, however long the first's step takes, finds the step applied and skips it. The step's own
        statements wait for their table locks at most the store's lock timeout.

        Returns:
            The steps applied by this call (empty when up to date).
        Raises:
            SchemaNotReady: an applied migration's checksum differs from the shipped file, or the
                database is newer than this fencepost.
            StoreBusy: a step could not lock its tables within the lock timeout (the message names the
                migration and what to stop), or another translated contention error.
            StoreUnavailable, Conflict: translated driver errors (the failing step is rolled back).
        """
        applied_now = []
        lock_timeout = f"{max(1, round(self.lock_timeout_seconds * 1000))}ms"
        with self._connection() as conn:
            try:
                for step in self.migrations():
                    with conn.transaction():
                        # Another run's step may hold the migration lock for longer than any lock timeout (a
                        # step rebuilding an index over a large table): wait for it as long as it takes, then
                        # give the step's own statements the store's lock timeout back.
                        conn.execute(b"SET LOCAL lock_timeout = 0")
                        conn.execute(_MIGRATION_LOCK, (_MIGRATION_LOCK_CLASS,))
                        conn.execute(b"SELECT set_config('lock_timeout', %s, true)", (lock_timeout,))
                        conn.execute(_CREATE_SCHEMA_TABLE.encode("utf-8"))
                        applied = self._applied(conn)
                        if step.version in applied:
                            if applied[step.version] != step.checksum:
                                raise SchemaNotReady(
                                    f"applied migration {step.version:04d}_{step.name} differs from the one "
                                    "shipped with this fencepost; refusing to continue")
                            continue
                        # No parameters: psycopg sends the file as one simple-protocol script.
                        try:
                            conn.execute(step.sql.encode("utf-8"))
                        except psycopg.errors.LockNotAvailable:
                            raise StoreBusy(
                                f"migration {step.version:04d}_{step.name} waited {self.lock_timeout_seconds:g} s "
                                "for a lock on its tables and gave up: another session holds them; stop the "
                                "workers, `fencepost serve` and any open session on this database, then run "
                                "`fencepost migrate` again") from None
                        conn.execute(b"INSERT INTO fencepost_schema (version, name, checksum, applied_at) "
                                     b"VALUES (%s, %s, %s, clock_timestamp())",
                                     (step.version, step.name, step.checksum))
                    applied_now.append(step)
                newest = max(self._applied(conn), default=0)
            except psycopg.Error as error:
                raise translate_postgres_error(error, self.scrub) from None
        if newest > self.expected_version:
            raise SchemaNotReady(f"the control database schema is version {newest}, newer than this "
                                 f"fencepost understands ({self.expected_version}); upgrade fencepost")
        return applied_now

    def close(self) -> None:
        """Close the pool and every connection it holds. Idempotent."""
        self._pool.close()
