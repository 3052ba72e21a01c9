"""The DBOS peer of the workflow benchmark (bench/workflows.py): the same two shapes as DBOS workflows.

Imported only inside the benchmark virtualenv (bench/.venv, ``dbos`` from bench/requirements.txt); DBOS is never a
fencepost dependency. The setup follows ``bench.peers.dbos_step_run``: a DBOS system database on SQLite (a file)
or PostgreSQL (a fresh database), created and migrated by a first, idle worker launch; the top-level workflows are
enqueued by a ``DBOSClient`` (not timed); ``workers`` DBOS processes launch after the go signal (a launched
process dequeues at once) and the time runs from the first workflow any process started to the last step done.
Queue polling every 10 ms, ``worker_concurrency`` as ``bench.peers``, a unique ``executor_id`` per process.

Each step is a ``@DBOS.step`` that opens the SQLite target file and commits one ``INSERT INTO marks`` in a
``BEGIN IMMEDIATE`` transaction (the same statement, journal mode and synchronous setting as fencepost's task;
fencepost also writes its ledger row in that transaction, DBOS records the step's output in its system database).
A step that finds the target locked past the 30 s busy timeout is retried by DBOS (``retries_allowed``, up to 10
attempts), as fencepost retries a busy target.

- ``dag``: workflow ``wf_dag`` runs step ``root``, enqueues ``width`` child workflows ``wf_leaf`` (one step each)
  on queue ``wf-child`` (any process dequeues them), awaits every handle, then runs step ``join``: 128 steps
  for width 126, the fan-out / fan-in of fencepost's ``dag`` workflow.
- ``runs``: ``n`` workflows ``wf_one`` of one step on queue ``wf-top``.

Run a worker by hand: ``python -m bench.wf_peers worker SYSTEM-DB MARKS-DB``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from typing import Any

from bench import peers
from bench.common import ROOT, release_and_collect

TOP, CHILD = "wf-top", "wf-child"
MARKS = "CREATE TABLE marks (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)"


def marks_file(path: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(MARKS)


def marks(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM marks").fetchone()[0])


def _drive(system: str, target: str, workers: int) -> tuple[float, int]:
    """Start ``workers`` DBOS processes, release them together, wait; (seconds from the first workflow started
    to the last step done, steps done)."""
    procs = [subprocess.Popen([sys.executable, "-m", "bench.wf_peers", "worker", system, target], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=peers.LOG, text=True)
             for _ in range(workers)]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            for p in procs:
                p.kill()
            raise RuntimeError("a DBOS workflow worker failed to start")
    _, reports = release_and_collect(procs, "a DBOS workflow worker")
    firsts = [r["first_active"] for r in reports if r.get("first_active")]
    lasts = [r["last_active"] for r in reports if r.get("last_active")]
    if not firsts or not lasts:
        return float("nan"), 0
    return max(lasts) - min(firsts), sum(r["jobs"] for r in reports)


def run(system: str, target: str, shape: str, workers: int, *, width: int = 126, n: int = 1000) -> dict[str, Any]:
    """One case: the system database ``system`` (a SQLite path or a fresh PostgreSQL URL), the marks file
    ``target`` (created here). Returns ``{"seconds", "steps", "steps_per_s", "marks", "ok"}``."""
    from dbos import DBOSClient

    marks_file(target)
    _drive(system, target, 1)  # creates and migrates the system database, registers the queues, exits idle
    client = DBOSClient(system_database_url=peers._dbos_url(system))
    try:
        if shape == "dag":
            client.enqueue({"queue_name": TOP, "workflow_name": "wf_dag"}, width)
            steps = width + 2
        else:
            for _ in range(n):
                client.enqueue({"queue_name": TOP, "workflow_name": "wf_one"})
            steps = n
    finally:
        client.destroy()
    seconds, done = _drive(system, target, workers)
    found = marks(target)
    return {"seconds": seconds, "steps": done, "steps_per_s": done / seconds if done else float("nan"),
            "marks": found, "ok": done == steps and found == steps}


def worker(system: str, target: str) -> None:
    import uuid

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.ERROR)
    DBOS(config={"name": "fencepost-bench-wf", "system_database_url": peers._dbos_url(system), "log_level": "ERROR",
                 "run_admin_server": False,
                 "executor_id": f"wf-{os.getpid()}-{uuid.uuid4().hex[:6]}"})  # type: ignore[typeddict-unknown-key]

    # Retried when the target is busy: 4 processes x 100 slots can hold SQLite's one writer lock past the 30 s
    # busy timeout (seen on a loaded machine: 262 of 1,000 workflows ERROR without retries); fencepost's task
    # treats a busy target as transient too. A retry re-runs the whole step: its INSERT never committed.
    @DBOS.step(name="mark", retries_allowed=True, max_attempts=10, interval_seconds=0.1, backoff_rate=1.5,
               should_retry=lambda error: "database is locked" in str(error))
    def mark() -> None:
        conn = sqlite3.connect(target, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO marks (at) VALUES (1)")
            conn.execute("COMMIT")
        finally:
            conn.close()
        peers._done()

    @DBOS.workflow(name="wf_leaf")
    def wf_leaf() -> None:
        peers._started()
        mark()

    @DBOS.workflow(name="wf_one")
    def wf_one() -> None:
        peers._started()
        mark()

    @DBOS.workflow(name="wf_dag")
    def wf_dag(width: int) -> None:
        peers._started()
        mark()
        handles = [DBOS.enqueue_workflow(CHILD, wf_leaf) for _ in range(width)]
        for handle in handles:
            handle.get_result()
        mark()

    peers._ready_and_wait()
    DBOS.launch()
    for queue in (TOP, CHILD):
        DBOS.register_queue(queue, polling_interval_sec=peers.DBOS_POLLING_INTERVAL,
                            worker_concurrency=peers.DBOS_WORKER_CONCURRENCY)

    def empty() -> bool:
        return not DBOS.list_queued_workflows(queue_name=TOP) and not DBOS.list_queued_workflows(queue_name=CHILD)

    peers._stop_when_idle(empty)
    threading.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.wf_peers")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("system")
    w.add_argument("target")
    c = sub.add_parser("case", help="one case, its result as JSON")
    c.add_argument("system")
    c.add_argument("target")
    c.add_argument("shape", choices=["dag", "runs"])
    c.add_argument("workers", type=int)
    c.add_argument("--width", type=int, default=126)
    c.add_argument("--n", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.cmd == "worker":
        worker(args.system, args.target)
    else:
        started = time.time()
        print(json.dumps(run(args.system, args.target, args.shape, args.workers, width=args.width, n=args.n)
                         | {"wall": time.time() - started}))


if __name__ == "__main__":
    main()
