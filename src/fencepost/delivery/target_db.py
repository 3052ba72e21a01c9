"""One target database: open it without ever creating it, read its ledger and schema, apply one migration.

The target is its own idempotency store (ADR 0055). Its table ``fencepost_delivery`` holds one row per
delivered migration (package, version, migration, checksum, the step's ``adapter_invocation_id``, state and
applied at). A **fenced** migration runs in one ``BEGIN IMMEDIATE`` transaction that first looks for its row,
then runs the script statement by statement, then writes the row, so a re-run after a crash finds the row and
applies nothing: the migration is on the target exactly once whichever side of the target COMMIT the crash
was. A script that manages its own transaction cannot be put inside ours: it is **unfenced**. Its row is
written ``started`` in a transaction of its own before the script runs and turned ``applied`` after, so a
re-run that finds a ``started`` row knows the script may have run in part and never runs it again.

Crash points (``FENCEPOST_CRASHPOINT``): ``delivery.target:<migration>:before-commit`` and ``:after-commit``
around the target COMMIT of a fenced migration; for an unfenced one, ``delivery.target:<migration>:after-intent``
(after the ``started`` row committed, before the script) as well.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fencepost.catalog.script_control import split_statements
from fencepost.catalog.sql_guard import REFUSAL, is_refusal, package_sql
from fencepost.core.crashpoints import crashpoint
from fencepost.rehearsal.sandbox import LEDGER as REHEARSAL_LEDGER
from fencepost.rehearsal.sandbox import schema_summary

#: Called inside the migration's target transaction before anything is applied: a sentence naming why the target
#: is not where the step expects it, or None (see ``fencepost.delivery.action``'s ledger guard).
Guard = Callable[[sqlite3.Connection], "str | None"]

#: The target's own ledger table.
LEDGER_TABLE = "fencepost_delivery"
#: The target's ledger of workflow task runs (written by ``fencepost.workflows.task``): fencepost's own table, never
#: drift and never part of the target's schema fingerprint.
TASK_LEDGER_TABLE = "fencepost_workflow_tasks"
#: Every table fencepost itself keeps in a target.
OWN_TABLES = (LEDGER_TABLE, REHEARSAL_LEDGER, TASK_LEDGER_TABLE)
#: Seconds a target connection waits for another writer before the step calls the target busy.
DEFAULT_BUSY_TIMEOUT = 2.0

_LEDGER_DDL = (
    f'CREATE TABLE IF NOT EXISTS "{LEDGER_TABLE}" ('
    "package TEXT NOT NULL, version TEXT NOT NULL, migration TEXT NOT NULL, checksum TEXT NOT NULL, "
    "adapter_invocation_id TEXT NOT NULL, state TEXT NOT NULL CHECK (state IN ('applied', 'started')), "
    "applied_at TEXT NOT NULL, PRIMARY KEY (package, migration))")
_COLUMNS = "package, version, migration, checksum, adapter_invocation_id, state, applied_at"


class TargetMissing(Exception):
    """The target's database file is not there (deleted, or never created): nothing was applied."""


class TargetBusy(Exception):
    """Another connection held the target's write lock past the busy timeout: nothing was applied."""


class MigrationFailed(Exception):
    """The migration's SQL failed inside the fenced transaction, which was rolled back: nothing was applied."""


class NotApplied(Exception):
    """The step stopped before it applied anything: the ledger guard found the target is not where the step
    expects it (the target was changed or replaced after the drift check), or, for an unfenced migration, its
    ``started`` row could not be written (a read-only or broken target). Nothing was applied; the script never
    ran."""


@dataclass(frozen=True)
class LedgerRow:
    """One row of the target's ``fencepost_delivery`` table."""

    package: str
    version: str
    migration: str
    checksum: str
    adapter_invocation_id: str
    state: str
    applied_at: str

    def as_json(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "migration": self.migration,
                "checksum": self.checksum, "adapter_invocation_id": self.adapter_invocation_id,
                "state": self.state, "applied_at": self.applied_at}


