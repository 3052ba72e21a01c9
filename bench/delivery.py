"""Delivery: migrations delivered per second across a fleet of small SQLite targets (issue 17), against plain sqlite3.

A 3-migration package (built at run time in a scratch directory) is rehearsed (two Attempts, in this process),
published and installed on a SQLite WAL/FULL control store; ``targets`` empty target files are added with a
label. Then, per case:

- fencepost: ``workers`` real ``fencepost worker`` processes are started and wait until each logged
  ``worker_started``; the clock starts, the fleet is submitted (``DeliveryService.submit`` by label, as
  ``fencepost package install --targets`` does) and the clock stops when the last delivery has a verdict.
  Each delivery is the start barrier, the drift check, one target transaction per migration with its ledger row,
  and the schema fingerprint compared with the rehearsal's: the cost of exactly-once and evidence.
- direct: the same three SQL files applied with ``sqlite3`` to as many fresh files, one transaction per
  migration, in a plain loop in this process.

Both are verified: every delivery ``succeeded`` and matched the rehearsal, every target's ledger holds the
three migrations and its ``seen`` table one row per migration (a second run would add one); the direct files
hold the same rows.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT
from fencepost.catalog.lifecycle import CatalogService
from fencepost.cli.worker_cmd import build_worker
from fencepost.core.statuses import AttemptStatus, InvocationStatus
from fencepost.delivery.service import DeliveryService
from fencepost.delivery.targets import TargetService
from fencepost.outbox.worker import WorkerConfig
from fencepost.rehearsal.service import RehearsalService, release_gate
from fencepost.store.base import Store
from fencepost.store.open import open_store

MIGRATIONS = {"0001_accounts": "CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n"
                               "CREATE TABLE seen (migration TEXT NOT NULL);\n"
                               "INSERT INTO seen VALUES ('0001_accounts');\n",
              "0002_orders": "CREATE TABLE orders (id INTEGER PRIMARY KEY, account_id INTEGER "
                             "REFERENCES accounts (id));\n"
                             "CREATE INDEX orders_by_account ON orders (account_id);\n"
                             "INSERT INTO seen VALUES ('0002_orders');\n",
              "0003_notes": "ALTER TABLE accounts ADD COLUMN note TEXT;\n"
                            "INSERT INTO seen VALUES ('0003_notes');\n"}
FLEET = 200


@dataclass
class DeliveryResult:
    """One case: migrations per second delivered by fencepost and applied by the plain loop, and the checks."""

    workers: int
    targets: int
    fencepost_per_s: float
    direct_per_s: float
    seconds: float
    verified: dict[str, Any]


def build_package(into: Path) -> Path:
    pkg = into / "fleetpkg"
    (pkg / "migrations").mkdir(parents=True)
    (pkg / "fencepost-package.toml").write_text('[package]\nname = "fleetpkg"\nversion = "1.0.0"\n', encoding="utf-8")
    for mid, sql in MIGRATIONS.items():
        (pkg / "migrations" / f"{mid}.up.sql").write_text(sql, encoding="utf-8")
    return pkg


def release(store: Store, pkg: Path, work: Path) -> None:
    """Rehearse twice (the worker in this process), publish on the passing gate, install."""
    service = RehearsalService(store)
    run = service.create_run(pkg)
    for _ in range(2):
        attempt = service.enqueue_attempt(run.id)
        build_worker(store, work, WorkerConfig(poll_interval=0.01, lease_seconds=30, listen=False)).run(
            max_idle_polls=2)
        done = service.attempt(attempt.id)
        if done.status is not AttemptStatus.SUCCEEDED:
            raise RuntimeError(f"the delivery benchmark's rehearsal ended {done.status}: {done.error}")
    catalog = CatalogService(store, release_gate=release_gate)
    catalog.publish(pkg)
    catalog.install(run.package_name)


def _fresh(path: Path) -> Path:
    sqlite3.connect(path).close()
    return path


def _workers(url: str, n: int, work: Path) -> list[subprocess.Popen[str]]:
    procs = []
    for i in range(n):
        log = open(work / f"worker{i}.log", "w", encoding="utf-8")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([sys.executable, "-m", "fencepost.cli", "worker", "-d", url, "--work-dir",
                                       str(work / f"w{i}"), "--lease-seconds", "30", "--poll-interval", "0.02",
                                       "--log-format", "json"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                      text=True))
    deadline = time.monotonic() + 120
    for i in range(n):
        while "worker_started" not in (work / f"worker{i}.log").read_text(encoding="utf-8"):
            if time.monotonic() > deadline or procs[i].poll() is not None:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a delivery benchmark worker did not start: see {work / f'worker{i}.log'}")
            time.sleep(0.05)
    return procs


def _seen(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT migration FROM seen ORDER BY rowid")]


def _ledger(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT migration FROM fencepost_delivery WHERE state = 'applied' "
                                           "ORDER BY migration")]


def direct(paths: list[Path]) -> float:
    """The plain loop: each migration in one sqlite3 transaction on each fresh file. Returns seconds."""
    scripts = list(MIGRATIONS.values())
    start = time.perf_counter()
    for path in paths:
        conn = sqlite3.connect(path, isolation_level=None)
        for sql in scripts:
            conn.executescript(f"BEGIN;\n{sql}COMMIT;")
        conn.close()
    return time.perf_counter() - start


def run_case(url: str, scratch: Path, *, targets: int = FLEET, workers: int = 1) -> DeliveryResult:
    """One case on a fresh control store ``url`` (SQLite) in ``scratch``: release, ``targets`` targets,
    ``workers`` worker processes, the timed fleet delivery, then the plain loop on as many fresh files."""
    store = open_store(url, create=True)
    store.migrate()
    try:
        release(store, build_package(scratch), scratch / "rehearse")
        root = scratch / "targets"
        root.mkdir()
        service = TargetService(store)
        paths = [_fresh(root / f"t{i:04d}.db") for i in range(targets)]
        for i, path in enumerate(paths):
            service.add(f"t{i:04d}", f"sqlite://{path}", {"bench": "fleet"})
        procs = _workers(url, workers, scratch)
        try:
            deliveries = DeliveryService(store)
            start = time.perf_counter()
            ids = [v.id for _, v in deliveries.submit("fleetpkg", selector={"bench": "fleet"}).deliveries]
            while True:
                states = deliveries.progress(ids)
                if all(s.status.terminal for s in states.values()):
                    break
                if time.perf_counter() - start > 1800:
                    raise RuntimeError("the fleet delivery took more than 30 minutes")
                time.sleep(0.02)
            seconds = time.perf_counter() - start
        finally:
            for p in procs:
                p.kill()
                p.wait(timeout=30)
        views = [deliveries.host.get(i) for i in ids]
        statuses: dict[str, int] = {}
        for v in views:
            verdict = f"{v.status}/{(v.result or {}).get('steps', {}).get('verify', {}).get('comparison')}" \
                if v.status is InvocationStatus.SUCCEEDED else f"{v.status}: {v.error}"
            statuses[verdict] = statuses.get(verdict, 0) + 1
        once = sum(1 for p in paths if _seen(p) == list(MIGRATIONS) and _ledger(p) == list(MIGRATIONS))
        (scratch / "direct").mkdir()
        plain = [_fresh(scratch / "direct" / f"d{i:04d}.db") for i in range(targets)]
        direct_s = direct(plain)
        plain_once = sum(1 for p in plain if _seen(p) == list(MIGRATIONS))
    finally:
        store.close()
    ok = (statuses == {"succeeded/matches rehearsal": targets} and once == targets and plain_once == targets)
    n = targets * len(MIGRATIONS)
    return DeliveryResult(workers, targets, n / seconds, n / direct_s, seconds,
                          {"ok": ok, "deliveries": statuses, "targets_exactly_once": once,
                           "direct_exactly_once": plain_once})


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.delivery URL SCRATCH TARGETS WORKERS``: one case, its result as JSON."""
    url, scratch, targets, workers = (argv or sys.argv[1:])[:4]
    got = run_case(url, Path(scratch), targets=int(targets), workers=int(workers))
    print(json.dumps(got.__dict__))


if __name__ == "__main__":
    main()
