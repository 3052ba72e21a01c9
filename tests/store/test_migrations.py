"""Applying every migration in order yields exactly the schema of the backend's ``schema.sql``.

Compared as a normalized catalogue:
- SQLite: ``sqlite_master`` (type, name, table, SQL text without comments and with whitespace collapsed),
  without ``fencepost_schema`` and ``sqlite_sequence``;
- PostgreSQL: tables and sequences, columns (type, nullability, default, identity), constraints
  (``pg_get_constraintdef``), indexes (``pg_get_indexdef``) and functions (``pg_get_functiondef``),
  without ``fencepost_schema``.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from fencepost.store import Store
from fencepost.store.base import MigrationStep
from fencepost.store.sqlite.store import SQLiteStore, split_statements
from helpers.store_backends import StoreBackend, admin_connect, create_schema, drop_schema, new_schema_name

_COMMENT = re.compile(r"--[^\n]*")


def _schema_sql(package: str) -> str:
    return resources.files(package).joinpath("schema.sql").read_text(encoding="utf-8")


def _normalize(text: str | None) -> str | None:
    if text is None:
        return None
    return " ".join(_COMMENT.sub(" ", text).split())


def sqlite_catalogue(path: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "WHERE name NOT IN ('fencepost_schema', 'sqlite_sequence') "
                            "AND name NOT LIKE 'sqlite_autoindex_fencepost_schema%' ORDER BY type, name").fetchall()
    finally:
        conn.close()
    return [(t, n, tbl, _normalize(s)) for t, n, tbl, s in rows]


def postgres_catalogue(schema: str) -> dict[str, list[tuple[Any, ...]]]:
    with admin_connect() as conn:
        # Resolve names relative to the inspected schema so definitions print unqualified.
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

        def fetch(query: str) -> list[tuple[Any, ...]]:
            rows = conn.execute(query.encode(), {"schema": schema}).fetchall()
            # A function bound to its schema (SET search_path FROM CURRENT, ADR 0096) names it in its definition.
            bound = f"search_path TO '{schema}'"
            return [tuple(str(v).replace(f"{schema}.", "").replace(bound, "search_path TO <schema>")
                          if isinstance(v, str) else v for v in row)
                    for row in rows]

        return {
            "relations": fetch("""
                SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'S', 'v', 'm', 'p')
                  AND c.relname <> 'fencepost_schema' ORDER BY 1"""),
            "columns": fetch("""
                SELECT c.relname, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                       pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated
                FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
                LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE n.nspname = %(schema)s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
                  AND c.relname <> 'fencepost_schema' ORDER BY 1, 3"""),
            "constraints": fetch("""
                SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
                FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = %(schema)s AND c.relname <> 'fencepost_schema' ORDER BY 1, 2"""),
            "indexes": fetch("""
                SELECT tablename, indexname, indexdef FROM pg_indexes
                WHERE schemaname = %(schema)s AND tablename <> 'fencepost_schema' ORDER BY 1, 2"""),
            "triggers": fetch("""
                SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
                FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = %(schema)s AND NOT t.tgisinternal ORDER BY 1, 2"""),
            "functions": fetch("""
                SELECT p.proname, pg_get_functiondef(p.oid)
                FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = %(schema)s ORDER BY 1"""),
        }


@pytest.mark.parametrize("package", ["fencepost.store.sqlite", "fencepost.store.postgres"])
def test_migration_files_are_numbered_from_one(package: str) -> None:
    from fencepost.store.migrations import load_migrations

    steps: list[MigrationStep] = load_migrations(package)
    assert [s.version for s in steps] == list(range(1, len(steps) + 1))
    assert all(len(s.checksum) == 64 for s in steps)


def test_both_backends_ship_the_same_migration_versions() -> None:
    from fencepost.store.migrations import load_migrations

    sqlite = [(s.version, s.name) for s in load_migrations("fencepost.store.sqlite")]
    postgres = [(s.version, s.name) for s in load_migrations("fencepost.store.postgres")]
    assert sqlite == postgres


def test_migrations_yield_exactly_schema_sql(backend: StoreBackend, tmp_path: Path) -> None:
    store = backend.migrated()
    if backend.is_postgres:
        assert backend.schema is not None
        reference = new_schema_name("ref")
        create_schema(reference)
        try:
            with admin_connect() as conn:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(reference)))
                conn.execute(_schema_sql("fencepost.store.postgres").encode())
            migrated, expected = postgres_catalogue(backend.schema), postgres_catalogue(reference)
        finally:
            drop_schema(reference)
        assert all(expected[part] for part in expected), "catalogue query found nothing"
    else:
        assert isinstance(store, SQLiteStore)
        ref_path = str(tmp_path / "reference.db")
        ref = sqlite3.connect(ref_path)
        for statement in split_statements(_schema_sql("fencepost.store.sqlite")):
            ref.execute(statement)
        ref.commit()
        ref.close()
        migrated, expected = sqlite_catalogue(store.path), sqlite_catalogue(ref_path)  # type: ignore[assignment]
        assert expected
    assert migrated == expected


def test_concurrent_migrate_applies_each_step_once(backend: StoreBackend) -> None:
    stores: list[Store] = [backend.open() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    applied: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def migrate(store: Store) -> None:
        try:
            barrier.wait()
            steps = store.migrate()
            with lock:
                applied.extend(s.version for s in steps)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(applied) == list(range(1, stores[0].expected_version + 1))
    stores[0].require_schema()
