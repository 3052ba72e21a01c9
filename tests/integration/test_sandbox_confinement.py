"""Package SQL is confined to its sandbox: it cannot attach the control database or write files elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencepost.rehearsal.sandbox import Sandbox, SandboxError, run_script


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path / "sbx", {}, lambda: False)


@pytest.mark.parametrize(("sql", "refusal"), [
    ("ATTACH DATABASE '{target}' AS control; CREATE TABLE control.stolen (x);", "not authorized|authorization denied"),
    # a script with its own transaction control runs unwrapped (ADR 0061): VACUUM INTO outside any transaction
    ("BEGIN; COMMIT; VACUUM INTO '{target}';", "not authorized|authorization denied"),
    # trying to leave a wrapping transaction: there is none to leave, and its COMMIT fails first
    ("COMMIT; VACUUM INTO '{target}'; BEGIN;", "cannot commit - no transaction is active"),
    ("PRAGMA temp_store_directory = '{dir}';", "not authorized|authorization denied"),
])
def test_escape_attempts_are_refused_and_leave_nothing(sandbox: Sandbox, tmp_path: Path, sql: str,
                                                       refusal: str) -> None:
    target = tmp_path / "control.db"
    conn = sandbox.connect("main")
    with pytest.raises(SandboxError, match=refusal):
        run_script(conn, sql.format(target=target, dir=tmp_path), ledger_add="m1")
    assert not target.exists()
    assert conn.execute("SELECT count(*) FROM _fencepost_ledger").fetchone()[0] == 0


def test_ordinary_sql_still_runs(sandbox: Sandbox) -> None:
    conn = sandbox.connect("main")
    run_script(conn, "CREATE TABLE t (x); INSERT INTO t VALUES (1); PRAGMA foreign_keys = ON;", ledger_add="m1")
    assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]


@pytest.mark.parametrize("sql", [
    "CREATE TABLE fencepost_delivery (package TEXT);",
    "CREATE TABLE FencePost_Workflow_Tasks (x);",
    "CREATE TABLE t (x); CREATE INDEX fencepost_idx ON t (x);",
    "CREATE TABLE t (x); CREATE TRIGGER fencepost_trg AFTER INSERT ON t BEGIN SELECT 1; END;",
    "CREATE VIEW fencepost_v AS SELECT 1;",
    "PRAGMA writable_schema = ON;",
    # a rename names only the old table to the authorizer: caught by comparing the reserved objects
    "CREATE TABLE q (x); ALTER TABLE q RENAME TO fencepost_workflow_tasks;",
    "CREATE TABLE q (x); CREATE TRIGGER qt AFTER INSERT ON q BEGIN DELETE FROM q; END; "
    "ALTER TABLE q RENAME TO FencePost_Workflow_Tasks;",
    "CREATE TEMP TABLE q (x); ALTER TABLE temp.q RENAME TO fencepost_delivery;",
])
def test_the_fencepost_prefix_is_reserved_and_the_schema_not_writable(sandbox: Sandbox, sql: str) -> None:
    """A migration may not define what a delivery target's ledgers are named (ADR 0102): it would fail there,
    so the rehearsal refuses it first, saying why."""
    conn = sandbox.connect("main")
    with pytest.raises(SandboxError, match="reserved for fencepost's ledgers"):
        run_script(conn, sql, ledger_add="m1")
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY name")] == [
        "_fencepost_ledger", "sqlite_autoindex__fencepost_ledger_1"]


def test_a_script_with_its_own_transaction_that_renames_into_the_prefix_is_refused(sandbox: Sandbox) -> None:
    """It committed before fencepost could look, so the rehearsal fails it (the package is never published)."""
    conn = sandbox.connect("main")
    with pytest.raises(SandboxError, match="reserved for fencepost's ledgers"):
        run_script(conn, "BEGIN; CREATE TABLE q (x); ALTER TABLE q RENAME TO fencepost_delivery; COMMIT;",
                   ledger_add="m1")
    assert conn.execute("SELECT count(*) FROM _fencepost_ledger").fetchone()[0] == 0
