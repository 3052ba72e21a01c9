"""Subprocess roles of the execution linearizability tests (``test_wf_exec_linearizability.py``); not a test module.

    python wf_exec_race.py worker URL WORK_DIR RUN_ID OUT_JSON GO_FILE DEADLINE_S
    python wf_exec_race.py cancel URL RUN_ID AFTER_SUCCEEDED OUT_JSON GO_FILE DEADLINE_S
    python wf_exec_race.py guard URL ACTION PACKAGE RUN_ID AFTER_STARTS OUT_JSON GO_FILE DEADLINE_S

``worker`` runs the real worker (``build_worker``: the task kind and the coordinator sweep, which advances the
Run too) in a thread, and in its main thread calls ``advance`` on the Run in a loop, recording per call the
monotonic clock before and after and the answer (outcome, started step keys, the Run's status). It stops when
the Run is terminal. ``cancel`` waits until AFTER_SUCCEEDED steps of the Run succeeded, then requests its
cancel once; ``guard`` waits until AFTER_STARTS start barriers of the Run are durable, then applies ACTION once
(``quarantine`` or ``disable`` the package). Both record the monotonic clock around their one change (the
clock is the same for every process of the machine, so reports compare across processes).

Every role connects, touches ``OUT_JSON.ready``, waits for GO_FILE, and is bounded by DEADLINE_S seconds.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fencepost.catalog.lifecycle import CatalogService
from fencepost.cli.worker_cmd import build_worker
from fencepost.core.errors import FencepostError
from fencepost.core.statuses import StepRunStatus
from fencepost.outbox.worker import WorkerConfig
from fencepost.rehearsal.service import release_gate
from fencepost.store import open_store
from fencepost.store.base import Store
from fencepost.workflows.cancel import request_cancel
from fencepost.workflows.progress import advance
from fencepost.workflows.task import workflow_host


def _handshake(store: Store, out: str, go: str, deadline: float) -> None:
    store.schema_version()                       # connected before the start signal
    Path(f"{out}.ready").touch()
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.001)


def worker_role(url: str, work_dir: str, run_id: str, out: str, go: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    store = open_store(url)
    host = workflow_host(store)
    worker = build_worker(store, Path(work_dir), WorkerConfig(poll_interval=0.02, lease_seconds=10, listen=False,
                                                              concurrency=2))
    _handshake(store, out, go, deadline)
    thread = threading.Thread(target=worker.run, name="worker", daemon=True)
    thread.start()
    records: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        record: dict[str, Any] = {"t0": time.monotonic_ns()}
        try:
            result = advance(store, host, run_id)
            record.update(outcome=result.outcome, started=list(result.started), run_status=str(result.run_status))
        except FencepostError as error:          # a busy store: nothing of that round committed
            record["error"] = f"{type(error).__name__}: {error}"
        record["t1"] = time.monotonic_ns()
        records.append(record)
        if record.get("outcome") == "settled":
            break
        time.sleep(random.uniform(0.02, 0.06))
    worker.request_stop(grace_seconds=5)
    thread.join(30)
    store.close()
    Path(out).write_text(json.dumps(records), encoding="utf-8")


def _count(store: Store, run_id: str, what: str) -> int:
    def unit(tx: Any) -> int:
        if what == "starts":
            return len(tx.progress.starts(run_id))
        return sum(1 for r in tx.progress.step_runs(run_id) if r.status is StepRunStatus.SUCCEEDED)
    return int(store.read(unit))


def _change_after(store: Store, run_id: str, what: str, after: int, deadline: float) -> int:
    seen = 0
    while seen < after and time.monotonic() < deadline:
        seen = _count(store, run_id, what)
        time.sleep(0.002)
    return seen


def cancel_role(url: str, run_id: str, after: int, out: str, go: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    store = open_store(url)
    _handshake(store, out, go, deadline)
    seen = _change_after(store, run_id, "succeeded", after, deadline)
    t0 = time.monotonic_ns()
    result = request_cancel(store, run_id, reason="linearizability test", actor="wf_exec_race")
    t1 = time.monotonic_ns()
    store.close()
    Path(out).write_text(json.dumps({"t0": t0, "t1": t1, "seen": seen, "outcome": result.outcome}), encoding="utf-8")


def guard_role(url: str, action: str, package: str, run_id: str, after: int, out: str, go: str,
               seconds: float) -> None:
    deadline = time.monotonic() + seconds
    store = open_store(url)
    catalog = CatalogService(store, release_gate=release_gate)
    _handshake(store, out, go, deadline)
    seen = _change_after(store, run_id, "starts", after, deadline)
    t0 = time.monotonic_ns()
    if action == "quarantine":
        catalog.quarantine(package, "linearizability test")
    elif action == "disable":
        catalog.set_disposition(package, "disabled", "linearizability test")
    else:
        raise SystemExit(f"unknown action {action}")
    t1 = time.monotonic_ns()
    store.close()
    Path(out).write_text(json.dumps({"t0": t0, "t1": t1, "seen": seen}), encoding="utf-8")


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "worker":
        url, work_dir, run_id, out, go, seconds = args
        worker_role(url, work_dir, run_id, out, go, float(seconds))
    elif role == "cancel":
        url, run_id, after, out, go, seconds = args
        cancel_role(url, run_id, int(after), out, go, float(seconds))
    elif role == "guard":
        url, action, package, run_id, after, out, go, seconds = args
        guard_role(url, action, package, run_id, int(after), out, go, float(seconds))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
