"""The SQLite store against its files changing under it (break-it trials, 2026-12-07).

- A ``-wal`` file deleted while the store has it open takes commits with it that no other process will see; the
  store refuses to write on into it, as it refuses a replaced database file.
- A connection SQLite opened read-only (the file was not writable at that moment) is reopened once a write is
  refused, so the thread that owns it (a worker's heartbeat) recovers when the file is writable again.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fencepost.core.errors import StoreUnavailable
from fencepost.store import open_store
from fencepost.store.sqlite.store import SQLiteStore


def _write(store: SQLiteStore, n: int) -> None:
    store.transact(lambda tx: tx.outbox.insert(command_id=f"c{n}", kind="k", payload={}), name="test.write")


def test_a_deleted_wal_file_stops_every_write_and_read(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(store, SQLiteStore)
    try:
        store.migrate()
        _write(store, 1)
        (tmp_path / "c.db-wal").unlink()
        with pytest.raises(StoreUnavailable, match=r"write-ahead log \(-wal file\) was deleted or replaced"):
            _write(store, 2)
        with pytest.raises(StoreUnavailable, match="write-ahead log"):
            store.read(lambda tx: tx.outbox.get("c1"))
    finally:
        store.close()


def test_the_wal_of_a_store_in_delete_mode_is_not_watched(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}?journal_mode=delete")
    try:
        store.migrate()
        _write(store, 1)
        _write(store, 2)  # no -wal file ever: nothing to compare, nothing refused
        assert store.read(lambda tx: tx.outbox.get("c2")) is not None
    finally:
        store.close()


def test_a_read_only_refusal_closes_only_the_connection_that_met_it(tmp_path: Path) -> None:
    """A connection that answers SQLITE_READONLY is dropped and the next use of that thread opens another. Made
    read-only through the connection itself (``query_only``: the same SQLITE_READONLY a read-only open gives),
    since the suite runs as root, for whom no file mode makes SQLite open read-only."""
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(store, SQLiteStore)
    try:
        store.migrate()
        first = store.connection()
        first.execute("PRAGMA query_only = ON")  # every write now fails with SQLITE_READONLY, as a read-only open
        with pytest.raises(StoreUnavailable):
            _write(store, 1)
        second = store.connection()
        assert second is not first
        with pytest.raises(sqlite3.ProgrammingError):
            first.execute("SELECT 1")  # closed
        _write(store, 2)
        assert store.read(lambda tx: tx.outbox.get("c2")) is not None
    finally:
        store.close()
