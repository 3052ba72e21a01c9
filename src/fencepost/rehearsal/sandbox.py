"""The isolated SQLite sandbox an Attempt's scenarios run in.

A sandbox is a fresh directory per delivery (never the control database; seed: takeover creates a new
isolated database). Package SQL runs here, not through the store: this is the package's database, and
executing the package's own SQL is the point of the rehearsal.

Each migration runs in one transaction together with its ledger row, so a failing script leaves nothing
half-applied. The ledger table ``_fencepost_ledger`` is left out of every schema and content digest.

Every sandbox connection is bounded with SQLite's own limits (issue 10, ADR 0021): ``PRAGMA max_page_count``
caps each database's bytes, and the page caches, the temporary store and the longest value are sized from a
memory cap, under a process-wide hard heap limit that ``install_heap_limit`` sets for a worker process.
Exceeding a cap is a definite outcome of the package (``SandboxLimitExceeded``, with the cap); a full disk or
a heap that other sandboxes exhausted is the machine's (``SandboxEnvironmentError``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencepost.catalog.script_control import manages_own_transaction
from fencepost.catalog.sql_guard import REFUSAL, is_refusal, package_only, reserved_objects
from fencepost.core.fingerprint import fingerprint
from fencepost.outbox.context import EnvironmentFailed
from fencepost.rehearsal.host_functions import HostFunction, resolve

LEDGER = "_fencepost_ledger"
PROGRESS_STEPS = 2000  # SQLite VM instructions between interrupt checks


def register_host_functions(conn: sqlite3.Connection, functions: Mapping[str, HostFunction]) -> None:
    """Give ``conn`` resolved host functions (SQL name -> ``HostFunction``, from ``host_functions.resolve``), as
    the sandbox does; a delivery target's connection gets the same ones (ADR 0055)."""
    for sql_name, fn in functions.items():
        conn.create_function(sql_name, fn.nargs, fn.func, deterministic=fn.deterministic)


MIB = 1024 * 1024
#: Bytes each sandbox database may hold unless the worker says otherwise (``--sandbox-max-bytes``).
DEFAULT_MAX_BYTES = 1024 * MIB
#: SQLite heap one sandbox is budgeted unless the worker says otherwise (``--sandbox-max-memory``).
DEFAULT_MAX_MEMORY = 256 * MIB
#: SQLite's own longest string or blob (``SQLITE_MAX_LENGTH``); a memory cap only ever lowers it.
SQLITE_MAX_LENGTH = 1_000_000_000
#: Heap a worker process keeps for what is not a sandbox: its control-store connections, and per execution
#: slot the slot's own connection (``install_heap_limit``).
HEAP_RESERVE_BYTES = 128 * MIB
HEAP_RESERVE_PER_SLOT_BYTES = 8 * MIB


