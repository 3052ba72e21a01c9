"""The SQLite migration runner: ordinary migrations, and rebuilding migrations with foreign keys off (ADR 0017).

Every migration runs in its own ``BEGIN IMMEDIATE`` transaction together with its ``fencepost_schema`` row,
and re-reads the applied versions inside that transaction. Two ``fencepost migrate`` runs at once are
therefore safe: the second waits at BEGIN, finds the step applied and skips it. An applied step whose
checksum differs from the file is refused.

**Rebuilding migrations.** SQLite cannot alter a CHECK list (or a column type, or a constraint) in place. The
change is made by SQLite's 12-step rebuild (sqlite.org/lang_altertable.html, "Making Other Kinds Of Table
Schema Changes"): create ``new_X``, copy the rows, drop ``X``, rename ``new_X`` to ``X``. With foreign keys
on, ``DROP TABLE X`` first deletes every row of ``X``. If other tables reference ``X``, that fails with
``FOREIGN KEY constraint failed``. ``PRAGMA defer_foreign_keys`` only moves the failure to COMMIT, because
renaming ``new_X`` never re-counts the references. Foreign keys must be off, and ``PRAGMA foreign_keys`` is a
no-op inside a transaction. So a migration file whose **first line** is exactly::

    -- fencepost: foreign-keys-off

is run as follows:

1. ``PRAGMA foreign_keys = OFF`` and ``PRAGMA legacy_alter_table = OFF``, outside any transaction. The
   foreign-key setting is read back.
2. ``BEGIN IMMEDIATE``, re-read the applied versions, run the statements, write the ``fencepost_schema`` row.
3. ``PRAGMA foreign_key_check``. Any row is a reference the migration would leave dangling: ROLLBACK and
   raise ``SchemaNotReady`` naming the referencing and the referenced tables.
4. COMMIT.
5. Always (finally): ``PRAGMA foreign_keys = ON`` again (read back) and ``legacy_alter_table`` as it was.

Other tables' ``REFERENCES X`` clauses name ``X`` by name, so they point at the rebuilt table again after the
rename. ``legacy_alter_table`` stays OFF so that a view or trigger that still names the dropped ``X`` makes the
rename fail (``error in view v: no such table: main.X``) and the step rolls back. With it ON, the rename would
succeed and leave that view or trigger broken.

What the author of a rebuilding migration writes (and must not write):

- The steps inside the transaction only: ``CREATE TABLE new_X`` in the new shape, ``INSERT INTO new_X (...)
  SELECT ... FROM X`` with explicit column lists (add ``rowid`` to both lists to keep rowids; a table whose
  key is ``INTEGER PRIMARY KEY`` keeps them anyway), ``DROP TABLE X``, ``ALTER TABLE new_X RENAME TO X``.
- Every index and trigger of ``X`` again: ``DROP TABLE`` removes them. Copy their text from ``schema.sql``.
- ``DROP VIEW``/``DROP TRIGGER`` before ``DROP TABLE X`` for every view, and every trigger of another table,
  that names ``X``. Create them again after the rename.
- For an ``AUTOINCREMENT`` table, the ``sqlite_sequence`` row too, if rows were ever deleted.
- The new definition in ``schema.sql`` as well. The rename stores it as ``CREATE TABLE "X"`` (quoted), and
  ``tests/store/test_migrations.py`` compares that text with ``schema.sql``.
- No ``BEGIN``/``COMMIT``/``ROLLBACK``/``SAVEPOINT``/``RELEASE``, and no ``PRAGMA foreign_keys`` or
  ``PRAGMA legacy_alter_table``. The runner owns the transaction and those settings, and refuses such a file
  before it applies anything. Ordinary migrations may not control the transaction either.
- A ``-- fencepost:`` line anywhere else, or an unknown directive, is refused. A misspelt marker must not
  quietly run a rebuild with foreign keys on.

On PostgreSQL none of this is needed: ``ALTER TABLE X DROP CONSTRAINT c, ADD CONSTRAINT c CHECK (...)`` in an
ordinary migration file (ADR 0017).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import suppress
from datetime import datetime

from fencepost.core.clock import to_iso
from fencepost.core.errors import SchemaNotReady, StoreUnavailable
from fencepost.store.base import MigrationStep

FOREIGN_KEYS_OFF = "-- fencepost: foreign-keys-off"
"""The first line that makes a migration a rebuilding one (run with foreign keys off)."""

_DIRECTIVE = re.compile(r"^\s*--\s*fencepost\s*:", re.IGNORECASE)
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_TRANSACTION_CONTROL = {"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"}
_RUNNER_PRAGMAS = re.compile(r"^PRAGMA\s+(?:\w+\s*\.\s*)?(foreign_keys|legacy_alter_table)\b", re.IGNORECASE)

_CREATE_LEDGER = ("CREATE TABLE IF NOT EXISTS fencepost_schema (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                  "checksum TEXT NOT NULL, applied_at TEXT NOT NULL)")


def rebuilds(step: MigrationStep) -> bool:
    """Whether ``step`` is a rebuilding migration (first line exactly ``FOREIGN_KEYS_OFF``).

    Raises:
        ValueError: a ``-- fencepost:`` directive that is unknown or not on the first line, or a statement
            that controls the transaction (or, in a rebuilding migration, a pragma the runner sets).
    """
    lines = step.sql.lstrip("\ufeff").splitlines()
    marked = bool(lines) and lines[0].strip() == FOREIGN_KEYS_OFF
    for number, line in enumerate(lines, start=1):
        if _DIRECTIVE.match(line) and not (number == 1 and marked):
            raise ValueError(f"migration {_label(step)} line {number}: unknown or misplaced directive "
                             f"{line.strip()!r}; the only one is {FOREIGN_KEYS_OFF!r}, on the first line")
    for statement in split_statements(step.sql):
        text = _COMMENT.sub(" ", statement).strip()
        keyword = text.split(None, 1)[0].upper().rstrip(";") if text else ""
        if keyword in _TRANSACTION_CONTROL:
            raise ValueError(f"migration {_label(step)} runs {keyword}: the runner owns each migration's "
                             "transaction")
        if marked and _RUNNER_PRAGMAS.match(text):
            raise ValueError(f"migration {_label(step)} sets a pragma the runner sets for a rebuilding "
                             f"migration: {text.split(';')[0]}")
    return marked


def applied_versions(conn: sqlite3.Connection) -> dict[int, str]:
    """The applied migrations as ``{version: checksum}`` (empty when ``fencepost_schema`` does not exist)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fencepost_schema'").fetchone()
    if not exists:
        return {}
    return {int(v): c for v, c in conn.execute("SELECT version, checksum FROM fencepost_schema")}


