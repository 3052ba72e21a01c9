"""A target replaced by another database between the drift check and the first migration (issue 17, ADR 0056):
a ``fencepost worker`` SIGKILLed right after the ``check`` step's checkpoint, the target file swapped for a
foreign database, then a fresh worker. The recovered migration step must not apply the package on top of the
foreign schema: its ledger guard, in the migration's own target transaction, fails the delivery with the
difference named, and the foreign database is unchanged. Default run: SQLite WAL; PostgreSQL is soak."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from crash_flows import require_backend
from crash_harness import Workers, assert_cli_audit_clean, crash_db, wait_until
from delivery_flow import prepare

from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import DeliveryService


@pytest.mark.parametrize("backend", ["sqlite-wal", pytest.param("postgres", marks=[pytest.mark.soak,
                                                                                  pytest.mark.postgres])])
def test_a_target_replaced_after_the_check_is_refused_and_unchanged(backend: str, tmp_path: Path) -> None:
    require_backend(backend)
    with crash_db(backend, tmp_path) as db:
        invocation_id, path = prepare(db)
        workers = Workers(db)
        try:
            workers.start("crash", crash="host.step.checkpoint:after-commit@1").wait_killed()  # after `check`
            path.unlink()
            with sqlite3.connect(path) as conn:
                conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
                conn.execute("INSERT INTO customers VALUES (1, 'kept')")
            workers.start("recover")
            wait_until(lambda: DeliveryService(db.store).host.get(invocation_id).status.terminal, 60,
                       what="the delivery to settle")
        finally:
            workers.kill_all()
        view = DeliveryService(db.store).host.get(invocation_id)
        assert view.status is InvocationStatus.FAILED, (view.status, view.error)
        assert "tables present without ledger rows: table customers" in (view.error or "")
        assert "nothing was applied" in (view.error or "")
        with sqlite3.connect(path) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
            assert names == {"customers"}, names
            assert conn.execute("SELECT name FROM customers").fetchall() == [("kept",)]
        assert_cli_audit_clean(db)
