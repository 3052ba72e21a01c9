"""SQLite store: WAL (or DELETE) journal, ``synchronous=FULL``, foreign keys on, ``BEGIN IMMEDIATE`` writes.

Why ``BEGIN IMMEDIATE`` for every write: a deferred transaction that reads and then writes can fail with
SQLITE_BUSY at its first write, after its reads were used for a decision; taking the write reservation
first makes the check and the writes one serialized decision, and makes waiting happen at BEGIN, where
the busy handler (and ``Store.transact``'s bounded retry) can wait without losing work.

Several processes share one file. Each thread gets its own connection. The lease clock is the store's
``Clock`` (one machine, one clock).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

from fencepost.core.clock import from_iso, to_iso
from fencepost.core.crashpoints import crashpoint
from fencepost.core.errors import (
    Conflict,
    FencepostError,
    IntegrityViolation,
    SchemaNotReady,
    StoreUnavailable,
    TransactionAborted,
)
from fencepost.store.base import MigrationStep, Store, StoreBusy
from fencepost.store.migrations import load_migrations
from fencepost.store.sql.executor import Result
from fencepost.store.sql.queries import Query, dialect_queries
from fencepost.store.sql.unit import SqlUnitOfWork
from fencepost.store.sqlite.file_uri import file_uri
from fencepost.store.sqlite.migrate import applied_versions, apply_migrations
from fencepost.store.sqlite.migrate import split_statements as split_statements  # re-exported for callers

_BUSY_CODES = {5, 6, 261, 517, 262}  # SQLITE_BUSY, SQLITE_LOCKED and their extended codes
_CORRUPT_CODE = 11  # SQLITE_CORRUPT (extended codes share the low byte)
_NOTADB_CODE = 26  # SQLITE_NOTADB


def translate_sqlite_error(error: sqlite3.Error) -> FencepostError:
    """Map a driver error to fencepost's error types (messages never carry a path)."""
    code = getattr(error, "sqlite_errorcode", None)
    text = str(error)
    if code in _BUSY_CODES or "database is locked" in text or "database table is locked" in text:
        return StoreBusy("the SQLite database stayed busy past the bounded wait")
    if isinstance(error, sqlite3.IntegrityError):
        return Conflict(f"constraint failed: {text.removesuffix('constraint failed').strip() or text}")
    if (code or 0) & 0xFF in (_CORRUPT_CODE, _NOTADB_CODE) or "malformed" in text or "not a database" in text:
        # A damaged file is a record that fails verification, not a store that is merely away: `fencepost audit`
        # reports it as a finding (issue 11 item 8).
        return IntegrityViolation(f"the SQLite database file is corrupt: {text}")
    return StoreUnavailable(f"SQLite error: {text}")


def sqlite_synchronous(journal_mode: str, synchronous: str) -> str:
    """The ``PRAGMA synchronous`` level that gives fencepost's ``synchronous`` option its promise (ADR 0060).

    Args:
        journal_mode: ``"wal"`` or ``"delete"``.
        synchronous: fencepost's option, ``"full"`` or ``"normal"``.

    Returns:
        ``"EXTRA"`` for ``full`` in DELETE mode, otherwise the option upper-cased. ``full`` promises that a
        COMMIT that returned survives a power loss. In DELETE mode SQLite's commit point is the unlink of the
        rollback journal, and SQLite's ``FULL`` does not sync the directory after it: a power cut before the
        next directory sync brings the journal back and rolls the committed transaction back (found by the
        power-loss harness, tests/powerloss). SQLite's ``EXTRA`` adds that directory sync. WAL mode's commit
        point is the synced WAL frame, so ``FULL`` already holds there.
    """
    if journal_mode == "delete" and synchronous == "full":
        return "EXTRA"
    return synchronous.upper()


_READONLY_CODE = 8  # SQLITE_READONLY; its extended codes share the low byte
_CANTOPEN_CODE = 14  # SQLITE_CANTOPEN


