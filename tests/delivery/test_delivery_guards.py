"""Delivery edge cases found by adversarial testing (issue 17): a repeated ``install --target`` after another
rehearsal Attempt of the published content returns the same delivery; an own-transaction migration whose
``started`` row cannot be written fails as "nothing applied" instead of needing reconciliation; the ledger
guard of a migration step refuses a target whose ledger moved away from the drift check's (ADRs 0055, 0056)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from delivery.kit import THREE, add_target, deliver, drain, ledger, release, schema, write_package
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery import target_db
from fencepost.delivery.service import DeliveryService
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.base import Store

OWN_TX = {"0001_own_tx": "BEGIN;\nCREATE TABLE ledger_entries (id INTEGER PRIMARY KEY);\nCOMMIT;\n"}


def test_a_repeated_install_after_another_rehearsal_attempt_returns_the_same_delivery(control: Store,
                                                                                      tmp_path: Path) -> None:
    store = control
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    add_target(store, tmp_path, "tenant-a")
    (_, first), = DeliveryService(store).submit("shop", target="tenant-a").deliveries
    gate = store.read(lambda tx: tx.catalog.get_publication(tx.catalog.get_head("shop").publication_id)).gate_run_id
    assert gate is not None
    RehearsalService(store).enqueue_attempt(gate)  # the published content rehearsed once more
    drain(store, tmp_path / "work")
    (_, again), = DeliveryService(store).submit("shop", target="tenant-a").deliveries
    assert again.id == first.id
    assert DeliveryService(store).host.get(first.id).status is InvocationStatus.SUCCEEDED


def test_an_unfenced_migration_whose_started_row_cannot_be_written_fails_with_nothing_applied(
        sqlite_store: Store, tmp_path: Path) -> None:
    store = sqlite_store
    release(store, write_package(tmp_path, "books", "1.0.0", OWN_TX), tmp_path / "work")
    _, path = add_target(store, tmp_path, "tenant-b")
    with sqlite3.connect(path) as conn:  # a target whose ledger refuses writes (as a read-only one would)
        conn.execute(f"CREATE TABLE {target_db.LEDGER_TABLE} (package TEXT, version TEXT, migration TEXT, "
                     "checksum TEXT, adapter_invocation_id TEXT, state TEXT, applied_at TEXT)")
        conn.execute(f"CREATE TRIGGER no_writes BEFORE INSERT ON {target_db.LEDGER_TABLE} "
                     "BEGIN SELECT RAISE(ABORT, 'ledger is read-only'); END")
    view = deliver(store, "books", "tenant-b", tmp_path / "work")
    assert view.status is InvocationStatus.FAILED, (view.status, view.error)
    assert "could not be written" in (view.error or "") and "the script did not run" in (view.error or "")
    assert ledger(path) == []
    assert "ledger_entries" not in {n for _, n, _ in schema(path)}


def test_apply_unfenced_on_a_read_only_connection_raises_not_applied(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    sqlite3.connect(path).close()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        try:
            target_db.apply_unfenced(conn, "t", package="p", version="1", migration="m", checksum="sha256:x",
                                     adapter_invocation_id="aiv", sql=OWN_TX["0001_own_tx"])
        except target_db.NotApplied as error:
            assert "the script did not run" in str(error)
        else:
            raise AssertionError("a read-only target was reported applied")
    finally:
        conn.close()
    assert ledger(path) == []


def test_the_ledger_guard_refuses_a_target_changed_after_the_check(sqlite_store: Store, tmp_path: Path) -> None:
    """The guard in the migration's own transaction: called as the adapter calls it, on a target whose ledger
    lost the first migration's row after the check (deleted by hand) and on a replaced, foreign file."""
    from fencepost.delivery.action import _ledger_guard

    store = sqlite_store
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    _, path = add_target(store, tmp_path, "tenant-a")
    view = deliver(store, "shop", "tenant-a", tmp_path / "work")
    assert view.status is InvocationStatus.SUCCEEDED, view.error
    migrations = view.params["migrations"]
    data = {"package": "shop", "migrations": migrations, "previous_through": None, "invocation_id": view.id}
    with sqlite3.connect(path) as conn:
        assert _ledger_guard({**data, "index": 3})(conn) is not None  # 0003 is already there: not 0001-0002
        conn.execute("DELETE FROM fencepost_delivery WHERE migration = '0003_audit'")
        conn.execute("DROP TRIGGER orders_audit")
        conn.execute("DROP TABLE audit")
        assert _ledger_guard({**data, "index": 3})(conn) is None  # exactly 0001-0002: the step may apply
        assert "0001_accounts, 0002_orders" in (_ledger_guard({**data, "index": 2})(conn) or "")
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
        problem = _ledger_guard({**data, "index": 1})(conn)
    assert problem is not None and "tables present without ledger rows: table customers" in problem


def test_a_target_path_that_is_a_directory_fails_saying_so(sqlite_store: Store, tmp_path: Path) -> None:
    from fencepost.delivery.targets import TargetService

    store = sqlite_store
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    folder = tmp_path / "tenant-dir.db"
    folder.mkdir()
    TargetService(store).add("tenant-dir", f"sqlite://{folder}")
    view = deliver(store, "shop", "tenant-dir", tmp_path / "work")
    assert view.status is InvocationStatus.FAILED
    assert f"target tenant-dir: {folder} is not a regular file" in (view.error or ""), view.error
    assert list(folder.iterdir()) == []
