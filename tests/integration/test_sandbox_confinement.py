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