def path_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a SQLite control database, in words (no path in them), or None.

    Checked when SQLite cannot open the file or write to it, so that the answer names the cause (a directory,
    a read-only file or directory, a missing directory) instead of "unable to open database file" (issue 11
    item 8). WAL mode also writes ``-wal`` and ``-shm`` files beside the database, so its directory must be
    writable too.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "the SQLite control database path is a directory, not a database file: give a file path"
    if not os.path.isdir(directory):
        return "the directory of the SQLite control database does not exist: create it or give another path"
    if os.path.exists(path) and not os.access(path, os.R_OK):
        return "the SQLite control database file cannot be read by this user: fix its permissions"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return ("the SQLite control database file is read-only for this user: fencepost writes to it, so make it "
                "writable (or give another path)")
    if not os.access(directory, os.W_OK | os.X_OK):
        return ("the directory of the SQLite control database is read-only for this user: SQLite writes its "
                "journal (-wal, -shm) beside the file, so the directory must be writable")
    return None


def _file_identity(path: str) -> tuple[int, int] | None:
    """``(device, inode)`` of ``path``, or None when it does not exist."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _read_only(error: sqlite3.Error) -> bool:
    """SQLITE_READONLY: among others, a connection SQLite opened read-only because the file was not writable
    at that moment; it stays so until it is reopened."""
    return (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF == _READONLY_CODE or "readonly" in str(error)


def _explained(error: sqlite3.Error, path: str) -> FencepostError:
    """``translate_sqlite_error``, with the path's problem as the message when SQLite could not open or write."""
    code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
    text = str(error)
    if code in (_READONLY_CODE, _CANTOPEN_CODE) or "unable to open" in text or "readonly" in text:
        problem = path_problem(path)
        if problem is not None:
            return StoreUnavailable(f"{problem} (SQLite: {text})")
    return translate_sqlite_error(error)


def _adapt(value: Any) -> Any:
    if isinstance(value, datetime):
        return to_iso(value)
    return value


