"""fencepost's ``synchronous`` option becomes the SQLite level that keeps its promise (ADR 0060): ``full`` in
DELETE mode is SQLite's ``EXTRA`` (the directory is synced after the journal's unlink, the DELETE commit
point), ``full`` in WAL mode is ``FULL``, ``normal`` is ``NORMAL``. The power-loss harness
(tests/powerloss) shows why: with plain ``FULL`` in DELETE mode a returned COMMIT is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencepost.store import open_store
from fencepost.store.sqlite.store import SQLiteStore, sqlite_synchronous

LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


@pytest.mark.parametrize(("mode", "option", "expected"), [
    ("delete", "full", "EXTRA"), ("wal", "full", "FULL"), ("wal", "normal", "NORMAL"), ("delete", "normal", "NORMAL"),
])
def test_each_connection_runs_at_the_level_the_option_promises(mode: str, option: str, expected: str,
                                                               tmp_path: Path) -> None:
    assert sqlite_synchronous(mode, option) == expected
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}?journal_mode={mode}&synchronous={option}", create=True)
    try:
        assert isinstance(store, SQLiteStore)
        conn = store.connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == mode
        assert LEVELS[conn.execute("PRAGMA synchronous").fetchone()[0]] == expected
    finally:
        store.close()
