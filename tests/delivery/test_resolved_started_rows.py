"""A ``started`` ledger row whose delivery an operator resolved (ADR 0103), on a real SQLite target file:
``settle_started`` marks it applied (resolved ``succeeded``), ``replaces`` lets a new run take its place
(resolved ``failed``); neither touches a row another run holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fencepost.delivery import target_db

SCRIPT = "BEGIN;\nCREATE TABLE entries (id INTEGER PRIMARY KEY);\nCOMMIT;\n"


def _started(path: Path, by: str = "ai_old") -> sqlite3.Connection:
    path.touch()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(target_db._LEDGER_DDL)
    conn.execute(f'INSERT INTO "{target_db.LEDGER_TABLE}" ({target_db._COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)',
                 ("shop", "1.0.0", "0002_own", "sha256:x", by, "started", "2026-01-01T00:00:00.000000Z"))
    conn.close()
    return sqlite3.connect(path, isolation_level=None)


def test_settle_started_marks_only_that_runs_row_applied(tmp_path: Path) -> None:
    conn = _started(tmp_path / "t.db")
    assert target_db.settle_started(conn, "t", package="shop", migration="0002_own", adapter_invocation_id="ai_x") \
        is None  # another run's row: untouched
    assert target_db.find_row(conn, "shop", "0002_own").state == "started"  # type: ignore[union-attr]
    settled = target_db.settle_started(conn, "t", package="shop", migration="0002_own",
                                       adapter_invocation_id="ai_old")
    assert settled is not None and (settled.state, settled.adapter_invocation_id) == ("applied", "ai_old")
    assert target_db.find_row(conn, "shop", "0002_own") == settled
    again = target_db.settle_started(conn, "t", package="shop", migration="0002_own", adapter_invocation_id="ai_old")
    assert again == settled  # a recovered step finds it applied and changes nothing
    assert target_db.find_row(conn, "shop", "0003_none") is None


def test_replaces_gives_a_failed_runs_row_to_the_new_run_only(tmp_path: Path) -> None:
    conn = _started(tmp_path / "t.db")
    kept = target_db.apply_unfenced(conn, "t", package="shop", version="1.0.0", migration="0002_own",
                                    checksum="sha256:x", adapter_invocation_id="ai_new", sql=SCRIPT,
                                    replaces="ai_someone_else")
    assert (kept.applied, kept.row.state, kept.row.adapter_invocation_id) == (False, "started", "ai_old")
    done = target_db.apply_unfenced(conn, "t", package="shop", version="1.0.0", migration="0002_own",
                                    checksum="sha256:x", adapter_invocation_id="ai_new", sql=SCRIPT,
                                    replaces="ai_old")
    assert (done.applied, done.row.state, done.row.adapter_invocation_id) == (True, "applied", "ai_new")
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'entries'").fetchone() == (1,)
    rows = conn.execute(f'SELECT migration, adapter_invocation_id, state FROM "{target_db.LEDGER_TABLE}"').fetchall()
    assert rows == [("0002_own", "ai_new", "applied")]
