"""What package SQL may not do to the database it runs in, enforced by SQLite's own authorizer (ADR 0102).

Package SQL is untrusted. Wherever it runs (a rehearsal sandbox, a delivery target), it may only touch the
database it was given: ATTACH and DETACH are refused, and so are the pragmas that point SQLite elsewhere or
lift a sandbox cap (``escapes_only``). On a delivery target it shares the database with fencepost's own
ledgers (``fencepost_delivery``, ``fencepost_workflow_tasks``), which are what stops a recovered delivery or
step from applying twice: package SQL may read them but never write, create, drop, alter, index or put a
trigger on any object whose name starts with ``fencepost_`` (reserved), nor switch on ``writable_schema`` to
edit the schema table (``package_only``). The authorizer judges each statement as it is prepared, so a trigger
body runs under the rules of the statement that fired it.

``PackageSql`` swaps the strict authorizer in for the package's statements only; fencepost's own statements
on the same connection (its ledger rows) run under ``escapes_only``. ``set_authorizer`` also expires the
connection's prepared statements, so a statement prepared under one authorizer never runs under the other.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

#: Object names package SQL may not write or define (case-insensitive): fencepost's target ledgers live here.
RESERVED_PREFIX = "fencepost_"
#: What a refusal means, for messages: SQLite's own text is only "not authorized".
REFUSAL = ("not authorized: package SQL may only touch its own database (no ATTACH, DETACH, nor a pragma that "
           "points elsewhere, lifts a cap or makes the schema writable) and may read, but never write or define, "
           "objects named fencepost_..., which are reserved for fencepost's ledgers")

# ATTACH (and VACUUM INTO, which attaches its target) would let package SQL open the control database or write
# files anywhere; these pragmas change process-wide state or point SQLite at other directories.
_DENIED_PRAGMAS = frozenset({"temp_store_directory", "data_store_directory"})
# Setting these would lift a cap (ADR 0021): the page budget and page size behind the disk cap, the caches and
# the temporary store behind the memory cap, an in-memory rollback journal, and the heap limits, which are
# process-wide (they would bound the control store's connections too). Reading them stays allowed.
_CAP_PRAGMAS = frozenset({"max_page_count", "page_size", "cache_size", "temp_store", "journal_mode",
                          "soft_heap_limit", "hard_heap_limit"})
# Setting it lets UPDATE rewrite sqlite_schema: a way around every rule on named objects. (Without it SQLite
# itself refuses a direct write to the schema table; CREATE and DROP write it as SQLITE_INSERT/DELETE actions on
# sqlite_master, which must stay allowed.)
_SCHEMA_PRAGMAS = frozenset({"writable_schema"})

# For each action that writes or defines an object, which authorizer argument names the table it is on (1 or 2).
_TABLE_ARGUMENT = {
    sqlite3.SQLITE_INSERT: 1, sqlite3.SQLITE_UPDATE: 1, sqlite3.SQLITE_DELETE: 1,
    sqlite3.SQLITE_CREATE_TABLE: 1, sqlite3.SQLITE_CREATE_TEMP_TABLE: 1,
    sqlite3.SQLITE_DROP_TABLE: 1, sqlite3.SQLITE_DROP_TEMP_TABLE: 1,
    sqlite3.SQLITE_ALTER_TABLE: 2,
    sqlite3.SQLITE_CREATE_INDEX: 2, sqlite3.SQLITE_CREATE_TEMP_INDEX: 2,
    sqlite3.SQLITE_DROP_INDEX: 2, sqlite3.SQLITE_DROP_TEMP_INDEX: 2,
    sqlite3.SQLITE_CREATE_TRIGGER: 2, sqlite3.SQLITE_CREATE_TEMP_TRIGGER: 2,
    sqlite3.SQLITE_DROP_TRIGGER: 2, sqlite3.SQLITE_DROP_TEMP_TRIGGER: 2,
    sqlite3.SQLITE_CREATE_VIEW: 1, sqlite3.SQLITE_CREATE_TEMP_VIEW: 1,
    sqlite3.SQLITE_DROP_VIEW: 1, sqlite3.SQLITE_DROP_TEMP_VIEW: 1,
}
# The object's own name, where it is not the table (an index, trigger or view named into the reserved space).
_OBJECT_ARGUMENT = {
    sqlite3.SQLITE_CREATE_INDEX: 1, sqlite3.SQLITE_CREATE_TEMP_INDEX: 1,
    sqlite3.SQLITE_CREATE_TRIGGER: 1, sqlite3.SQLITE_CREATE_TEMP_TRIGGER: 1,
}


def escapes_only(action: int, arg1: str | None, arg2: str | None, database: str | None, source: str | None) -> int:
    """The authorizer of every package database: deny ATTACH, DETACH and the escaping or cap-lifting pragmas."""
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in _DENIED_PRAGMAS or (name in _CAP_PRAGMAS and arg2 is not None):
            return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def reserved(name: str | None) -> bool:
    """Whether ``name`` is in fencepost's reserved space (``fencepost_...``, any case)."""
    return name is not None and name.lower().startswith(RESERVED_PREFIX)