def _now() -> str:
    """UTC now as fixed-width text (the target's own clock; the control store's instants are not its)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in str(error)


@contextlib.contextmanager
def connect(name: str, path: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Iterator[sqlite3.Connection]:
    """An autocommit connection to the existing target database ``path`` (opened ``mode=rw``: never created).

    Args:
        name: the target's name, for the messages. path: its absolute file path. busy_timeout: seconds.
    Raises:
        TargetMissing: no file at ``path``, or it cannot be opened for writing (the message names the target).
    """
    if os.path.exists(path) and not os.path.isfile(path):
        raise TargetMissing(f"target {name}: {path} is not a regular file (a directory or a device); nothing was "
                            "applied")
    if not os.path.isfile(path):
        raise TargetMissing(f"target {name}: database file {path} does not exist (deleted or never created); "
                            "nothing was applied")
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, timeout=busy_timeout,
                               isolation_level=None, check_same_thread=False)
    except sqlite3.OperationalError as error:
        raise TargetMissing(f"target {name}: database file {path} cannot be opened for writing: {error}; "
                            "nothing was applied") from None
    try:
        yield conn
    finally:
        conn.close()


def has_ledger(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (LEDGER_TABLE,)).fetchone() is not None


def ledger_rows(conn: sqlite3.Connection, package: str | None = None) -> list[LedgerRow]:
    """The target's ledger rows (of ``package`` when given), by package then migration id."""
    if not has_ledger(conn):
        return []
    where, args = ("WHERE package = ?", (package,)) if package is not None else ("", ())
    rows = conn.execute(f'SELECT {_COLUMNS} FROM "{LEDGER_TABLE}" {where} ORDER BY package, migration', args)
    return [LedgerRow(*row) for row in rows]


def user_objects(conn: sqlite3.Connection) -> list[str]:
    """``"<type> <name>"`` of every schema object that is not SQLite's own or a ledger, sorted."""
    return [r[0] for r in conn.execute(
        "SELECT type || ' ' || name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
        "AND tbl_name NOT IN (?, ?, ?) ORDER BY type, name", OWN_TABLES)]


def fingerprint(conn: sqlite3.Connection) -> dict[str, Any]:
    """The rehearsal's semantic schema fingerprint of the target (``schema_summary``: normalized schema text,
    volatile parts such as whitespace and SQLite's own objects removed), with both ledgers left out."""
    return schema_summary(conn, ledgers=OWN_TABLES)


def _find(conn: sqlite3.Connection, package: str, migration: str) -> LedgerRow | None:
    row = conn.execute(f'SELECT {_COLUMNS} FROM "{LEDGER_TABLE}" WHERE package = ? AND migration = ?',
                       (package, migration)).fetchone()
    return LedgerRow(*row) if row else None


def _begin(conn: sqlite3.Connection, name: str) -> None:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        if _busy(error):
            raise TargetBusy(f"target {name} is locked by another connection (waited past the busy timeout); "
                             "nothing was applied") from None
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _why(error: sqlite3.Error) -> str:
    """SQLite's error text, or what an authorizer refusal means (its own text is only "not authorized")."""
    return REFUSAL if is_refusal(error) else str(error)


def find_row(conn: sqlite3.Connection, package: str, migration: str) -> LedgerRow | None:
    """The ledger row of ``package``'s ``migration``, or None (no row, or no ledger yet)."""
    return _find(conn, package, migration) if has_ledger(conn) else None


def _given_way(conn: sqlite3.Connection, found: LedgerRow | None, replaces: str | None) -> LedgerRow | None:
    """``found``, or None after deleting it when it is the ``started`` row of ``replaces`` (an operator resolved
    its delivery ``failed``: the migration did not apply, ADR 0103). Inside the caller's target transaction."""
    if found is None or replaces is None or found.state != "started" or found.adapter_invocation_id != replaces:
        return found
    conn.execute(f'DELETE FROM "{LEDGER_TABLE}" WHERE package = ? AND migration = ? AND state = ? '
                 "AND adapter_invocation_id = ?", (found.package, found.migration, "started", replaces))
    return None


