"""The isolated SQLite sandbox an Attempt's scenarios run in.

A sandbox is a fresh directory per delivery (never the control database; seed: takeover creates a new
isolated database). Package SQL runs here, not through the store: this is the package's database, and
executing the package's own SQL is the point of the rehearsal.

Each migration runs in one transaction together with its ledger row, so a failing script leaves nothing
half-applied. The ledger table ``_fencepost_ledger`` is left out of every schema and content digest.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fencepost.core.fingerprint import fingerprint
from fencepost.outbox.context import EnvironmentFailed

LEDGER = "_fencepost_ledger"
PROGRESS_STEPS = 2000  # SQLite VM instructions between interrupt checks


def _b64encode(value: Any) -> str | None:
    if value is None:
        return None
    data = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return base64.b64encode(data).decode("ascii")


def _b64decode(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value if isinstance(value, bytes) else str(value), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"base64_decode: {error}") from None


_HOST_FUNCTIONS: dict[str, Callable[[Any], Any]] = {"base64_encode": _b64encode, "base64_decode": _b64decode}


# Package SQL is untrusted: it may only touch its own sandbox database. ATTACH (and VACUUM INTO, which
# attaches its target) would let it open the control database or write files anywhere; these pragmas
# change process-wide state or point SQLite at other directories.
_DENIED_PRAGMAS = frozenset({"temp_store_directory", "data_store_directory"})


def _authorize(action: int, arg1: str | None, arg2: str | None, database: str | None, source: str | None) -> int:
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _DENIED_PRAGMAS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


class SandboxError(Exception):
    """A SQL error inside the sandbox; the message is the database's error text."""


# Result codes that describe the machine, not the package's SQL: an I/O error or a file that cannot be
# opened (the sandbox directory vanished, the disk failed). Codes a package can provoke itself (FULL via
# max_page_count, READONLY via query_only, NOMEM) stay package failures.
_ENVIRONMENT_CODES = frozenset({10, 14})  # SQLITE_IOERR, SQLITE_CANTOPEN


def is_environment_error(error: sqlite3.Error) -> bool:
    """True when a SQLite error comes from the machine rather than from the SQL being run."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in _ENVIRONMENT_CODES


class SandboxEnvironmentError(EnvironmentFailed):
    """The sandbox's storage failed under the scenario; the message is SQLite's text (no path)."""


class Sandbox:
    """One delivery's sandbox directory holding its databases.

    Args:
        root: a directory that must not exist yet (created here).
        functions: SQL name -> host function name (see ``package.HOST_FUNCTIONS``).
        should_interrupt: polled every ``PROGRESS_STEPS`` VM steps; True aborts the running statement
            (used to stop at once when the lease is lost).
    """

    def __init__(self, root: Path, functions: dict[str, str], should_interrupt: Callable[[], bool]) -> None:
        self.root = root
        self.functions = functions
        self.should_interrupt = should_interrupt
        root.mkdir(parents=True, exist_ok=False)
        self._open: list[sqlite3.Connection] = []

    def connect(self, name: str) -> sqlite3.Connection:
        """Open (creating) database ``<name>.db`` in the sandbox, with host functions and interrupt checks."""
        conn = sqlite3.connect(self.root / f"{name}.db", isolation_level=None)
        for sql_name, builtin in self.functions.items():
            conn.create_function(sql_name, 1, _HOST_FUNCTIONS[builtin], deterministic=True)
        conn.set_progress_handler(lambda: 1 if self.should_interrupt() else 0, PROGRESS_STEPS)
        conn.set_authorizer(_authorize)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)  # defense in depth: no second database at all
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{LEDGER}" (id TEXT PRIMARY KEY)')
        self._open.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._open:
            conn.close()
        self._open.clear()

    def destroy(self) -> None:
        """Delete this delivery's directory, and the Attempt's directory once nothing else is in it."""
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
        # The Attempt's directory goes too once empty; another delivery's sandbox may still be there.
        with contextlib.suppress(OSError):
            self.root.parent.rmdir()


def run_script(conn: sqlite3.Connection, sql: str, *, ledger_add: str | None = None,
               ledger_remove: str | None = None) -> None:
    """Run ``sql`` in one transaction, together with a ledger change.

    Raises:
        SandboxError: with SQLite's error text; the transaction is rolled back.
    """
    tail = ""
    if ledger_add is not None:
        tail = f"INSERT INTO \"{LEDGER}\" (id) VALUES ('{_quote(ledger_add)}');"
    elif ledger_remove is not None:
        tail = f"DELETE FROM \"{LEDGER}\" WHERE id = '{_quote(ledger_remove)}';"
    try:
        conn.executescript(f"BEGIN;\n{sql}\n;\n{tail}\nCOMMIT;")
    except sqlite3.Error as error:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if is_environment_error(error):
            raise SandboxEnvironmentError(f"sandbox storage failed: {error}") from None
        raise SandboxError(str(error)) from None


def _quote(text: str) -> str:
    return text.replace("'", "''")


def applied(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(f'SELECT id FROM "{LEDGER}" ORDER BY id')]


def _objects(conn: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    rows = conn.execute(
        "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' AND tbl_name != ? ORDER BY type, name", (LEDGER,)).fetchall()
    return [(t, n, tb, " ".join(s.split())) for t, n, tb, s in rows]


def schema_summary(conn: sqlite3.Connection) -> dict[str, Any]:
    """``{"fingerprint": sha256 of the normalized schema, "objects": {type: count}}`` (ledger excluded)."""
    objects = _objects(conn)
    counts: dict[str, int] = {}
    for kind, *_ in objects:
        counts[kind] = counts.get(kind, 0) + 1
    return {"fingerprint": fingerprint("sandbox-schema/v1", [list(o) for o in objects]), "objects": counts}


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
