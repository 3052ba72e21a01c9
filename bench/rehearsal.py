"""Rehearsal: the largest real package in ../shared/datasets (sakila) rehearsed, against plain sqlite3.

The package is built at run time in a scratch directory (never copied into the repository): the schema as
one migration, ``drop-objects`` as the uninstall script, ``insert-data`` as the seed, ``last_update`` as a
volatile column (the schema's triggers stamp it with the load time).

- fencepost: freeze the package as a Run, enqueue one Attempt, and let a worker (in this process, the way
  ``fencepost rehearse`` runs it) take it to a terminal state through all six scenarios; timed from the
  Run's creation to the Attempt's end, with the control database on SQLite WAL/FULL.
- direct: the same three SQL files applied with ``sqlite3`` to a fresh database file, each in one
  transaction (schema, data, drop), as a hand-run install would.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, scratch_dir
from fencepost.catalog.manifest import load_package
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.open import open_store

FILES = {"schema": "sqlite-sakila-schema.sql", "seed": "sqlite-sakila-insert-data-optimized.sql",
         "drop": "sqlite-sakila-drop-objects.sql"}
MANIFEST = """[package]
name = "sakila"
version = "1.0.0"
description = "Sakila DVD rental sample (SQLite port), rehearsed by the benchmark suite."
seed = ["seed/data.sql"]
uninstall = "sql/drop.sql"

[[migrations]]
id = "0001_schema"
up = "sql/schema.sql"

[verify]
volatile_columns = ["last_update"]
"""


def datasets_dir() -> Path:
    configured = os.environ.get("FENCEPOST_DATASETS")
    return Path(configured) if configured else (ROOT / ".." / "shared" / "datasets").resolve()


def build_package(into: Path) -> Path:
    source = datasets_dir() / "sakila"
    if not source.is_dir():
        raise FileNotFoundError(f"the sakila dataset is missing from {source.parent}")
    pkg = into / "sakila"
    (pkg / "sql").mkdir(parents=True)
    (pkg / "seed").mkdir()
    shutil.copyfile(source / FILES["schema"], pkg / "sql" / "schema.sql")
    shutil.copyfile(source / FILES["drop"], pkg / "sql" / "drop.sql")
    shutil.copyfile(source / FILES["seed"], pkg / "seed" / "data.sql")
    (pkg / "fencepost-package.toml").write_text(MANIFEST, encoding="utf-8")
    return pkg


def rehearse_once(pkg: Path, work: Path) -> dict[str, Any]:
    """One Attempt end to end; returns seconds and the Attempt's outcome."""
    store = open_store(f"sqlite:///{work / 'control.db'}")
    store.migrate()
    service = RehearsalService(store)
    registry = HandlerRegistry()
    registry.register(KIND, AttemptHandler(work / "sandboxes"))
    worker = Worker(store, registry, WorkerConfig(poll_interval=0.01, batch_size=1, lease_seconds=60))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        start = time.perf_counter()
        run = service.create_run_from_spec(load_package(pkg))
        attempt = service.enqueue_attempt(run.id)
        worker.wake()
        while True:
            current = service.attempt(attempt.id)
            if current.status.terminal:
                break
            time.sleep(0.005)
        took = time.perf_counter() - start
    finally:
        worker.request_stop()
        thread.join(timeout=30)
        store.close()
    return {"seconds": took, "status": str(current.status)}


def direct_once(pkg: Path, work: Path) -> float:
    """The same SQL applied with sqlite3: schema, data and drop, one transaction each."""
    path = work / "direct.db"
    start = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    for rel in ("sql/schema.sql", "seed/data.sql", "sql/drop.sql"):
        sql = (pkg / rel).read_text(encoding="utf-8")
        conn.executescript(f"BEGIN;\n{sql}\n;\nCOMMIT;")
    conn.close()
    took = time.perf_counter() - start
    path.unlink()
    return took


def run_rehearsal(reps: int) -> dict[str, list[float]]:
    """``reps`` alternating pairs (fencepost, direct); every Attempt must end SUCCEEDED."""
    fencepost: list[float] = []
    direct: list[float] = []
    with scratch_dir("rehearsal") as d:
        pkg = build_package(d)
        for i in range(reps):
            work = d / f"rep{i}"
            work.mkdir()
            got = rehearse_once(pkg, work)
            if got["status"] != "SUCCEEDED":
                raise RuntimeError(f"the sakila rehearsal ended {got['status']}")
            fencepost.append(got["seconds"])
            direct.append(direct_once(pkg, work))
            shutil.rmtree(work, ignore_errors=True)
    return {"fencepost_s": fencepost, "direct_s": direct}