def settle_started(conn: sqlite3.Connection, name: str, *, package: str, migration: str,
                   adapter_invocation_id: str, guard: Guard | None = None) -> LedgerRow | None:
    """Mark the ``started`` row that ``adapter_invocation_id`` left ``applied``, in one target transaction: its
    delivery was resolved ``succeeded`` by an operator who found the script applied (ADR 0103).

    Returns:
        The row as it is now: ``applied`` (by this call, or already), or None when the migration has no row or a
        row another run holds (the caller then applies as usual, and its guards judge).
    Raises:
        TargetBusy: the write lock waited past the busy timeout (nothing changed). NotApplied: ``guard`` (the
            migration step's ledger guard, run in the same transaction before the row changes) named a difference.
    """
    _begin(conn, name)
    try:
        conn.execute(_LEDGER_DDL)
        found = _find(conn, package, migration)
        if found is None or found.adapter_invocation_id != adapter_invocation_id:
            conn.execute("ROLLBACK")
            return None
        if found.state == "started":
            _check_guard(conn, name, migration, guard)
            found = LedgerRow(found.package, found.version, found.migration, found.checksum,
                              found.adapter_invocation_id, "applied", _now())
            conn.execute(f'UPDATE "{LEDGER_TABLE}" SET state = ?, applied_at = ? WHERE package = ? AND migration = ? '
                         "AND state = 'started' AND adapter_invocation_id = ?",
                         (found.state, found.applied_at, package, migration, adapter_invocation_id))
        conn.execute("COMMIT")
        return found
    finally:
        _rollback(conn)


def _check_guard(conn: sqlite3.Connection, name: str, migration: str, guard: Guard | None) -> None:
    if guard is None:
        return
    problem = guard(conn)
    if problem is not None:
        raise NotApplied(f"target {name} is not where migration {migration} expects it: {problem}; nothing was "
                         "applied")


@dataclass(frozen=True)
class Applied:
    """What one apply did: ``applied`` is False when the ledger already had the row (``row`` is that row)."""

    applied: bool
    row: LedgerRow


def apply_fenced(conn: sqlite3.Connection, name: str, *, package: str, version: str, migration: str,
                 checksum: str, adapter_invocation_id: str, sql: str, guard: Guard | None = None,
                 replaces: str | None = None) -> Applied:
    """Apply ``sql`` and its ledger row in one target transaction, unless the row is there already.

    Returns:
        ``Applied(False, row)`` when the ledger has the migration (any checksum: the caller compares), else
        ``Applied(True, new row)``. ``replaces``: the adapter invocation id of a ``started`` row an operator
        resolved ``failed`` (ADR 0103); that row is removed in the same transaction and the migration applied.
    Raises:
        TargetBusy: the write lock (``BEGIN IMMEDIATE`` or the COMMIT) waited past the busy timeout.
        MigrationFailed: a statement failed; rolled back. NotApplied: ``guard`` (run in the same transaction,
            before the script, when the row is not there) named a difference. All: nothing applied.
    """
    _begin(conn, name)
    try:
        conn.execute(_LEDGER_DDL)
        found = _given_way(conn, _find(conn, package, migration), replaces)
        if found is not None:
            conn.execute("ROLLBACK")
            return Applied(False, found)
        _check_guard(conn, name, migration, guard)
        try:
            with package_sql(conn):  # the migration may not write the ledger (ADR 0102)
                for _, statement in split_statements(sql):
                    conn.execute(statement)
        except sqlite3.Error as error:
            if _busy(error):
                raise TargetBusy(f"target {name} was locked during migration {migration}; nothing was "
                                 "applied") from None
            raise MigrationFailed(f"migration {migration} failed on target {name}: {_why(error)}; rolled "
                                  "back, nothing was applied") from None
        row = LedgerRow(package, version, migration, checksum, adapter_invocation_id, "applied", _now())
        conn.execute(f'INSERT INTO "{LEDGER_TABLE}" ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)',
                     (row.package, row.version, row.migration, row.checksum, row.adapter_invocation_id,
                      row.state, row.applied_at))
        crashpoint(f"delivery.target:{migration}:before-commit")
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as error:
            if _busy(error):
                raise TargetBusy(f"target {name} was locked at the COMMIT of migration {migration}; nothing was "
                                 "applied") from None
            raise
    finally:
        _rollback(conn)
    crashpoint(f"delivery.target:{migration}:after-commit")
    return Applied(True, row)