class SQLiteExecutor:
    """The ``Executor`` of one open SQLite transaction (``fencepost.store.sql.executor``).

    Instants are fixed-width UTC text on disk (ADR 0001): parameters are written so, and the columns a
    query declares as instants are read back as aware datetimes.
    """

    backend = "sqlite"
    #: A SQLite unit always runs inside its transaction (``Executor.single_statement``).
    single_statement = False

    def __init__(self, conn: sqlite3.Connection, store: SQLiteStore) -> None:
        self._conn = conn
        self._store = store
        self._now: datetime | None = None

    def begin_block(self) -> None:
        """A no-op: the transaction is open from the start."""

    def now(self) -> datetime:
        # One instant per transaction: every row a decision writes carries the same time.
        if self._now is None:
            self._now = self._store.clock.now()
        return self._now

    def run(self, query: Query, params: Mapping[str, Any]) -> Result:
        # Translated here, not only when the transaction ends: a unit in a group commit's savepoint reports its
        # own error to its caller (Conflict for a constraint, as when written alone), never the driver's.
        try:
            cursor = self._conn.execute(query.sql, {k: _adapt(v) for k, v in params.items()})
            raw = cursor.fetchall()
        except sqlite3.Error as error:
            raise _explained(error, self._store.path) from None
        rowcount = cursor.rowcount
        if cursor.description is None:
            return Result(rows=[], rowcount=rowcount)
        names = [d[0] for d in cursor.description]
        instants = [n for n in names if n in query.instants]
        rows = []
        for values in raw:
            row = dict(zip(names, values, strict=True))
            for key in instants:
                if isinstance(row[key], str):
                    row[key] = from_iso(row[key])
            rows.append(row)
        # With RETURNING, sqlite3 reports the rows changed; plain SELECTs report -1.
        return Result(rows=rows, rowcount=rowcount if rowcount >= 0 else len(rows))

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run ad-hoc SQL with ``?`` placeholders (tests, benchmarks). Not for application paths."""
        return self._conn.execute(sql, params).fetchall()

    def savepoint(self, name: str) -> None:
        try:
            self._conn.execute(f"SAVEPOINT {name}")
        except sqlite3.Error as error:
            raise _explained(error, self._store.path) from None

    def release(self, name: str) -> None:
        try:
            self._conn.execute(f"RELEASE SAVEPOINT {name}")
        except sqlite3.Error as error:
            raise _explained(error, self._store.path) from None

    def rollback_to(self, name: str) -> None:
        # Some errors (SQLITE_FULL, I/O errors, an interrupt) make SQLite roll the whole transaction back
        # itself; the savepoint is then gone and nothing of the transaction may be presented as committed.
        try:
            if not self._conn.in_transaction:
                raise sqlite3.OperationalError("the transaction was rolled back by SQLite")
            self._conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
            self._conn.execute(f"RELEASE SAVEPOINT {name}")
        except sqlite3.Error as error:
            raise TransactionAborted(f"a nested unit could not be rolled back alone: {error}") from None


class SQLiteStore(Store):
    """A SQLite control database file shared by every fencepost process on one machine.

    Args:
        path: database file path.
        journal_mode: ``"wal"`` (default) or ``"delete"``.
        synchronous: ``"full"`` (default) or ``"normal"``; ``full`` in DELETE mode is SQLite's ``EXTRA``
            (``sqlite_synchronous``).
        busy_timeout_seconds: how long one statement waits on a lock before SQLITE_BUSY (seconds).
        create: when False, a missing file is reported as unmigrated instead of being created.
    """

    backend = "sqlite"

    def __init__(self, path: str, *, journal_mode: str = "wal", synchronous: str = "full",
                 busy_timeout_seconds: float = 5.0, create: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.journal_mode = journal_mode
        self.synchronous = synchronous
        self.busy_timeout_seconds = busy_timeout_seconds
        self.create = create
        self.display_url = f"sqlite ({journal_mode} journal)"
        self.queries = dialect_queries("fencepost.store.sqlite")
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file first opened
        self._wal_identity: tuple[int, int] | None = None  # ... and of its -wal file, in WAL mode
        self._write_lock = threading.Lock()  # this process's writers queue here before BEGIN IMMEDIATE

    # ── connections ──
    def _connect(self) -> sqlite3.Connection:
        try:
            if self.create:
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout_seconds, isolation_level=None,
                                       check_same_thread=False)
            else:
                conn = sqlite3.connect(file_uri(self.path, "rw"), uri=True, timeout=self.busy_timeout_seconds,
                                       isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != self.journal_mode:
                self._set_journal_mode(conn)
            conn.execute(f"PRAGMA synchronous = {sqlite_synchronous(self.journal_mode, self.synchronous)}")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.OperationalError as error:
            if not self.create and "unable to open" in str(error) and not os.path.lexists(self.path):
                # Only a missing file was never migrated; one that exists but will not open (a directory, a
                # read-only directory without its -shm) is a store that does not answer.
                # With the way to point elsewhere: the default URL (no -d, no FENCEPOST_DATABASE in this shell)
                # sent a new user to migrate a stray local file instead of finding their PostgreSQL. The path is
                # not named: errors never carry it.
                raise SchemaNotReady("no control database exists yet: run `fencepost migrate` first, or name "
                                     "yours with -d or FENCEPOST_DATABASE") from None
            raise _explained(error, self.path) from None
        except sqlite3.Error as error:
            raise _explained(error, self.path) from None
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _set_journal_mode(self, conn: sqlite3.Connection) -> None:
        # Switching the journal mode needs an exclusive lock, and SQLite answers "database is locked" at
        # once instead of running the busy handler, so processes opening a fresh file together (two
        # `fencepost migrate` runs, workers starting at once) would fail. Retry within the busy timeout.
        deadline = time.monotonic() + self.busy_timeout_seconds
        while True:
            try:
                conn.execute(f"PRAGMA journal_mode = {self.journal_mode.upper()}")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use), once the file is still the one first opened.

        Raises:
            StoreUnavailable: the database file was deleted, or replaced by another file, since this store
                first opened it (``check_file``).
        """
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        self.check_file()
        return conn

    def check_file(self) -> None:
        """Refuse to go on when the database file is not the one this store first opened (issue 11 item 9).

        An open SQLite connection keeps working on a file that was deleted (or renamed over): every commit
        then goes to a file nobody else will ever open, and readiness still said "ready". So each use of a
        connection compares the path's device and inode with those seen at the first open (one ``stat``).

        Raises:
            StoreUnavailable: the path no longer exists or names another file.
        """
        identity = _file_identity(self.path)
        # In WAL mode, commits live in the -wal file until a checkpoint copies them into the database file. While
        # any connection is open SQLite never deletes it, and this store keeps its connections open until
        # close(); so a -wal file gone or replaced under them was removed from outside, taking with it commits
        # that no other process will see. Writing on into it would record facts nobody can read (a break-it trial:
        # a worker recorded a success into a deleted WAL while another re-ran the invocation).
        wal = _file_identity(self.path + "-wal") if self.journal_mode == "wal" else None
        with self._all_lock:
            if self._identity is None:
                self._identity = identity
            if self._wal_identity is None:
                self._wal_identity = wal
            if identity == self._identity and wal == self._wal_identity:
                return
            what = "file" if identity != self._identity else "write-ahead log (-wal file)"
        raise StoreUnavailable(f"the SQLite control database {what} was deleted or replaced while this process had "
                               "it open: nothing more is written; restore the file (docs/operations.md, "
                               "Backups) and restart this process")

    @contextmanager
    def transaction(self, *, write: bool = True, name: str | None = None) -> Iterator[SqlUnitOfWork]:
        conn = self.connection()
        if conn.in_transaction:
            raise RuntimeError("a transaction is already open on this thread's connection")
        if not write:
            with self._open(conn, name, "BEGIN") as tx:
                yield tx
            return
        # SQLite has one writer per database. Threads of this process queue on a lock of their own first: a
        # thread that meets SQLite's lock instead sleeps in its busy handler in growing steps (1 to 100 ms)
        # rather than being woken when the lock frees, which was more than half of a host worker's time with
        # ten execution slots (ADR 0079). Other processes still meet SQLite's lock and its busy timeout.
        if not self._write_lock.acquire(timeout=self.busy_timeout_seconds):
            raise StoreBusy("another thread of this process held the SQLite write lock past the busy timeout")
        try:
            with self._open(conn, name, "BEGIN IMMEDIATE") as tx:
                yield tx
        finally:
            self._write_lock.release()

    @contextmanager
    def _open(self, conn: sqlite3.Connection, name: str | None, begin: str) -> Iterator[SqlUnitOfWork]:
        try:
            conn.execute(begin)
        except sqlite3.Error as error:
            if _read_only(error):
                self._discard(conn)
            raise _explained(error, self.path) from None
        tx = SqlUnitOfWork(SQLiteExecutor(conn, self), self.queries, self.claim_rotation)
        try:
            yield tx
            if name:
                crashpoint(f"{name}:before-commit")
            conn.execute("COMMIT")
        except BaseException as error:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if isinstance(error, sqlite3.Error):
                if _read_only(error):
                    self._discard(conn)
                raise _explained(error, self.path) from None
            raise
        if name:
            crashpoint(f"{name}:after-commit")

    # ── schema ──
    def migrations(self) -> list[MigrationStep]:
        return load_migrations("fencepost.store.sqlite")

    def schema_version(self) -> int:
        try:
            return max(applied_versions(self.connection()), default=0)
        except sqlite3.Error as error:
            raise _explained(error, self.path) from None

    def migrate(self) -> list[MigrationStep]:
        """Apply the shipped migrations (``fencepost.store.sqlite.migrate.apply_migrations``, ADR 0017).

        Returns:
            The steps applied by this call (empty when up to date).
        Raises:
            SchemaNotReady: an applied migration's checksum differs from the shipped file, the database is
                newer than this fencepost, or a rebuilding migration would leave dangling references.
            StoreBusy, StoreUnavailable, Conflict: translated driver errors (the failing step is rolled back).
        """
        conn = self.connection()
        try:
            return apply_migrations(conn, self.migrations(), now=self.clock.now)
        except sqlite3.Error as error:
            raise _explained(error, self.path) from None

    def physical_checks(self) -> list[tuple[str, str, str]]:
        """``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check`` findings as (check, subject, detail)."""
        conn = self.connection()
        try:
            found = [("integrity", "database", str(r[0])) for r in conn.execute("PRAGMA integrity_check")
                     if r[0] != "ok"]
            found += [("foreign_keys", f"{r[0]} rowid {r[1]}", f"references missing {r[2]} row")
                      for r in conn.execute("PRAGMA foreign_key_check")]
        except sqlite3.Error as error:
            raise translate_sqlite_error(error) from None
        return found

    def _discard(self, conn: sqlite3.Connection) -> None:
        """Close this thread's connection after SQLITE_READONLY, so that its next use opens a new one: a connection
        opened while the file was not writable (restored permissions, an immutable flag lifted) stays read-only
        for good, and a worker's heartbeat thread then failed every registry write while its slots, on newer
        connections, worked (a break-it trial: the live worker was listed as dead)."""
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._all_lock:
            if conn in self._all:
                self._all.remove(conn)
            with suppress(sqlite3.Error):
                conn.close()
            if not self._all:  # the last one: SQLite may delete the -wal file on close, and the next makes another
                self._wal_identity = None

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                with suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
        self._local = threading.local()