@dataclass(frozen=True)
class SandboxLimits:
    """The caps of one sandbox (issue 10, ADR 0021).

    Attributes:
        max_bytes: bytes each database of the sandbox may hold (``main``, ``upgrade`` and each connection's
            temporary database), 1 MiB..1 TiB; enforced by ``PRAGMA max_page_count``. A write past it fails
            with SQLite's "database or disk is full" and is recorded as the disk cap exceeded.
        max_memory: SQLite heap one sandbox is budgeted, 16 MiB..64 GiB. Each connection gets page caches of
            a sixteenth of it for its main and its temporary database, its longest value is an eighth of it
            (``SQLITE_LIMIT_LENGTH``; longer ones are recorded as the memory cap exceeded), and temporary
            tables, sorts and indexes spill to files instead of the heap (``temp_store = FILE``). The
            process-wide hard heap limit (``install_heap_limit``) is the backstop.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_memory: int = DEFAULT_MAX_MEMORY

    def validate(self) -> None:
        """Raises ``ValueError`` naming the first cap out of range."""
        if not MIB <= self.max_bytes <= 1024 ** 4:
            raise ValueError("the sandbox disk cap must be between 1 MiB and 1 TiB")
        if not 16 * MIB <= self.max_memory <= 64 * 1024 ** 3:
            raise ValueError("the sandbox memory cap must be between 16 MiB and 64 GiB")

    @property
    def value_bytes(self) -> int:
        """The longest string, blob or row a sandbox connection may build (bytes)."""
        return min(SQLITE_MAX_LENGTH, self.max_memory // 8)

    @property
    def cache_kib(self) -> int:
        """Page cache of each database of a sandbox connection (KiB, as ``PRAGMA cache_size = -N`` takes it)."""
        return max(64, self.max_memory // 16 // 1024)


def install_heap_limit(slots: int, limits: SandboxLimits) -> int:
    """Set SQLite's process-wide heap limits for a worker process that runs up to ``slots`` sandboxes at once.

    The hard limit is ``HEAP_RESERVE_BYTES + slots * (limits.max_memory + HEAP_RESERVE_PER_SLOT_BYTES)``: a
    backstop the per-connection bounds of ``SandboxLimits`` keep sandboxes from reaching, generous enough that
    the control store's connections, which share the heap, never run short. The soft limit, half a reserve
    below it, makes SQLite shrink page caches before an allocation can fail. A limit already lower (set by
    the embedding program) is kept: SQLite's pragma only ever lowers it. ADR 0021.

    Args:
        slots: sandboxes this process may run at once (execution slots), at least 1.
        limits: the sandbox caps.
    Returns:
        The hard heap limit now in force (bytes).
    """
    hard = HEAP_RESERVE_BYTES + max(1, slots) * (limits.max_memory + HEAP_RESERVE_PER_SLOT_BYTES)
    conn = sqlite3.connect(":memory:")
    try:
        effective = int(conn.execute(f"PRAGMA hard_heap_limit = {hard}").fetchone()[0])
        soft = effective - HEAP_RESERVE_BYTES // 2
        current_soft = int(conn.execute("PRAGMA soft_heap_limit").fetchone()[0])
        if current_soft == 0 or soft < current_soft:
            conn.execute(f"PRAGMA soft_heap_limit = {soft}")
        return effective
    finally:
        conn.close()


def hard_heap_limit() -> int:
    """SQLite's process-wide hard heap limit in force (bytes; 0 for none)."""
    conn = sqlite3.connect(":memory:")
    try:
        return int(conn.execute("PRAGMA hard_heap_limit").fetchone()[0])
    finally:
        conn.close()


# Sandboxes open in this process: a heap exhausted while others run cannot be blamed on one of them.
_open_lock = threading.Lock()
_open_sandboxes = 0


def open_sandboxes() -> int:
    """How many sandboxes this process has open now."""
    with _open_lock:
        return _open_sandboxes


class SandboxError(Exception):
    """A SQL error inside the sandbox; the message is the database's error text."""


# Result codes that describe the machine, not the package's SQL: an I/O error or a file that cannot be
# opened (the sandbox directory vanished, the disk failed). Codes a package can provoke itself (FULL via
# max_page_count, READONLY via query_only, NOMEM) are judged by the sandbox's caps (``Sandbox.judge``).
_ENVIRONMENT_CODES = frozenset({10, 14})  # SQLITE_IOERR, SQLITE_CANTOPEN


