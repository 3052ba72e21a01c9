"""Crash windows of delivery (issue 17; ADRs 0055, 0056): a ``fencepost worker`` SIGKILLed on each side of every
target COMMIT and every control-store COMMIT of a three-migration package's delivery, then a fresh worker.

Setup, in this process through the real services: the package (``delivery.kit.THREE``) rehearsed by the real
worker, published, installed; a target (a plain SQLite file); one delivery submitted (dispatched). Then a worker
process with ``FENCEPOST_CRASHPOINT`` armed dies at the window's point, and ``run_delivery_flow`` checks:

1. the worker died of SIGKILL; right after it, the target holds each migration at most once and its ledger and
   schema agree (a migration's objects exist exactly when its ledger row does: one target transaction);
   After ``host.handler:after-commit`` (the start barrier committed) the package is quarantined before recovery:
   a delivery past its barrier goes on;
2. a fresh worker converges the invocation to ``succeeded`` by recovery (the takeover re-sends the interrupted
   step under the same ``adapter_invocation_id``; the target's ledger answers "already applied");
3. afterwards every migration is on the target exactly once (three ledger rows, each carrying the id of its
   step; the schema equal to a crash-free delivery's), and ``fencepost audit`` (the CLI) exits 0.

``target.add`` and ``target.remove`` are CLI transactions: SIGKILLed on each side of COMMIT, the command run
again answers from what committed (the same target; or "no target" after a committed remove).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

from crash_harness import CrashDB, Workers, assert_cli_audit_clean, cli, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests folder: delivery.kit

from delivery.kit import THREE, drain, ledger, release, schema, target_file, write_package
from fencepost.catalog.lifecycle import CatalogService
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import DeliveryService
from fencepost.delivery.targets import TargetService
from fencepost.rehearsal.service import release_gate

MIGRATIONS = tuple(THREE)
#: Per migration i (its step migrate-00i is the (i + 1)-th step: ``check`` is the first), the target COMMIT and
#: the host's step-row and checkpoint COMMITs, each on both sides.
_PER_MIGRATION = tuple(point for i, mid in enumerate(MIGRATIONS, start=2) for point in (
    f"delivery.target:{mid}:before-commit", f"delivery.target:{mid}:after-commit",
    f"host.step.row:before-commit@{i}", f"host.step.row:after-commit@{i}",
    f"host.step.checkpoint:before-commit@{i}", f"host.step.checkpoint:after-commit@{i}"))
FULL = (*_PER_MIGRATION, "host.handler:before-commit", "host.handler:after-commit", "host.finalize:before-commit",
        "host.finalize:after-commit")
#: The default run's sample (SQLite WAL/FULL).
SAMPLED = ("delivery.target:0002_orders:after-commit", "host.handler:after-commit")
#: The CLI transactions of targets.
TARGET_POINTS = ("target.add:before-commit", "target.add:after-commit", "target.remove:before-commit",
                 "target.remove:after-commit")
DELIVERY_POINTS = FULL + TARGET_POINTS


def prepare(db: CrashDB, package_sql: dict[str, str] | None = None, *, ungated: bool = False) -> tuple[str, Path]:
    """Release the package, add target ``tenant-a`` and submit its delivery; returns (invocation id, file)."""
    store = db.store
    release(store, write_package(db.root, "shop", "1.0.0", package_sql or THREE), db.root / "setup-work",
            ungated=ungated)
    path = target_file(db.root, "tenant-a")
    TargetService(store).add("tenant-a", f"sqlite://{path}")
    (_, view), = DeliveryService(store).submit("shop", target="tenant-a").deliveries
    return view.id, path


def agree(path: Path, migrations: dict[str, str]) -> None:
    """Ledger and schema agree: each migration's tables exist exactly when its ledger row does, none twice."""
    rows = [r[2] for r in ledger(path)]
    assert len(rows) == len(set(rows)), f"a migration is in the ledger twice: {rows}"
    tables = {n for t, n, _ in schema(path) if t == "table"}
    for mid, sql in migrations.items():
        created = {w.split("(")[0].strip() for w in sql.split("CREATE TABLE ")[1:]}
        assert (mid in rows) == created.issubset(tables), (mid, rows, tables)


def _status(db: CrashDB, invocation_id: str) -> InvocationStatus:
    return DeliveryService(db.store).host.get(invocation_id).status


def run_delivery_flow(db: CrashDB, point: str, reference: list[Any]) -> None:
    """The window ``point`` of a delivery (see the module docstring); ``reference`` is a crash-free schema."""
    invocation_id, path = prepare(db)
    workers = Workers(db)
    try:
        crashed = workers.start("crash", crash=point)
        crashed.wait_killed()
        agree(path, THREE)
        if point == "host.handler:after-commit":  # past its start barrier: a quarantine no longer stops it
            CatalogService(db.store, release_gate=release_gate).quarantine("shop", "opened after the barrier")
        workers.start("recover")
        wait_until(lambda: _status(db, invocation_id).terminal, 60, what="the delivery to settle")
    finally:
        workers.kill_all()
    view = DeliveryService(db.store).host.get(invocation_id)
    assert view.status is InvocationStatus.SUCCEEDED, f"{point}: {view.status} {view.error}"
    rows = ledger(path)
    assert [r[2] for r in rows] == list(MIGRATIONS) and {r[4] for r in rows} == {"applied"}
    with sqlite3.connect(path) as conn:
        ids = dict(conn.execute("SELECT migration, adapter_invocation_id FROM fencepost_delivery").fetchall())
    steps = {s.name: s.adapter_invocation_id for s in view.steps}
    assert ids == {mid: steps[f"migrate-00{i}"] for i, mid in enumerate(MIGRATIONS, start=1)}
    assert schema(path) == reference
    assert view.result["steps"]["verify"]["comparison"] == "matches rehearsal"
    assert_cli_audit_clean(db)


def crash_free_schema(db: CrashDB) -> list[Any]:
    """The target schema of a crash-free delivery on ``db`` (a reference, computed in process)."""
    invocation_id, path = prepare(db)
    drain(db.store, db.root / "reference-work")
    assert _status(db, invocation_id) is InvocationStatus.SUCCEEDED
    return schema(path)


def run_target_flow(db: CrashDB, point: str) -> None:
    """``target add`` / ``target remove`` SIGKILLed at ``point``, then run again."""
    url = f"sqlite://{db.root}/t.db"
    if point.startswith("target.remove"):
        cli(db, "target", "add", "tenant-a", url)
        cli(db, "target", "remove", "tenant-a", crash=point)
        live = TargetService(db.store).list()
        assert [t.name for t in live] == ([] if point.endswith("after-commit") else ["tenant-a"])
        again = cli(db, "target", "remove", "tenant-a")
        assert again.returncode == (2 if point.endswith("after-commit") else 0), again.describe()
    else:
        cli(db, "target", "add", "tenant-a", url, crash=point)
        live = TargetService(db.store).list()
        assert [t.name for t in live] == (["tenant-a"] if point.endswith("after-commit") else [])
        again = cli(db, "target", "add", "tenant-a", url, "--json")
        assert again.returncode == 0, again.describe()
        assert [t.id for t in TargetService(db.store).list()] == [again.json()["id"]]
    assert_cli_audit_clean(db)
