"""Peer job queues on the same machine, same N, same run: Huey (SqliteHuey), Procrastinate, pgqueuer, DBOS.

Each peer enqueues no-op jobs one at a time (one transaction each, as fencepost's enqueue does) and that
rate is its enqueue figure; Huey enqueues all N that way, the slower peers time the first ENQUEUE_SAMPLE
and enqueue the rest of the N in bulk (not timed) to keep the run short. Then worker processes drain
the queue. Processing time runs from the go signal (workers started, connected and
waiting) to the last job completion any worker reports. Peers are imported only in this module and only
inside the benchmark virtualenv (bench/.venv); they are never fencepost dependencies.

Run a peer worker by hand: ``python -m bench.peer_worker worker <peer> <url-or-path>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from bench.common import ROOT, release_and_collect

JOBS = 0  # completions in this worker process
LAST = 0.0  # wall-clock time of the last completion in this process
QUIET_SECONDS = 0.5
ENQUEUE_SAMPLE = 1000  # slow peers: this many single enqueues are timed, the rest are enqueued in bulk
LOG = open(os.devnull, "w") if not os.environ.get("FENCEPOST_BENCH_VERBOSE") else None  # noqa: SIM115  # a worker stops after the queue stays empty this long


def _done() -> None:
    global JOBS, LAST
    JOBS += 1
    LAST = time.time()


FIRST = 0.0  # wall-clock time the first job started in this process (set only by the peers that record it)


def _started() -> None:
    global FIRST
    if not FIRST:
        FIRST = time.time()


def _report() -> None:
    print(json.dumps({"jobs": JOBS, "last_active": LAST, "first_active": FIRST}), flush=True)


def _ready_and_wait() -> None:
    global START
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    START = time.time()


@dataclass
class PeerResult:
    enqueue_per_s: float
    process_per_s: float
    processed: int


def _drive(peer: str, target: str, workers: int, n: int, extra: list[str] | None = None, *,
           from_first_job: bool = False) -> tuple[float, int]:
    """Start ``workers`` worker processes, release them together, wait; returns (seconds, jobs done).

    The time runs from the go signal, or with ``from_first_job`` from the first job any worker started (for
    a peer that launches after go, so that its start-up is not counted), to the last completion."""
    procs = [subprocess.Popen([sys.executable, "-m", "bench.peer_worker", "worker", peer, target, *(extra or [])],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=LOG, text=True)
             for _ in range(workers)]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            for p in procs:
                p.kill()
            raise RuntimeError(f"{peer} worker failed to start")
    go, reports = release_and_collect(procs, f"{peer} worker")
    done = sum(r["jobs"] for r in reports)
    if from_first_job:
        firsts = [r["first_active"] for r in reports if r.get("first_active")]
        go = min(firsts) if firsts else go
    return max(r["last_active"] for r in reports) - go, done


# ───────────────────────────── Huey ─────────────────────────────

def _huey(path: str) -> Any:
    from huey import SqliteHuey

    # WAL journal and synchronous=FULL (fsync=True), the durability fencepost's SQLite store runs with.
    huey = SqliteHuey("bench", filename=path, fsync=True, journal_mode="wal", results=False)

    @huey.task(name="noop")
    def noop() -> None:
        return None

    return huey, noop


def huey_run(path: str, n: int, workers: int) -> PeerResult:
    _, noop = _huey(path)
    start = time.perf_counter()
    for _ in range(n):
        noop()
    enq = time.perf_counter() - start
    took, done = _drive("huey", path, workers, n)
    return PeerResult(n / enq, n / took, done)


def huey_worker(path: str) -> None:
    from huey.signals import SIGNAL_COMPLETE

    huey, _ = _huey(path)
    logging.getLogger("huey").setLevel(logging.ERROR)

    @huey.signal(SIGNAL_COMPLETE)
    def complete(signal: Any, task: Any) -> None:
        _done()

    _ready_and_wait()
    consumer = huey.create_consumer(workers=1, worker_type="thread", initial_delay=0.01, backoff=1.0,
                                    max_delay=0.01, periodic=False, check_worker_health=False)
    _stop_when_idle(lambda: huey.pending_count() == 0)
    consumer.run()


def _stop_when_idle(empty: Any) -> None:
    """Report and exit this process once the queue stayed empty for QUIET_SECONDS after the last job."""
    def watch() -> None:
        while True:
            time.sleep(0.05)
            if empty() and time.time() - max(LAST, START) > QUIET_SECONDS:
                _report()
                os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


START = time.time()


# ──────────────────────────── Procrastinate ────────────────────────────

def _procrastinate(url: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="bench")
    def noop() -> None:
        _done()

    return app, noop


def procrastinate_run(url: str, n: int, workers: int) -> PeerResult:
    app, noop = _procrastinate(url)
    with app.open():
        app.schema_manager.apply_schema()
        sample = min(n, ENQUEUE_SAMPLE)
        start = time.perf_counter()
        for _ in range(sample):
            noop.defer()
        enq = time.perf_counter() - start
        for left in range(n - sample, 0, -1000):
            noop.batch_defer(*[{} for _ in range(min(1000, left))])
    took, done = _drive("procrastinate", url, workers, n)
    return PeerResult(sample / enq, n / took, done)


def procrastinate_worker(url: str) -> None:
    app, _ = _procrastinate(url)
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    _ready_and_wait()
    # wait=False: the worker stops by itself once no job is left.
    app.run_worker(queues=["bench"], concurrency=1, wait=False, install_signal_handlers=False)
    _report()


# ───────────────────────────── pgqueuer ─────────────────────────────

PGQ_BATCH = 10  # pgqueuer's own default batch size


async def _pgq_enqueue(url: str, n: int) -> float:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    sample = min(n, ENQUEUE_SAMPLE)
    start = time.perf_counter()
    for _ in range(sample):
        await queries.enqueue(["noop"], [None], [0])
    enq = time.perf_counter() - start
    for left in range(n - sample, 0, -1000):
        k = min(1000, left)
        await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
    await conn.close()
    return sample / enq


def pgqueuer_run(url: str, n: int, workers: int, batch: int = PGQ_BATCH) -> PeerResult:
    enq_rate = asyncio.run(_pgq_enqueue(url, n))
    took, done = _drive("pgqueuer", url, workers, n, ["--batch", str(batch)])
    return PeerResult(enq_rate, n / took, done)


async def _pgq_work(url: str, batch: int) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job: Any) -> None:
        _done()

    await asyncio.get_running_loop().run_in_executor(None, _ready_and_wait)
    await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
    await conn.close()


def pgqueuer_worker(url: str, batch: int) -> None:
    logging.getLogger("pgqueuer").setLevel(logging.ERROR)
    asyncio.run(_pgq_work(url, batch))
    _report()


# ──────────────────────────────── DBOS ────────────────────────────────

def _dbos_url(target: str) -> str:
    return target if target.startswith("postgresql") else f"sqlite:///{target}"


def dbos_run(target: str, n: int, workers: int) -> PeerResult:
    from dbos import DBOSClient

    # A first worker launch creates and migrates the system database; it is then released with nothing
    # to do, so every job below is enqueued by the client alone.
    _drive("dbos", target, 1, 0)
    import sqlalchemy

    client = DBOSClient(system_database_url=_dbos_url(target))
    options: Any = {"queue_name": "bench", "workflow_name": "noop"}
    sample = min(n, ENQUEUE_SAMPLE)
    start = time.perf_counter()
    for _ in range(sample):
        client.enqueue(options)
    enq = time.perf_counter() - start
    engine = sqlalchemy.create_engine(_dbos_url(target))
    for left in range(n - sample, 0, -1000):
        with engine.begin() as conn:
            for _ in range(min(1000, left)):
                client.enqueue_in_transaction(conn, options)
    engine.dispose()
    client.destroy()
    took, done = _drive("dbos", target, workers, n)
    return PeerResult(sample / enq, n / took, done)


def dbos_worker(target: str) -> None:
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.ERROR)
    DBOS(config={"name": "fencepost-bench", "system_database_url": _dbos_url(target), "log_level": "ERROR",
                 "run_admin_server": False})  # type: ignore[typeddict-unknown-key]

    @DBOS.workflow(name="noop")
    def noop() -> None:
        _done()

    DBOS.launch()
    _ready_and_wait()
    # Registering the queue starts this process dequeuing from it. Polling interval 10 ms (DBOS's default
    # is 1 s), the same as fencepost's benchmark workers.
    DBOS.register_queue("bench", polling_interval_sec=0.01)

    def empty() -> bool:
        rows = DBOS.list_queued_workflows(queue_name="bench")
        return not rows

    _stop_when_idle(empty)
    threading.Event().wait()


# ─────────────────────── DBOS: a workflow with one step ───────────────────────

#: Per-process dequeue limit of the step benchmark's DBOS queue (``worker_concurrency``, default 100, 0 for none;
#: ``FENCEPOST_BENCH_DBOS_WORKER_CONCURRENCY``). DBOS's docs ask for a unique ``executor_id`` per process when it
#: is set, which each worker below gets. 100 measured at least as fast as 10 or none here (N = 300, 1 worker).
DBOS_WORKER_CONCURRENCY = int(os.environ.get("FENCEPOST_BENCH_DBOS_WORKER_CONCURRENCY", "100")) or None
#: How often each DBOS worker polls its queue (DBOS's default is 1 s; fencepost's benchmark workers poll every
#: 10 ms, and every DBOS process polls by itself).
DBOS_POLLING_INTERVAL = 0.01


def dbos_step_run(target: str, n: int, workers: int) -> PeerResult:
    """``n`` DBOS workflows of one no-op step each, enqueued on queue ``bench-step`` by a ``DBOSClient`` (the
    first ENQUEUE_SAMPLE one at a time and timed, the rest in bulk), then run by ``workers`` DBOS processes."""
    from dbos import DBOSClient

    _drive("dbos-step", target, 1, 0)  # creates and migrates the system database, then exits idle
    import sqlalchemy

    client = DBOSClient(system_database_url=_dbos_url(target))
    options: Any = {"queue_name": "bench-step", "workflow_name": "noop_step"}
    sample = min(n, ENQUEUE_SAMPLE)
    start = time.perf_counter()
    for _ in range(sample):
        client.enqueue(options)
    enq = time.perf_counter() - start
    engine = sqlalchemy.create_engine(_dbos_url(target))
    for left in range(n - sample, 0, -1000):
        with engine.begin() as conn:
            for _ in range(min(1000, left)):
                client.enqueue_in_transaction(conn, options)
    engine.dispose()
    client.destroy()
    took, done = _drive("dbos-step", target, workers, n, from_first_job=True)
    return PeerResult(sample / enq, n / took, done)


def dbos_step_counts(target: str) -> dict[str, int]:
    """Workflows by status and step rows (``operation_outputs``) in the DBOS system database at ``target`` (a
    SQLite path or a PostgreSQL URL, as ``dbos_step_run`` takes), for the check."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(_dbos_url(target))
    schema = "dbos." if target.startswith("postgresql") else ""  # DBOS's schema on PostgreSQL
    try:
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.text(
                f"SELECT status, count(*) FROM {schema}workflow_status WHERE name = 'noop_step' GROUP BY status"))
            found = {f"workflows {s}": int(c) for s, c in rows}
            steps = conn.execute(sqlalchemy.text(
                f"SELECT count(*) FROM {schema}operation_outputs WHERE function_name = 'noop_one_step'")).scalar()
            found["step rows"] = int(steps or 0)
    finally:
        engine.dispose()
    return found