def is_environment_error(error: sqlite3.Error) -> bool:
    """True when a SQLite error comes from the machine rather than from the SQL being run."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in _ENVIRONMENT_CODES


class SandboxEnvironmentError(EnvironmentFailed):
    """The sandbox's storage failed under the scenario; the message is SQLite's text (no path)."""


class SandboxLimitExceeded(SandboxError):
    """The package's SQL went past a cap of its sandbox: a definite outcome of the work (ADR 0021).

    Attributes:
        limit: the cap, for the Receipt's evidence: ``{"disk_bytes": N}`` or ``{"memory_bytes": N}`` (with
            ``"value_bytes"`` when a single value was too long).
    """

    def __init__(self, message: str, limit: dict[str, int]) -> None:
        super().__init__(message)
        self.limit = limit


_SQLITE_FULL = 13
_SQLITE_TOOBIG = 18


def _sqlite_temp_dirs() -> list[Path]:
    # Where SQLite's unix VFS puts temporary files (sorts, temporary tables), in its own order of preference.
    named = [os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), "/var/tmp", "/usr/tmp", "/tmp"]
    return [Path(d) for d in named if d and os.path.isdir(d)][:1]


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


class SandboxConnection(sqlite3.Connection):
    """A connection to one database of a sandbox; ``sandbox`` says which, so errors can be judged by its caps."""

    sandbox: Sandbox | None = None


class Sandbox:
    """One delivery's sandbox directory holding its databases.

    Args:
        root: a directory that must not exist yet (created here).
        functions: SQL name -> host function implementation name (``host_functions.resolve`` finds each).
        should_interrupt: polled every ``PROGRESS_STEPS`` VM steps; True aborts the running statement
            (used to stop at once when the lease is lost).
        limits: the caps of every database of this sandbox (``SandboxLimits``; defaults when None).
    """

    def __init__(self, root: Path, functions: dict[str, str], should_interrupt: Callable[[], bool],
                 limits: SandboxLimits | None = None) -> None:
        global _open_sandboxes
        self.root = root
        self.functions = functions
        self.host_functions = resolve(functions)
        #: What the evidence records of each host function's implementation (SQL name -> source).
        self.function_sources = {name: fn.source() for name, fn in self.host_functions.items()}
        self.should_interrupt = should_interrupt
        self.limits = limits or SandboxLimits()
        self.limits.validate()
        root.mkdir(parents=True, exist_ok=False)
        self._open: list[sqlite3.Connection] = []
        self._counted = True
        with _open_lock:
            _open_sandboxes += 1

    def connect(self, name: str) -> sqlite3.Connection:
        """Open (creating) database ``<name>.db`` in the sandbox, with host functions, interrupt checks and caps."""
        conn = sqlite3.connect(self.root / f"{name}.db", isolation_level=None, factory=SandboxConnection)
        conn.sandbox = self
        self._open.append(conn)
        register_host_functions(conn, self.host_functions)
        conn.set_progress_handler(lambda: 1 if self.should_interrupt() else 0, PROGRESS_STEPS)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)  # defense in depth: no second database at all
        self._apply_limits(conn)
        # After the caps: the package may no longer change them, nor write fencepost_ objects (ADR 0102).
        conn.set_authorizer(package_only)
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{LEDGER}" (id TEXT PRIMARY KEY)')
        return conn

    def _apply_limits(self, conn: sqlite3.Connection) -> None:
        limits = self.limits
        conn.execute("PRAGMA temp_store = FILE")  # temporary b-trees and sorts on disk, not on the heap
        for schema in ("main", "temp"):
            page_size = int(conn.execute(f"PRAGMA {schema}.page_size").fetchone()[0])
            conn.execute(f"PRAGMA {schema}.max_page_count = {max(1, limits.max_bytes // page_size)}")
            conn.execute(f"PRAGMA {schema}.cache_size = -{limits.cache_kib}")
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.value_bytes)

    def judge(self, error: BaseException) -> Exception | None:
        """What a SQLite error (or ``MemoryError``, which Python raises for SQLite's NOMEM) raised by this
        sandbox's SQL means, by its caps (ADR 0021).

        Returns:
            ``SandboxLimitExceeded`` when the package went past a cap: SQLITE_FULL while the disk still has
            room for a whole capped database (both where the sandbox lives and where SQLite puts temporary
            files), SQLITE_TOOBIG under a length limit lowered by the memory cap, or NOMEM under a hard heap
            limit while no other sandbox is open in this process. ``SandboxEnvironmentError`` when the machine
            failed: an I/O error, a full disk, or a heap exhausted while other sandboxes run too (whose
            allocation tipped it over is unknown). None for any other error (the package's SQL failed).
        """
        limits = self.limits
        if isinstance(error, MemoryError):
            others = open_sandboxes() - 1
            if hard_heap_limit() > 0 and others == 0:
                return SandboxLimitExceeded(f"sandbox memory cap exceeded ({limits.max_memory} bytes): out of "
                                            "memory under the worker's heap limit",
                                            {"memory_bytes": limits.max_memory})
            return SandboxEnvironmentError(
                "sandbox ran out of memory" + (f" while {others} other sandbox(es) ran" if others > 0 else ""))
        if not isinstance(error, sqlite3.Error):
            return None
        if is_environment_error(error):
            return SandboxEnvironmentError(f"sandbox storage failed: {error}")
        code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
        if code == _SQLITE_FULL:
            free = min(_free_bytes(d) for d in [self.root, *_sqlite_temp_dirs()])
            if free >= limits.max_bytes:
                return SandboxLimitExceeded(f"sandbox disk cap exceeded ({limits.max_bytes} bytes): {error}",
                                            {"disk_bytes": limits.max_bytes})
            return SandboxEnvironmentError(f"sandbox storage failed: {error} ({free} bytes free on disk)")
        if code == _SQLITE_TOOBIG and limits.value_bytes < SQLITE_MAX_LENGTH:
            return SandboxLimitExceeded(
                f"sandbox memory cap exceeded ({limits.max_memory} bytes): a value longer than "
                f"{limits.value_bytes} bytes: {error}",
                {"memory_bytes": limits.max_memory, "value_bytes": limits.value_bytes})
        return None

    def close(self) -> None:
        global _open_sandboxes
        for conn in self._open:
            conn.close()
        self._open.clear()
        if self._counted:
            self._counted = False
            with _open_lock:
                _open_sandboxes -= 1

    def destroy(self) -> None:
        """Delete this delivery's directory, and the Attempt's directory once nothing else is in it."""
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
        # The Attempt's directory goes too once empty; another delivery's sandbox may still be there.
        with contextlib.suppress(OSError):
            self.root.parent.rmdir()


#: How ``run_script`` ran a script: inside fencepost's own transaction, or as written (ADR 0061).
WRAPPED = "wrapped"
OWN_TRANSACTION = "own_transaction"


def run_script(conn: sqlite3.Connection, sql: str, *, ledger_add: str | None = None,
               ledger_remove: str | None = None) -> str:
    """Run ``sql`` with a ledger change, in one transaction unless the script manages its own.

    A wrapped script may not touch the ledger either: its rows are checked before the transaction commits.
    A script with transaction control of its own (``catalog.script_control.manages_own_transaction``) runs as
    written, then is verified: no transaction may be left open, the ledger must be as it was (the script must
    not touch it), and a script that fails must leave the schema as it found it (nothing half-applied without
    a ledger row). Its ledger change is committed right after it. Foreign-key enforcement is switched off
    again afterwards, as fencepost runs every script (the script may have switched it on). ADR 0061.

    Returns:
        ``WRAPPED`` or ``OWN_TRANSACTION``: how the script ran (recorded in the evidence).
    Raises:
        SandboxError: with SQLite's error text (or what the verification found); a wrapped transaction is
            rolled back.
    """
    tail = ""
    if ledger_add is not None:
        tail = f"INSERT INTO \"{LEDGER}\" (id) VALUES ('{_quote(ledger_add)}');"
    elif ledger_remove is not None:
        tail = f"DELETE FROM \"{LEDGER}\" WHERE id = '{_quote(ledger_remove)}';"
    if manages_own_transaction(sql):
        _run_own(conn, sql, tail)
        return OWN_TRANSACTION
    ledger_before = applied(conn)
    reserved_before = reserved_objects(conn)
    try:
        conn.executescript(f"BEGIN;\n{sql}\n;")
        if _ledger_after(conn) != ledger_before:
            raise SandboxError("the script changed fencepost's ledger table (_fencepost_ledger)")
        if reserved_objects(conn) != reserved_before:  # a rename into the reserved space (ADR 0102)
            raise SandboxError(REFUSAL)
        if tail:  # execute, not executescript: that would commit the open transaction first
            conn.execute(tail)
        conn.execute("COMMIT")
    except (sqlite3.Error, MemoryError, SandboxError) as error:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error, MemoryError):
                conn.execute("ROLLBACK")
        raise (error if isinstance(error, SandboxError) else judged(conn, error)) from None
    return WRAPPED


def _run_own(conn: sqlite3.Connection, sql: str, tail: str) -> None:
    ledger_before = applied(conn)
    schema_before = _objects(conn)
    reserved_before = reserved_objects(conn)
    failure: Exception | None = None
    try:
        conn.executescript(sql)
    except (sqlite3.Error, MemoryError) as error:
        failure = judged(conn, error)
    left_open = conn.in_transaction
    if left_open:
        with contextlib.suppress(sqlite3.Error, MemoryError):
            conn.execute("ROLLBACK")
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA foreign_keys = OFF")
    if failure is not None and not isinstance(failure, SandboxError):
        raise failure  # the machine's failure: judged as such, whatever the script did
    if _ledger_after(conn) != ledger_before:
        raise SandboxError("the script changed fencepost's ledger table (_fencepost_ledger)")
    if reserved_objects(conn) != reserved_before:  # a rename into the reserved space (ADR 0102)
        raise SandboxError(REFUSAL)
    if failure is not None:
        if _objects(conn) != schema_before:
            raise SandboxError(f"{failure}; the script manages its own transaction and left the schema "
                               "half-applied (changed, with no ledger row)")
        raise failure
    if left_open:
        raise SandboxError("the script manages its own transaction and left one open (rolled back)")
    try:
        conn.executescript(f"BEGIN;\n{tail}\nCOMMIT;")
    except (sqlite3.Error, MemoryError) as error:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error, MemoryError):
                conn.execute("ROLLBACK")
        raise judged(conn, error) from None


def _ledger_after(conn: sqlite3.Connection) -> list[str] | None:
    # The ledger as a script left it; None when the script dropped or broke the table (a package's doing, not
    # an internal error). The machine's failures are still judged as such.
    try:
        return applied(conn)
    except (sqlite3.Error, MemoryError) as error:
        verdict = judged(conn, error)
        if not isinstance(verdict, SandboxError):
            raise verdict from None
        return None


def judged(conn: sqlite3.Connection, error: sqlite3.Error | MemoryError) -> Exception:
    """The exception to raise for ``error`` from SQL run on ``conn``.

    Returns:
        ``Sandbox.judge``'s verdict on a sandbox connection; else ``SandboxEnvironmentError`` for the
        machine's errors; else ``SandboxError`` with SQLite's text (``MemoryError`` is not the package's
        fault on a connection with no caps: the machine's).
    """
    sandbox = conn.sandbox if isinstance(conn, SandboxConnection) else None
    verdict = sandbox.judge(error) if sandbox is not None else None
    if verdict is not None:
        return verdict
    if isinstance(error, MemoryError):
        return SandboxEnvironmentError("sandbox ran out of memory")
    if is_environment_error(error):
        return SandboxEnvironmentError(f"sandbox storage failed: {error}")
    if is_refusal(error):  # SQLite's own text is only "not authorized" (ADR 0102)
        return SandboxError(REFUSAL)
    return SandboxError(str(error))


def _quote(text: str) -> str:
    return text.replace("'", "''")


def applied(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(f'SELECT id FROM "{LEDGER}" ORDER BY id')]


def _objects(conn: sqlite3.Connection, ledgers: tuple[str, ...] = (LEDGER,)) -> list[tuple[str, str, str, str]]:
    marks = ", ".join("?" for _ in ledgers)
    rows = conn.execute(
        "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master "
        f"WHERE name NOT LIKE 'sqlite_%' AND tbl_name NOT IN ({marks}) ORDER BY type, name", ledgers).fetchall()
    return [(t, n, tb, " ".join(s.split())) for t, n, tb, s in rows]


def schema_summary(conn: sqlite3.Connection, ledgers: tuple[str, ...] = (LEDGER,)) -> dict[str, Any]:
    """``{"fingerprint": sha256 of the normalized schema, "objects": {type: count}}``.

    Args:
        ledgers: bookkeeping tables left out (default the sandbox's ``_fencepost_ledger``; a delivery target
            also leaves out its ``fencepost_delivery``, ADR 0058), so the fingerprint is the package's schema only.
    """
    objects = _objects(conn, ledgers)
    counts: dict[str, int] = {}
    for kind, *_ in objects:
        counts[kind] = counts.get(kind, 0) + 1
    return {"fingerprint": fingerprint("sandbox-schema/v1", [list(o) for o in objects]), "objects": counts}


def schema_shape(conn: sqlite3.Connection) -> dict[str, str]:
    """The schema as ``{"<type> <name>": description}`` (ledger excluded), compared by structure, not text.

    A table is described by its columns (name, declared type, not null, default, primary key position), its
    foreign keys and its indexes (name, unique, columns), so a rebuild that only changes the CREATE text's
    spelling or quoting (``ALTER TABLE ... RENAME`` quotes the name) compares equal; views and triggers by
    their normalized SQL. Used to check a down migration against the schema from before its up (ADR 0062).
    """
    shape: dict[str, str] = {}
    for kind, name, _table, sql in _objects(conn):
        if kind == "table":
            quoted = '"' + name.replace('"', '""') + '"'
            columns = [list(r[1:6]) for r in conn.execute(f"PRAGMA table_xinfo({quoted})")]
            keys = sorted(list(r[2:8]) for r in conn.execute(f"PRAGMA foreign_key_list({quoted})"))
            shape[f"table {name}"] = repr((columns, keys))
        elif kind == "index":
            quoted = '"' + name.replace('"', '""') + '"'
            columns = [r[2] for r in conn.execute(f"PRAGMA index_info({quoted})")]
            unique = "UNIQUE" in sql.upper().split("INDEX", 1)[0] if sql else True
            where = sql.upper().split(" WHERE ", 1)[1] if sql and " WHERE " in sql.upper() else ""
            shape[f"index {name}"] = repr((_table, unique, columns, where))
        else:
            shape[f"{kind} {name}"] = sql
    return shape


def shape_differences(expected: dict[str, str], actual: dict[str, str]) -> dict[str, list[str]]:
    """``{"missing": [...], "unexpected": [...], "changed": [...]}`` object names (at most 20 each)."""
    return {"missing": sorted(set(expected) - set(actual))[:20],
            "unexpected": sorted(set(actual) - set(expected))[:20],
            "changed": sorted(k for k in set(expected) & set(actual) if expected[k] != actual[k])[:20]}


def user_object_count(conn: sqlite3.Connection) -> int:
    return len(_objects(conn))


def table_digests(conn: sqlite3.Connection, volatile_columns: tuple[str, ...] = (),
                  should_interrupt: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Per table: row count and a content digest, minus volatile columns.

    Rows are streamed in a total order that SQLite computes (every column, BINARY collation), each encoded
    by ``repr`` (deterministic for SQLite's value types) into one SHA-256, so the digest is independent of
    insertion order and costs about a microsecond per row. ``should_interrupt`` is polled every 10,000 rows.

    Raises:
        SandboxError: interrupted (the lease was lost).
    """
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != ? "
        "ORDER BY name", (LEDGER,))]
    skip = {c.lower() for c in volatile_columns}
    result: dict[str, Any] = {}
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({quoted})") if r[1].lower() not in skip]
        digest = hashlib.sha256(b"fencepost:table-content/v2\x00")
        rows = 0
        if columns:
            names = ['"' + c.replace('"', '""') + '"' for c in columns]
            order = ", ".join(f"{n} COLLATE BINARY" for n in names)
            cursor = conn.execute(f"SELECT {', '.join(names)} FROM {quoted} ORDER BY {order}")
            for row in cursor:
                digest.update(repr(row).encode("utf-8"))
                digest.update(b"\n")
                rows += 1
                if rows % 10_000 == 0 and should_interrupt():
                    raise SandboxError("interrupted: the lease was lost")
        else:
            rows = conn.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0]
        result[table] = {"rows": rows, "columns": columns, "content_sha256": "sha256:" + digest.hexdigest()}
    return result


def check_integrity(conn: sqlite3.Connection) -> dict[str, Any]:
    """``PRAGMA integrity_check`` and ``foreign_key_check`` results."""
    integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    violations = conn.execute("PRAGMA foreign_key_check").fetchall()
    return {"integrity_check": integrity if integrity != ["ok"] else "ok",
            "foreign_key_violations": len(violations),
            "foreign_key_violation_samples": [
                {"table": v[0], "rowid": v[1], "parent": v[2]} for v in violations[:10]]}
