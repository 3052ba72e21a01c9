"""Helpers of the delivery tests: packages built in ``tmp_path``, rehearsed by the real worker, published and
installed through the real services; target databases as plain SQLite files read with plain ``sqlite3``."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fencepost.catalog.lifecycle import CatalogService
from fencepost.cli.worker_cmd import build_worker
from fencepost.core.statuses import AttemptStatus
from fencepost.delivery.service import DeliveryService
from fencepost.delivery.targets import TargetService
from fencepost.host import InvocationView
from fencepost.outbox.worker import WorkerConfig
from fencepost.rehearsal.service import RehearsalService, release_gate
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord

THREE = {"0001_accounts": "CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n",
         "0002_orders": "CREATE TABLE orders (id INTEGER PRIMARY KEY, account_id INTEGER REFERENCES accounts (id));\n"
                        "CREATE INDEX orders_by_account ON orders (account_id);\n",
         "0003_audit": "CREATE TABLE audit (at TEXT, what TEXT);\n"
                       "CREATE TRIGGER orders_audit AFTER INSERT ON orders BEGIN "
                       "INSERT INTO audit VALUES (datetime('now'), 'order; placed'); END;\n"}


def write_package(root: Path, name: str, version: str, migrations: Mapping[str, str], *,
                  previous: tuple[str, str] | None = None, functions: str = "") -> Path:
    """A package directory with ``migrations`` (id -> up SQL) discovered in ``migrations/``."""
    package = root / f"{name}-{version}"
    (package / "migrations").mkdir(parents=True)
    head = f'[package]\nname = "{name}"\nversion = "{version}"\n'
    if previous is not None:
        head += f'previous_version = "{previous[0]}"\nprevious_through = "{previous[1]}"\n'
    (package / "fencepost-package.toml").write_text(head + functions, encoding="utf-8")
    for mid, sql in migrations.items():
        (package / "migrations" / f"{mid}.up.sql").write_text(sql, encoding="utf-8")
    return package


def drain(store: Store, work_dir: Path) -> None:
    """Run the real worker (every built-in kind, the delivery action included) until it finds nothing to do."""
    worker = build_worker(store, work_dir, WorkerConfig(poll_interval=0.02, lease_seconds=10, listen=False))
    worker.run(max_idle_polls=2)


def release(store: Store, package: Path, work_dir: Path, attempts: int = 2, *, ungated: bool = False) -> None:
    """Rehearse ``package`` (``attempts`` Attempts, all must succeed unless ``ungated``), publish it (with
    ``allow_ungated`` when ``ungated``: a rehearsal cannot run an own-transaction script) and install it."""
    service = RehearsalService(store)
    run = service.create_run(package)
    for _ in range(attempts):
        attempt = service.enqueue_attempt(run.id)
        drain(store, work_dir)
        done = service.attempt(attempt.id)
        assert ungated or done.status is AttemptStatus.SUCCEEDED, done.error
    catalog = CatalogService(store, release_gate=release_gate)
    catalog.publish(package, allow_ungated=ungated)
    catalog.install(run.package_name)


def target_file(root: Path, name: str) -> Path:
    """An empty SQLite database file (a fresh tenant database)."""
    path = root / f"{name}.db"
    sqlite3.connect(path).close()
    return path


def add_target(store: Store, root: Path, name: str,
               labels: Mapping[str, str] | None = None) -> tuple[TargetRecord, Path]:
    path = target_file(root, name)
    return TargetService(store).add(name, f"sqlite://{path}", labels or {}), path


def deliver(store: Store, package: str, target: str, work_dir: Path) -> InvocationView:
    """Submit one delivery, run the worker, return the settled invocation."""
    service = DeliveryService(store)
    (_, view), = service.submit(package, target=target).deliveries
    drain(store, work_dir)
    return service.host.get(view.id)


def ledger(path: Path) -> list[tuple[Any, ...]]:
    """The target's ledger rows (package, version, migration, checksum, state), read with plain sqlite3."""
    with sqlite3.connect(path) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'fencepost_delivery'").fetchone() is None:
            return []
        return conn.execute("SELECT package, version, migration, checksum, state FROM fencepost_delivery "
                            "ORDER BY package, migration").fetchall()


def schema(path: Path) -> list[tuple[Any, ...]]:
    """The target's schema objects other than the ledger, read with plain sqlite3."""
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                            "AND tbl_name != 'fencepost_delivery' ORDER BY type, name").fetchall()