def dbos_step_worker(target: str) -> None:
    import uuid

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.ERROR)
    DBOS(config={"name": "fencepost-bench", "system_database_url": _dbos_url(target), "log_level": "ERROR",
                 "run_admin_server": False,
                 "executor_id": f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"})  # type: ignore[typeddict-unknown-key]

    @DBOS.step(name="noop_one_step")
    def noop_one_step() -> None:
        return None

    @DBOS.workflow(name="noop_step")
    def noop_step() -> None:
        _started()
        noop_one_step()
        _done()

    # Launch only after go: once the queue is registered in the system database (by the first, idle run) a
    # launched process dequeues at once, so launching before go would start work before the clock. Its
    # start-up is not counted instead: the time runs from the first workflow any process started.
    _ready_and_wait()
    DBOS.launch()
    DBOS.register_queue("bench-step", polling_interval_sec=DBOS_POLLING_INTERVAL,
                        worker_concurrency=DBOS_WORKER_CONCURRENCY)

    def empty() -> bool:
        return not DBOS.list_queued_workflows(queue_name="bench-step")

    _stop_when_idle(empty)
    threading.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.peers")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("peer", choices=["huey", "procrastinate", "pgqueuer", "dbos", "dbos-step"])
    w.add_argument("target")
    w.add_argument("--batch", type=int, default=PGQ_BATCH)
    args = parser.parse_args(argv)
    if args.peer == "huey":
        huey_worker(args.target)
    elif args.peer == "procrastinate":
        procrastinate_worker(args.target)
    elif args.peer == "pgqueuer":
        pgqueuer_worker(args.target, args.batch)
    elif args.peer == "dbos-step":
        dbos_step_worker(args.target)
    else:
        dbos_worker(args.target)


if __name__ == "__main__":
    main()
