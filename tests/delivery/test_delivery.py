"""Delivering a published package to SQLite targets through the action host, on both control-store backends
(SQLite WAL and PostgreSQL; target-only tests on SQLite):
exactly once per migration (the target's ledger), drift refused with the target unchanged, guards at the start
barrier, an own-transaction script delivered unfenced, a locked target retried until free, a deleted target
failing by name (ADRs 0055, 0056, 0058)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from delivery.kit import THREE, add_target, deliver, drain, ledger, release, schema, write_package
from fencepost.catalog.lifecycle import CatalogService
from fencepost.core.errors import NotAllowed
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import DeliveryService
from fencepost.delivery.targets import TargetService
from fencepost.rehearsal.service import release_gate
from fencepost.store.base import Store


def _checksum(sql: str) -> str:
    return "sha256:" + hashlib.sha256(sql.encode()).hexdigest()


@pytest.fixture
def shop(control: Store, tmp_path: Path) -> Store:
    release(control, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    return control


def test_fresh_delivery_applies_each_migration_once_and_matches_the_rehearsal(shop: Store, tmp_path: Path) -> None:
    _, path = add_target(shop, tmp_path, "tenant-a")
    view = deliver(shop, "shop", "tenant-a", tmp_path / "work")
    assert view.status is InvocationStatus.SUCCEEDED, view.error
    rows = ledger(path)
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        ("shop", "1.0.0", mid, _checksum(sql), "applied") for mid, sql in THREE.items()]
    assert [(t, n) for t, n, _ in schema(path)] == [
        ("index", "orders_by_account"), ("table", "accounts"), ("table", "audit"), ("table", "orders"),
        ("trigger", "orders_audit")]
    verify = view.result["steps"]["verify"]
    assert verify["comparison"] == "matches rehearsal" and verify["matches_rehearsal"] is True
    assert verify["fingerprint"] == verify["rehearsal"] and verify["scenario"] == "deliver_and_install"
    # each ledger row carries the adapter invocation id of the step that applied it
    steps = {s.name: s.adapter_invocation_id for s in view.steps}
    with __import__("sqlite3").connect(path) as conn:
        ids = dict(conn.execute("SELECT migration, adapter_invocation_id FROM fencepost_delivery").fetchall())
    assert ids == {"0001_accounts": steps["migrate-001"], "0002_orders": steps["migrate-002"],
                   "0003_audit": steps["migrate-003"]}


def test_redelivery_is_a_no_op(shop: Store, tmp_path: Path) -> None:
    target, path = add_target(shop, tmp_path, "tenant-a")
    first = deliver(shop, "shop", "tenant-a", tmp_path / "work")
    assert first.status is InvocationStatus.SUCCEEDED, first.error
    before = (ledger(path), schema(path), path.read_bytes())
    again = DeliveryService(shop).submit("shop", target="tenant-a").deliveries
    assert [v.id for _, v in again] == [first.id]  # the same command finds the same invocation
    drain(shop, tmp_path / "work")
    assert (ledger(path), schema(path), path.read_bytes()) == before
    # a new delivery to a target that already holds every migration applies none of them
    TargetService(shop).add("tenant-a-again", target.url)
    second = deliver(shop, "shop", "tenant-a-again", tmp_path / "work")
    assert second.status is InvocationStatus.SUCCEEDED, second.error
    assert second.id != first.id
    assert [second.result["steps"][f"migrate-00{i}"]["applied"] for i in (1, 2, 3)] == [False, False, False]
    assert second.result["steps"]["check"]["start_state"] == "complete"
    assert (ledger(path), schema(path)) == before[:2]


def _hand_migrated(path: Path, checksum: str) -> None:
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute(THREE["0001_accounts"])
        conn.execute("CREATE TABLE fencepost_delivery (package TEXT NOT NULL, version TEXT NOT NULL, migration TEXT "
                     "NOT NULL, checksum TEXT NOT NULL, adapter_invocation_id TEXT NOT NULL, state TEXT NOT NULL, "
                     "applied_at TEXT NOT NULL, PRIMARY KEY (package, migration))")
        conn.execute("INSERT INTO fencepost_delivery VALUES ('shop', '0.9', '0001_accounts', ?, 'by-hand', 'applied', "
                     "'2026-01-01T00:00:00.000000Z')", (checksum,))


def test_drift_same_migration_other_checksum_is_refused_and_the_target_unchanged(shop: Store, tmp_path: Path) -> None:
    _, path = add_target(shop, tmp_path, "tenant-a")
    _hand_migrated(path, "sha256:" + "0" * 64)
    before = path.read_bytes()
    view = deliver(shop, "shop", "tenant-a", tmp_path / "work")
    assert view.status is InvocationStatus.FAILED
    assert view.error is not None and "tenant-a has drifted" in view.error
    assert f"migration 0001_accounts: the target's ledger has checksum sha256:{'0' * 64}" in view.error
    assert _checksum(THREE["0001_accounts"]) in view.error and "nothing was applied" in view.error
    assert path.read_bytes() == before
    assert [s.name for s in view.steps] == ["check"]  # no migration step ever ran


def test_a_fixed_target_is_delivered_again_with_redeliver(shop: Store, tmp_path: Path) -> None:
    import sqlite3

    _, path = add_target(shop, tmp_path, "tenant-a")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE stray (x)")
    failed = deliver(shop, "shop", "tenant-a", tmp_path / "work")
    assert failed.status is InvocationStatus.FAILED
    service = DeliveryService(shop)
    assert [v.id for _, v in service.submit("shop", target="tenant-a").deliveries] == [failed.id]
    with sqlite3.connect(path) as conn:  # the operator fixes the target
        conn.execute("DROP TABLE stray")
    (_, again), = service.submit("shop", target="tenant-a", redeliver=True).deliveries
    assert again.id != failed.id
    assert [v.id for _, v in service.submit("shop", target="tenant-a", redeliver=True).deliveries] == [again.id]
    drain(shop, tmp_path / "work")
    assert service.host.get(again.id).status is InvocationStatus.SUCCEEDED
    assert [r[2] for r in ledger(path)] == list(THREE)
    assert [v.id for _, v in service.submit("shop", target="tenant-a").deliveries] == [again.id]
    (newest,) = service.deliveries("shop")
    assert (newest["invocation_id"], newest["status"]) == (again.id, "succeeded")
    # the Targets page and the packages list pick the same newest delivery (never the failed one it follows)
    (last,) = service.last_by_target()[newest["target_id"]]
    assert (last["package"], last["version"], last["status"], last["invocation_id"]) == (
        "shop", "1.0.0", "succeeded", again.id)
    assert service.packages() == [{"name": "shop", "versions": ["1.0.0"], "installed_version": "1.0.0",
                                   "targets": 1}]


def test_tables_without_ledger_rows_and_a_target_ahead_are_drift(shop: Store, tmp_path: Path) -> None:
    import sqlite3

    _, by_hand = add_target(shop, tmp_path, "by-hand")
    with sqlite3.connect(by_hand) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
    view = deliver(shop, "shop", "by-hand", tmp_path / "work")
    assert view.status is InvocationStatus.FAILED
    assert "tables present without ledger rows: table accounts" in (view.error or "")
    _, ahead = add_target(shop, tmp_path, "ahead")
    _hand_migrated(ahead, _checksum(THREE["0001_accounts"]))
    with sqlite3.connect(ahead) as conn:
        conn.execute("INSERT INTO fencepost_delivery VALUES ('shop', '2.0.0', '0009_future', 'sha256:x', 'by-hand', "
                     "'applied', '2026-01-01T00:00:00.000000Z')")
    before = ahead.read_bytes()
    view = deliver(shop, "shop", "ahead", tmp_path / "work")
    assert view.status is InvocationStatus.FAILED
    assert "migration 0009_future (version 2.0.0) that this package does not have" in (view.error or "")
    assert ahead.read_bytes() == before


def test_quarantine_refuses_new_deliveries_at_the_start_barrier(shop: Store, tmp_path: Path) -> None:
    _, path = add_target(shop, tmp_path, "tenant-a")
    service = DeliveryService(shop)
    (_, pending), = service.submit("shop", target="tenant-a").deliveries
    CatalogService(shop, release_gate=release_gate).quarantine("shop", "CVE-2026-1")
    drain(shop, tmp_path / "work")
    view = service.host.get(pending.id)
    assert view.status is InvocationStatus.FAILED
    assert "not allowed by guard quarantine" in (view.error or "") and "CVE-2026-1" in (view.error or "")
    assert ledger(path) == [] and schema(path) == []
    assert shop.read(lambda tx: tx.delivery.get_delivery_start(pending.id)) is None
    with pytest.raises(NotAllowed, match="guard quarantine"):
        service.submit("shop", target="tenant-a")


def test_own_transaction_script_is_delivered_unfenced(sqlite_store: Store, tmp_path: Path) -> None:
    store = sqlite_store
    script = "BEGIN;\nCREATE TABLE ledger_entries (id INTEGER PRIMARY KEY);\nCOMMIT;\n"
    package = write_package(tmp_path, "books", "1.0.0", {"0001_base": "CREATE TABLE books (id INTEGER);\n",
                                                         "0002_own_tx": script})
    release(store, package, tmp_path / "work")  # the rehearsal runs it as written (ADR 0061)
    _, path = add_target(store, tmp_path, "tenant-b")
    view = deliver(store, "books", "tenant-b", tmp_path / "work")
    assert view.status is InvocationStatus.SUCCEEDED, view.error
    steps = view.result["steps"]
    assert (steps["migrate-001"]["fenced"], steps["migrate-002"]["fenced"]) == (True, False)
    assert [r[2:] for r in ledger(path)] == [("0001_base", _checksum("CREATE TABLE books (id INTEGER);\n"), "applied"),
                                             ("0002_own_tx", _checksum(script), "applied")]
    assert {n for _, n, _ in schema(path)} == {"books", "ledger_entries"}
    assert steps["verify"]["comparison"] == "matches rehearsal"


def test_a_locked_target_is_retried_and_succeeds_once_free(sqlite_store: Store, tmp_path: Path) -> None:
    shop = sqlite_store
    release(shop, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    _, path = add_target(shop, tmp_path, "tenant-a")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE'); c.execute('CREATE TABLE IF NOT EXISTS lock_probe (x)')\n"
        "print('locked', flush=True); time.sleep(3.5); c.execute('ROLLBACK')\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        view = deliver(shop, "shop", "tenant-a", tmp_path / "work")
    finally:
        holder.wait(timeout=30)
    assert view.status is InvocationStatus.SUCCEEDED, view.error
    first = next(s for s in view.steps if s.name == "migrate-001")  # the first write waits for the lock
    assert first.attempts >= 2, "the locked target was not retried"
    assert [r[2] for r in ledger(path)] == list(THREE)


def test_a_deleted_target_fails_naming_it_and_is_not_created(sqlite_store: Store, tmp_path: Path) -> None:
    shop = sqlite_store
    release(shop, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    _, path = add_target(shop, tmp_path, "tenant-gone")
    path.unlink()
    view = deliver(shop, "shop", "tenant-gone", tmp_path / "work")
    assert view.status is InvocationStatus.FAILED
    assert f"target tenant-gone: database file {path} does not exist" in (view.error or "")
    assert not path.exists()


def test_a_waived_gate_is_still_compared_with_the_fresh_install_the_rehearsal_proved(control: Store,
                                                                                     tmp_path: Path) -> None:
    """A broken down script fails every Attempt, and the publication waives the gate; the fresh-install
    scenario still SUCCEEDED with sealed evidence of the installed schema, so the delivery is compared with
    it, naming that Attempt (it used to say "no rehearsal evidence" and compare nothing: new-user trial)."""
    package = write_package(tmp_path, "shop", "1.0.0", THREE)
    (package / "migrations" / "0003_audit.down.sql").write_text("DROP TABLE c,,;\n", encoding="utf-8")
    release(control, package, tmp_path / "work", ungated=True)
    attempts = control.read(lambda tx: tx.rehearsal.list_attempts(tx.rehearsal.list_runs()[0].id))
    assert {str(a.status) for a in attempts} == {"FAILED"}
    add_target(control, tmp_path, "tenant-a")
    view = deliver(control, "shop", "tenant-a", tmp_path / "work")
    assert view.status is InvocationStatus.SUCCEEDED, view.error
    verify = view.result["steps"]["verify"]
    assert verify["comparison"] == "matches rehearsal" and verify["matches_rehearsal"] is True
    assert verify["rehearsal_attempt_id"] == attempts[-1].id
