"""Subprocess roles of the linearizability test (``test_wf_linearizability.py``); not a test module.

    python wf_race.py admit URL PLANS_JSON WORKER WORKERS OUT_JSON GO_FILE DEADLINE_S
    python wf_race.py guard URL ACTION PACKAGE_DIR AFTER OUT_JSON GO_FILE DEADLINE_S

``admit`` admits its share of the prepared plans (``plans[WORKER::WORKERS]``) one after another and
records, per attempt, the monotonic clock before and after and the answer (outcome, or the refusing
guard). ``guard`` waits until ``AFTER`` admissions are durable, then applies ACTION once (``quarantine``,
``disable`` or ``publish`` a new version from PACKAGE_DIR) and records the monotonic clock around it.
Both wait for GO_FILE first (so every process is started and connected), and every loop is bounded by
count and by DEADLINE_S seconds.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from fencepost.catalog.lifecycle import CatalogService
from fencepost.core.errors import FencepostError, NotAllowed
from fencepost.rehearsal.service import release_gate
from fencepost.store import open_store
from fencepost.workflows.service import WorkflowService

PACKAGE = "pair"


def _wait_for(go: Path, deadline: float) -> None:
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.001)


def admit_role(url: str, plans_file: str, worker: int, workers: int, out: str, go: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    plans: list[dict[str, Any]] = json.loads(Path(plans_file).read_text(encoding="utf-8"))[worker::workers]
    store = open_store(url)
    workflows = WorkflowService(store)
    store.schema_version()                       # connected before the start signal
    records = []
    guard_done = Path(out).with_name("guard.json")   # the guard role writes it once its change committed
    Path(f"{out}.ready").touch()
    _wait_for(Path(go), deadline)
    for plan in plans:
        if time.monotonic() > deadline:
            break
        record: dict[str, Any] = {"plan_id": plan["plan_id"], "t0": time.monotonic_ns()}
        try:
            result = workflows.admit(plan)
            record.update(outcome=result.outcome, run_id=result.run_id, receipt=result.receipt)
        except NotAllowed as error:
            record["refused"] = error.guard
        except FencepostError as error:
            record["error"] = f"{type(error).__name__}: {error}"
        record["t1"] = time.monotonic_ns()
        records.append(record)
        # A short random pause between attempts: SQLite's busy handler is not fair (a waiting writer polls
        # with growing sleeps), so back-to-back writers could starve the guard process until they finish.
        # Past half of its plans, while the guard has not changed anything yet, a worker slows down further:
        # on a loaded machine the guard may be scheduled late, and a race it never joined would be vacuous.
        paced = len(records) > len(plans) // 2 and not guard_done.exists()
        time.sleep(random.uniform(0.01, 0.03) if paced else random.uniform(0, 0.004))
    store.close()
    Path(out).write_text(json.dumps(records), encoding="utf-8")


def guard_role(url: str, action: str, package_dir: str, after: int, out: str, go: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    store = open_store(url)
    catalog = CatalogService(store, release_gate=release_gate)
    store.schema_version()
    Path(f"{out}.ready").touch()
    _wait_for(Path(go), deadline)
    seen = 0
    while seen < after and time.monotonic() < deadline:
        seen = store.read(lambda tx: len(tx.admission.plan_ids()))
    t0 = time.monotonic_ns()
    if action == "quarantine":
        catalog.quarantine(PACKAGE, "linearizability test")
    elif action == "disable":
        catalog.set_disposition(PACKAGE, "disabled", "linearizability test")
    elif action == "publish":
        catalog.publish(package_dir, allow_ungated=True)
    else:
        raise SystemExit(f"unknown action {action}")
    t1 = time.monotonic_ns()
    store.close()
    Path(out).write_text(json.dumps({"t0": t0, "t1": t1, "seen": seen}), encoding="utf-8")


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "admit":
        url, plans, worker, workers, out, go, seconds = args
        admit_role(url, plans, int(worker), int(workers), out, go, float(seconds))
    elif role == "guard":
        url, action, package_dir, after, out, go, seconds = args
        guard_role(url, action, package_dir, int(after), out, go, float(seconds))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