def package_only(action: int, arg1: str | None, arg2: str | None, database: str | None, source: str | None) -> int:
    """``escapes_only``, and no write or definition in the reserved space, nor ``writable_schema`` set."""
    if escapes_only(action, arg1, arg2, database, source) == sqlite3.SQLITE_DENY:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _SCHEMA_PRAGMAS and arg2 is not None:
        return sqlite3.SQLITE_DENY
    table_at = _TABLE_ARGUMENT.get(action)
    if table_at is None:
        return sqlite3.SQLITE_OK
    table = arg1 if table_at == 1 else arg2
    if reserved(table) or reserved(arg1 if _OBJECT_ARGUMENT.get(action) == 1 else None):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def deny_escapes(conn: sqlite3.Connection) -> None:
    """Install ``escapes_only`` on ``conn``: what fencepost's own statements on a package database run under."""
    conn.set_authorizer(escapes_only)


def is_refusal(error: BaseException) -> bool:
    """Whether ``error`` is SQLite refusing a statement through the authorizer (``SQLITE_AUTH``)."""
    return isinstance(error, sqlite3.DatabaseError) and getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_AUTH


class ReservedObjectChanged(sqlite3.DatabaseError):
    """Package SQL left a ``fencepost_`` object that was not there before it (or changed one): the authorizer
    does not see every way in (``ALTER TABLE t RENAME TO fencepost_...`` names only the old table to it), so
    ``package_sql`` compares the reserved objects before and after the block. ``is_refusal`` is true for it."""

    sqlite_errorcode = sqlite3.SQLITE_AUTH


def reserved_objects(conn: sqlite3.Connection) -> frozenset[tuple[str, str, str, str, str]]:
    """Every object of the main and temp schemas whose name or table is in the reserved space:
    ``(schema, type, name, tbl_name, sql)``."""
    found: set[tuple[str, str, str, str, str]] = set()
    for schema in ("main", "temp"):
        rows = conn.execute(f"SELECT type, name, tbl_name, coalesce(sql, '') FROM {schema}.sqlite_master "
                            "WHERE lower(substr(name, 1, 10)) = ? OR lower(substr(tbl_name, 1, 10)) = ?",
                            (RESERVED_PREFIX, RESERVED_PREFIX)).fetchall()
        found.update((schema, *row) for row in rows)
    return frozenset(found)


@contextmanager
def package_sql(conn: sqlite3.Connection) -> Iterator[None]:
    """Run the block's statements under ``package_only``; ``escapes_only`` again after it, however it ends. After
    a block that ended normally, the reserved objects must be exactly those before it (``reserved_objects``).

    Raises (from the block): ``sqlite3.DatabaseError`` with ``sqlite_errorcode == SQLITE_AUTH`` ("not
    authorized", see ``is_refusal``) for a statement that writes or defines a ``fencepost_`` object;
    ``ReservedObjectChanged`` (also a refusal) when one appeared or changed another way (a rename into the
    reserved space, in main or temp). The caller rolls back what it can.
    """
    before = reserved_objects(conn)
    conn.set_authorizer(package_only)
    try:
        yield
    finally:
        conn.set_authorizer(escapes_only)
    after = reserved_objects(conn)
    if after != before:
        changed = sorted(f"{schema}.{name} ({kind})" for schema, kind, name, _, _ in after - before)
        raise ReservedObjectChanged(f"not authorized: {', '.join(changed) or 'a fencepost_ object'}")