def apply_migrations(conn: sqlite3.Connection, steps: Sequence[MigrationStep], *,
                     now: Callable[[], datetime]) -> list[MigrationStep]:
    """Apply the pending ``steps`` in order on ``conn``, each in its own transaction; return those applied.

    ``SQLiteStore.migrate`` calls this with the shipped migrations. Tests may pass more.

    Args:
        conn: an autocommit connection (``isolation_level=None``) with no transaction open and foreign keys on.
        steps: every migration, in version order (``load_migrations``).
        now: the clock for ``applied_at``.
    Returns:
        The steps this call applied (empty when up to date).
    Raises:
        ValueError: a malformed migration file (see ``rebuilds``), found before anything is applied.
        SchemaNotReady: an applied step's checksum differs from ``steps``; the database is newer than the
            newest step; a rebuilding step would leave dangling references (rolled back).
        StoreUnavailable: foreign keys could not be switched (the connection is not usable for a rebuild).
        sqlite3.Error: a failing statement, untranslated (its step is rolled back; ``SQLiteStore.migrate``
            translates).
    """
    plan = [(step, rebuilds(step)) for step in steps]
    newest_known = max((step.version for step in steps), default=0)
    applied_now: list[MigrationStep] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_CREATE_LEDGER)
        conn.execute("COMMIT")
        for step, rebuilding in plan:
            if _apply_step(conn, step, now, rebuilding=rebuilding):
                applied_now.append(step)
        newest = max(applied_versions(conn), default=0)
        if newest > newest_known:
            raise SchemaNotReady(f"the control database schema is version {newest}, newer than this "
                                 f"fencepost understands ({newest_known}); upgrade fencepost")
    except BaseException:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return applied_now


def _apply_step(conn: sqlite3.Connection, step: MigrationStep, now: Callable[[], datetime], *,
                rebuilding: bool) -> bool:
    legacy_alter_table = int(conn.execute("PRAGMA legacy_alter_table").fetchone()[0]) if rebuilding else 0
    try:
        if rebuilding:
            # Outside the transaction: inside one, PRAGMA foreign_keys is silently ignored.
            _set_foreign_keys(conn, on=False)
            conn.execute("PRAGMA legacy_alter_table = OFF")
        conn.execute("BEGIN IMMEDIATE")
        applied = applied_versions(conn)
        if step.version in applied:
            conn.execute("COMMIT")
            if applied[step.version] != step.checksum:
                raise SchemaNotReady(f"applied migration {_label(step)} differs from the one shipped with this "
                                     "fencepost; refusing to continue")
            return False
        for statement in split_statements(step.sql):
            conn.execute(statement)
        conn.execute("INSERT INTO fencepost_schema (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
                     (step.version, step.name, step.checksum, to_iso(now())))
        if rebuilding:
            _refuse_dangling_references(conn, step)
        conn.execute("COMMIT")
        return True
    except BaseException:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    finally:
        if rebuilding:
            conn.execute(f"PRAGMA legacy_alter_table = {legacy_alter_table}")
            _set_foreign_keys(conn, on=True)


def _set_foreign_keys(conn: sqlite3.Connection, *, on: bool) -> None:
    # Read back: the pragma is a silent no-op inside a transaction, and a connection left with foreign
    # keys off would accept dangling references from then on.
    conn.execute(f"PRAGMA foreign_keys = {'ON' if on else 'OFF'}")
    if bool(conn.execute("PRAGMA foreign_keys").fetchone()[0]) != on:
        raise StoreUnavailable(f"could not turn SQLite foreign keys {'on' if on else 'off'} for a migration")


def _refuse_dangling_references(conn: sqlite3.Connection, step: MigrationStep) -> None:
    # Rows are (child table, child rowid, parent table, foreign key id).
    found: dict[tuple[str, str], int] = {}
    for child, _rowid, parent, _fkid in conn.execute("PRAGMA foreign_key_check"):
        found[(child, parent)] = found.get((child, parent), 0) + 1
    if found:
        detail = "; ".join(f"{count} row(s) of {child} reference missing {parent} rows"
                           for (child, parent), count in sorted(found.items()))
        raise SchemaNotReady(f"migration {_label(step)} would leave dangling references ({detail}); "
                             "rolled back, nothing applied")


def _label(step: MigrationStep) -> str:
    return f"{step.version:04d}_{step.name}"


def split_statements(script: str) -> list[str]:
    """Split a SQL script into complete statements (trigger bodies stay whole), dropping empty ones.

    Raises:
        ValueError: the script ends with an incomplete statement.
    """
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if _has_sql(buffer):
                statements.append(buffer.strip())
            buffer = ""
    if _has_sql(buffer):
        raise ValueError("SQL script ends with an incomplete statement")
    return statements


def _has_sql(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("--") and stripped != ";":
            return True
    return False
