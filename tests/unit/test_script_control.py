"""Scripts that manage their own transaction (issue 11 item 1): detected by SQLite's statement boundaries and
each statement's leading keyword, then run as written in a real sandbox and verified afterwards."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fencepost.catalog.script_control import control_statements, manages_own_transaction, split_statements
from fencepost.rehearsal.sandbox import OWN_TRANSACTION, WRAPPED, Sandbox, SandboxError, applied, run_script

GOLANG_MIGRATE = ("PRAGMA foreign_keys=OFF;\nBEGIN;\nCREATE TABLE a (id INTEGER PRIMARY KEY);\n"
                  "INSERT INTO a VALUES (1);\nCOMMIT;\nPRAGMA foreign_keys=ON;\n")


@pytest.mark.parametrize("statement", ["BEGIN;", "begin transaction;", "BEGIN IMMEDIATE;", "COMMIT;",
                                       "END TRANSACTION;", "ROLLBACK;", "SAVEPOINT s1;", "RELEASE s1;",
                                       "/* lead */ -- line\n  Commit"])
def test_each_transaction_keyword_is_detected(statement: str) -> None:
    sql = f"CREATE TABLE t (x);\n{statement}\n"
    assert manages_own_transaction(sql)
    [found] = control_statements(sql)
    assert found.index == 1 and sql[found.offset:].lstrip().startswith(statement.split()[0][:2])


@pytest.mark.parametrize("sql", [
    # a trigger body's BEGIN ... END (sakila writes these): one statement, led by CREATE
    "CREATE TRIGGER tr AFTER INSERT ON t BEGIN UPDATE t SET x = 1; END;",
    "INSERT INTO t VALUES ('BEGIN; COMMIT;');",          # in a string
    'CREATE TABLE "begin" (x); INSERT INTO "begin" VALUES (1);',  # a quoted identifier
    "-- BEGIN;\n/* COMMIT; */ SELECT 1;",                # in comments
    "SELECT 'x'; CREATE TABLE committed (begin_at TEXT);",
])
def test_keywords_elsewhere_are_not_transaction_control(sql: str) -> None:
    assert not manages_own_transaction(sql)


def test_statements_split_on_sqlite_boundaries() -> None:
    sql = "CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT ';'; SELECT 2; END; BEGIN; COMMIT"
    texts = [text.strip() for _, text in split_statements(sql)]
    assert texts == ["CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT ';'; SELECT 2; END;", "BEGIN;", "COMMIT"]
    assert [c.keyword for c in control_statements(sql)] == ["BEGIN", "COMMIT"]


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    sandbox = Sandbox(tmp_path / "sbx", {}, lambda: False)
    return sandbox.connect("main")


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name != "
                                       "'_fencepost_ledger' ORDER BY name")]


def test_a_golang_migrate_script_runs_as_written_and_is_recorded(conn: sqlite3.Connection) -> None:
    assert run_script(conn, GOLANG_MIGRATE, ledger_add="0001") == OWN_TRANSACTION
    assert _tables(conn) == ["a"] and applied(conn) == ["0001"]
    assert not conn.in_transaction
    # the script's closing PRAGMA foreign_keys=ON does not leak into the next script
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 0
    assert run_script(conn, "CREATE TABLE b (x);", ledger_add="0002") == WRAPPED
    assert applied(conn) == ["0001", "0002"]


def test_a_script_that_leaves_its_transaction_open_is_refused_and_undone(conn: sqlite3.Connection) -> None:
    with pytest.raises(SandboxError, match="left one open"):
        run_script(conn, "BEGIN;\nCREATE TABLE a (x);\n", ledger_add="0001")
    assert _tables(conn) == [] and applied(conn) == [] and not conn.in_transaction


def test_a_failure_after_its_own_commit_is_reported_half_applied(conn: sqlite3.Connection) -> None:
    sql = "BEGIN; CREATE TABLE a (x); COMMIT;\nBEGIN; CREATE TABLE b (;\nCOMMIT;"
    with pytest.raises(SandboxError, match=r"syntax error.*left the schema half-applied"):
        run_script(conn, sql, ledger_add="0001")
    assert applied(conn) == [] and not conn.in_transaction


def test_a_failure_inside_its_own_transaction_leaves_nothing(conn: sqlite3.Connection) -> None:
    with pytest.raises(SandboxError) as caught:
        run_script(conn, "BEGIN; CREATE TABLE a (x); INSERT INTO nowhere VALUES (1); COMMIT;", ledger_add="0001")
    assert "no such table: nowhere" in str(caught.value) and "half-applied" not in str(caught.value)
    assert _tables(conn) == [] and applied(conn) == []


def test_a_script_may_not_touch_the_ledger(conn: sqlite3.Connection) -> None:
    with pytest.raises(SandboxError, match="changed fencepost's ledger"):
        run_script(conn, "BEGIN; INSERT INTO _fencepost_ledger VALUES ('forged'); COMMIT;", ledger_add="0001")


@pytest.mark.parametrize("sql", ["BEGIN; DROP TABLE _fencepost_ledger; COMMIT;",
                                 "BEGIN; ALTER TABLE _fencepost_ledger RENAME TO kept; COMMIT;",
                                 "BEGIN; ALTER TABLE _fencepost_ledger RENAME COLUMN id TO x; COMMIT;"])
def test_a_script_that_drops_the_ledger_is_the_packages_failure(conn: sqlite3.Connection, sql: str) -> None:
    # the check read the ledger it had dropped: a raw sqlite3.OperationalError failed the whole Attempt's
    # command, with no Receipt evidence, instead of a scenario failure naming what the package did
    with pytest.raises(SandboxError, match="changed fencepost's ledger"):
        run_script(conn, sql, ledger_add="0001")


@pytest.mark.parametrize("sql", ["INSERT INTO _fencepost_ledger VALUES ('0009_later');",
                                 "DELETE FROM _fencepost_ledger;", "DROP TABLE _fencepost_ledger;"])
def test_a_wrapped_script_may_not_touch_the_ledger_either(conn: sqlite3.Connection, sql: str) -> None:
    # a forged row made a later install skip that migration (it looked applied): accepted when wrapped
    assert run_script(conn, "CREATE TABLE a (x);", ledger_add="0001") == WRAPPED
    with pytest.raises(SandboxError, match="changed fencepost's ledger"):
        run_script(conn, "CREATE TABLE b (x);\n" + sql, ledger_add="0002")
    assert applied(conn) == ["0001"] and _tables(conn) == ["a"] and not conn.in_transaction


def test_an_unterminated_string_does_not_make_splitting_quadratic() -> None:
    # every later ';' would re-read the text from the open quote: the scan stops at its budget instead
    sql = "INSERT INTO t VALUES ('never closed);\n" + "SELECT 1;\n" * 200_000 + "BEGIN;\n"
    statements = split_statements(sql)
    assert len(statements) == 1 and statements[0][0] == 0
    assert not manages_own_transaction(sql)  # SQLite refuses the unterminated string when it runs
