"""The own-transaction detector (``fencepost.delivery.scripts``): SQLite's tokenizer splits the statements, so
a trigger body, a string or a comment holding ``BEGIN``/``COMMIT``/``;`` is not transaction control."""

from __future__ import annotations

import sqlite3

import pytest

from fencepost.delivery.scripts import manages_own_transaction, split_statements, transaction_statements

TRIGGER = ("CREATE TRIGGER t AFTER INSERT ON a BEGIN\n  INSERT INTO log VALUES ('BEGIN; COMMIT;');\n"
           "  UPDATE a SET n = n + 1;\nEND;\n")


def test_statements_split_like_sqlite_runs_them() -> None:
    script = f"-- a comment; with a semicolon\nCREATE TABLE a (n INTEGER, s TEXT DEFAULT ';');\n{TRIGGER}" \
             "CREATE TABLE log (m TEXT);\n/* block; comment */ INSERT INTO a (n) VALUES (1);\nSELECT 1"
    statements = split_statements(script)
    assert len(statements) == 5
    assert statements[1].startswith("CREATE TRIGGER") and statements[1].endswith("END;")
    conn = sqlite3.connect(":memory:")
    for statement in statements:  # each is one statement sqlite3 accepts on its own
        conn.execute(statement)
    assert conn.execute("SELECT n FROM a").fetchall() == [(2,)]


@pytest.mark.parametrize("script", [
    "BEGIN;\nCREATE TABLE a (x);\nCOMMIT;",
    "begin immediate transaction; CREATE TABLE a (x); end;",
    "SAVEPOINT s; CREATE TABLE a (x); RELEASE s;",
    "CREATE TABLE a (x);\n/* lead */ ROLLBACK;",
])
def test_transaction_control_is_found(script: str) -> None:
    assert manages_own_transaction(script)


@pytest.mark.parametrize("script", [
    "CREATE TABLE a (x); -- BEGIN; COMMIT;",
    f"CREATE TABLE a (n); CREATE TABLE log (m);\n{TRIGGER}",
    "INSERT INTO notes VALUES ('COMMIT;');",
    'CREATE TABLE "begin" (x);',
])
def test_look_alikes_are_not_transaction_control(script: str) -> None:
    assert not manages_own_transaction(script), transaction_statements(script)