def apply_unfenced(conn: sqlite3.Connection, name: str, *, package: str, version: str, migration: str,
                   checksum: str, adapter_invocation_id: str, sql: str, guard: Guard | None = None,
                   replaces: str | None = None) -> Applied:
    """Run a script that manages its own transaction, bracketed by a ``started`` then ``applied`` ledger row.

    Returns:
        ``Applied(False, row)`` when a row is there already: ``applied``, or ``started`` (an earlier run may have
        applied part of the script; the caller must not run it again). Else ``Applied(True, applied row)``.
        ``replaces``: as in ``apply_fenced``: a ``started`` row an operator resolved ``failed`` gives way to this
        run's, in the transaction that writes it (ADR 0103).
    Raises:
        TargetBusy: before the ``started`` row committed (nothing applied).
        NotApplied: ``guard`` named a difference, or another error before the ``started`` row committed (a
            read-only target, say): the script never ran.
        MigrationFailed: the script failed after it started: its row stays ``started`` (outcome unknown).
    """
    try:
        _begin(conn, name)
        conn.execute(_LEDGER_DDL)
        found = _given_way(conn, _find(conn, package, migration), replaces)
        if found is not None:
            conn.execute("ROLLBACK")
            return Applied(False, found)
        _check_guard(conn, name, migration, guard)
        started = LedgerRow(package, version, migration, checksum, adapter_invocation_id, "started", _now())
        conn.execute(f'INSERT INTO "{LEDGER_TABLE}" ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)',
                     (started.package, started.version, started.migration, started.checksum,
                      started.adapter_invocation_id, started.state, started.applied_at))
        conn.execute("COMMIT")
    except sqlite3.Error as error:  # before the started row is durable the script has not run: a definite no
        if _busy(error):
            raise TargetBusy(f"target {name} was locked before unfenced migration {migration} started; nothing "
                             "was applied") from None
        raise NotApplied(f"target {name}: the started row of unfenced migration {migration} could not be "
                         f"written: {error}; the script did not run, nothing was applied") from None
    finally:
        _rollback(conn)
    crashpoint(f"delivery.target:{migration}:after-intent")
    try:
        with package_sql(conn):  # the script may not write the ledger either (ADR 0102)
            conn.executescript(sql)
    except sqlite3.Error as error:
        _rollback(conn)
        raise MigrationFailed(f"unfenced migration {migration} failed on target {name} after it started: "
                              f"{_why(error)}; it manages its own transaction, so part of it may be "
                              "applied") from None
    _rollback(conn)  # a script that left its own transaction open is ended, as a session close would
    done = LedgerRow(package, version, migration, checksum, adapter_invocation_id, "applied", _now())
    try:
        _begin(conn, name)
        # Only this run's own started row: after a takeover, a resolution and a redelivery (ADR 0103) the row may
        # be another run's, which a stale run must never mark applied.
        marked = conn.execute(f'UPDATE "{LEDGER_TABLE}" SET state = ?, applied_at = ? WHERE package = ? '
                              "AND migration = ? AND state = 'started' AND adapter_invocation_id = ?",
                              (done.state, done.applied_at, package, migration, adapter_invocation_id)).rowcount
        if marked != 1:
            raise MigrationFailed(f"unfenced migration {migration} ran on target {name}, but its started row is no "
                                  "longer this run's (replaced after its delivery was resolved); not marked applied")
        crashpoint(f"delivery.target:{migration}:before-commit")
        conn.execute("COMMIT")
    except (TargetBusy, sqlite3.Error) as error:
        raise MigrationFailed(f"unfenced migration {migration} ran on target {name} but its ledger row could not "
                              f"be marked applied: {error}") from None
    finally:
        _rollback(conn)
    crashpoint(f"delivery.target:{migration}:after-commit")
    return Applied(True, done)
