"""Workflow execution under load (issue 18): steps per second of a 128-step fan-out DAG and of 1,000 one-step Runs.

Imports only the standard library and fencepost (the smoke test runs it in the project venv); the DBOS peer of
the same shapes lives in ``bench.wf_peers``.

Setup, per case, on a fresh control store (SQLite WAL/FULL file or a fresh PostgreSQL database), through the
real services as an operator would: a package with one migration (``marks``), one task (``mark``: a single
``INSERT INTO marks``) and two workflows, ``dag`` (``root`` -> ``f001`` .. ``f126`` in parallel -> ``join``) and
``one`` (one step), is rehearsed twice (worker in this process), published, installed, and delivered to one
SQLite target file ``t1``. Then the Runs are admitted (one ``WorkflowService.plan`` + ``admit`` each), NOT timed.

Timed: ``workers`` worker processes (``python -m bench.workflows worker``), each running exactly what
``fencepost worker`` builds (``fencepost.cli.worker_cmd.build_worker``: the workflow task action and the coordinator
sweep) with poll interval 10 ms, batch 10, ``CONCURRENCY`` slots and LISTEN off, open their store and say ready;
the clock starts when all are released together (after every Run was admitted) and stops when this process
sees no Run ``running`` (it polls every 10 ms). Steps per second = steps / that time.

Commits: every worker counts the transactions its store opens (``Store.transaction``, through which ``transact``,
``read`` and ``fenced`` all go; ``bench.fp_host.counting``), by name and read/write, from go to stop, idle claims
and sweeps included. A write transaction that ends in a conflict is counted too. Each step also commits one
transaction on the target (its task with its ledger row), which is not a control-store transaction and is
reported separately. On PostgreSQL the ``pg_stat_database.xact_commit`` delta of the control database over the
timed window (read-only transactions included; this process's own polls subtracted) is reported as well.

Verified: every Run ``succeeded``, every StepRun ``succeeded``, and the target's ``marks`` holds exactly one row
per step (its ledger ``fencepost_workflow_tasks`` one row per step).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, release_and_collect
from bench.delivery import release
from fencepost.cli.worker_cmd import build_worker
from fencepost.delivery.service import DeliveryService
from fencepost.delivery.targets import TargetService
from fencepost.outbox.worker import WorkerConfig
from fencepost.store.base import Store
from fencepost.store.open import open_store
from fencepost.workflows.service import WorkflowService

PACKAGE = "wfbench"
TASK_SQL = "INSERT INTO marks (at) VALUES (1);\n"
MIGRATION = "CREATE TABLE marks (id INTEGER PRIMARY KEY, at INTEGER NOT NULL);\n"
DAG_STEPS = 128
RUNS = 1000
#: Execution slots per worker process: a step's task is short, the fan-out is 126 wide.
CONCURRENCY = 10
POLL = 0.01
#: The transactions that do a step's work (the advance rounds and the task invocation's host protocol); the
#: rest are the workers' claims (empty ones included: they depend on timing) and their registration. A group
#: commit's shared transaction (``"(group)"``) holds the workers' execution units, so it counts as step work too.
STEP_WORK = ("workflow.", "host.")


def dag(size: int) -> list[tuple[str, list[str]]]:
    """``root`` -> ``size - 2`` parallel steps -> ``join``: ``[(key, needs)]``."""
    middle = [f"f{i:03d}" for i in range(1, size - 1)]
    return [("root", []), *((k, ["root"]) for k in middle), ("join", middle)]


def write_package(into: Path, dag_size: int) -> Path:
    pkg = into / PACKAGE
    (pkg / "migrations").mkdir(parents=True)
    (pkg / "tasks").mkdir()
    (pkg / "migrations" / "0001_marks.up.sql").write_text(MIGRATION, encoding="utf-8")
    (pkg / "tasks" / "mark.sql").write_text(TASK_SQL, encoding="utf-8")

    def steps(shape: list[tuple[str, list[str]]]) -> str:
        return ", ".join('{{ key = "{}", task = "mark", needs = [{}] }}'.format(k, ", ".join(f'"{n}"' for n in needs))
                         for k, needs in shape)

    (pkg / "fencepost-package.toml").write_text(
        f'[package]\nname = "{PACKAGE}"\nversion = "1.0.0"\n'
        '[[tasks]]\nid = "mark"\nsource = "tasks/mark.sql"\n'
        f'[[workflows]]\nid = "dag"\nsteps = [{steps(dag(dag_size))}]\n'
        f'[[workflows]]\nid = "one"\nsteps = [{steps([("only", [])])}]\n', encoding="utf-8")
    return pkg


def _drain(store: Store, work: Path) -> None:
    build_worker(store, work, WorkerConfig(poll_interval=0.02, lease_seconds=30, listen=False)).run(max_idle_polls=2)


def setup(store: Store, scratch: Path, dag_size: int) -> Path:
    """Release, install and deliver the package to target ``t1`` (a fresh SQLite file). Returns its path."""
    work = scratch / "setup"
    release(store, write_package(scratch, dag_size), work)
    target = scratch / "t1.db"
    sqlite3.connect(target).close()
    TargetService(store).add("t1", f"sqlite://{target}", {})
    deliveries = DeliveryService(store)
    (_, view), = deliveries.submit(PACKAGE, target="t1").deliveries
    _drain(store, work)
    done = deliveries.host.get(view.id)
    if str(done.status) != "succeeded":
        raise RuntimeError(f"the workflow benchmark's delivery ended {done.status}: {done.error}")
    return target


def admit(store: Store, workflow: str, runs: int) -> list[str]:
    service = WorkflowService(store)
    return [service.admit(service.plan(PACKAGE, workflow, plan_id=f"{workflow}-{i}", target="t1")).run_id
            for i in range(runs)]


RUNNING = "SELECT count(*) FROM workflow_runs WHERE status = 'running'"


class _Poller:
    """Counts the Runs still ``running``: through the store on SQLite; on PostgreSQL on one plain autocommit
    connection, so that each poll is exactly one transaction in ``xact_commit`` (subtracted from the delta)."""

    def __init__(self, store: Store, url: str) -> None:
        self.store, self.polls, self.conn = store, 0, None
        if url.startswith("postgresql"):
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)

    def running(self) -> int:
        self.polls += 1
        if self.conn is not None:
            row = self.conn.execute(RUNNING).fetchone()
            assert row is not None
            return int(row[0])
        return int(self.store.read(lambda tx: tx.execute_raw(RUNNING))[0][0])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _xact_commit(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
        assert row is not None
        return int(row[0])


def _settle_stats() -> None:
    """PostgreSQL 15+ publishes a backend's statistics lazily, at the latest when it exits; the backends this
    process closed before reading ``xact_commit`` get a moment to do so."""
    time.sleep(0.5)


def worker_main(url: str, work: str, concurrency: int) -> None:
    """Subprocess body: open the store, build the worker, say ready, wait for ``go``, work until ``stop``, report
    the transactions counted in between."""
    from bench.fp_host import counting

    store = open_store(url)
    store.require_schema()
    worker = build_worker(store, Path(work), WorkerConfig(poll_interval=POLL, batch_size=10,
                                                          concurrency=concurrency, lease_seconds=30, listen=False))
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    with counting(store) as counts:
        thread = threading.Thread(target=worker.run)
        thread.start()
        sys.stdin.readline()  # "stop"
        worker.request_stop(5.0)
        thread.join(timeout=60)
    writes: dict[str, int] = {}
    reads = 0
    for (name, write), count in counts.commits.items():
        if write:
            writes[name] = writes.get(name, 0) + count
        else:
            reads += count
    print(json.dumps({"writes": writes, "units": dict(counts.units), "reads": reads}), flush=True)
    store.close()


@dataclass
class WorkflowResult:
    """One case: steps per second, transactions per step, the checks."""

    shape: str
    workers: int
    steps: int
    seconds: float
    steps_per_s: float
    writes_per_step: float
    reads_per_step: float
    writes: dict[str, int]
    units: dict[str, int]
    work_writes_per_step: float
    xact_commit_per_step: float | None
    verified: dict[str, Any]


def _verify(store: Store, target: Path, steps: int) -> dict[str, Any]:
    def unit(tx: Any) -> dict[str, Any]:
        runs = dict(tx.execute_raw("SELECT status, count(*) FROM workflow_runs GROUP BY status"))
        step_runs = dict(tx.execute_raw("SELECT status, count(*) FROM workflow_step_runs GROUP BY status"))
        return {"runs": {str(k): int(v) for k, v in runs.items()},
                "step_runs": {str(k): int(v) for k, v in step_runs.items()}}

    found = store.read(unit)
    with sqlite3.connect(target) as conn:
        found["marks"] = int(conn.execute("SELECT count(*) FROM marks").fetchone()[0])
        found["ledger"] = int(conn.execute("SELECT count(*) FROM fencepost_workflow_tasks").fetchone()[0])
    found["ok"] = (set(found["runs"]) == {"succeeded"} and found["step_runs"] == {"succeeded": steps}
                   and found["marks"] == steps and found["ledger"] == steps)
    return found


def run_case(url: str, scratch: Path, shape: str, workers: int, *, dag_size: int = DAG_STEPS, runs: int = RUNS,
             concurrency: int = CONCURRENCY) -> WorkflowResult:
    """One case on a fresh control store ``url``: setup, admission (not timed), ``workers`` worker processes
    released together, the clock to the last Run settled, the counts and the checks.

    Args:
        shape: ``"dag"`` (one Run of ``dag_size`` steps) or ``"runs"`` (``runs`` one-step Runs).
    Raises:
        RuntimeError: a worker did not start or the Runs did not settle within 30 minutes.
    """
    store = open_store(url, create=True)
    store.migrate()
    try:
        target = setup(store, scratch, dag_size)
        admitted = admit(store, "dag", 1) if shape == "dag" else admit(store, "one", runs)
    finally:
        store.close()  # its backends end here, so none of its transactions lands in the timed window's count
    steps = dag_size if shape == "dag" else runs
    pg = url.startswith("postgresql")
    store = open_store(url)
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "bench.workflows", "worker", url, str(scratch / f"w{i}"),
                                   "--concurrency", str(concurrency)], cwd=ROOT, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for i in range(workers)]
        poller = _Poller(store, url)
        try:
            for proc in procs:
                assert proc.stdout is not None
                line = proc.stdout.readline()
                if not line or not json.loads(line).get("ready"):
                    raise RuntimeError("a workflow benchmark worker failed to start")
            if pg:
                _settle_stats()
                before = _xact_commit(url)
            go = time.perf_counter()
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            while poller.running():
                if time.perf_counter() - go > 1800:
                    raise RuntimeError(f"{len(admitted)} Runs did not settle within 30 minutes")
                time.sleep(POLL)
            seconds = time.perf_counter() - go
            _, reports = release_and_collect(procs, "a workflow benchmark worker")  # "stop", then the counts
            poller.close()
            xact = None
            if pg:
                _settle_stats()
                # minus this process's polls and the `before` read's own transaction
                xact = (_xact_commit(url) - before - poller.polls - 1) / steps
        finally:
            poller.close()
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=30)
        writes: dict[str, int] = {}
        units: dict[str, int] = {}
        for r in reports:
            for name, count in r["writes"].items():
                writes[name] = writes.get(name, 0) + count
            for name, count in r["units"].items():
                units[name] = units.get(name, 0) + count
        reads = sum(r["reads"] for r in reports)
        verified = _verify(store, target, steps)
    finally:
        store.close()
    # a group commit's shared transaction writes units of step work (the workers' executions)
    work = sum(c for name, c in writes.items() if name.startswith(STEP_WORK) or name == "(group)")
    return WorkflowResult(shape, workers, steps, seconds, steps / seconds, sum(writes.values()) / steps,
                          reads / steps, dict(sorted(writes.items())), dict(sorted(units.items())), work / steps,
                          xact, verified)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.workflows")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("url")
    w.add_argument("work")
    w.add_argument("--concurrency", type=int, default=CONCURRENCY)
    c = sub.add_parser("case", help="one case, its result as JSON")
    c.add_argument("url")
    c.add_argument("scratch")
    c.add_argument("shape", choices=["dag", "runs"])
    c.add_argument("workers", type=int)
    c.add_argument("--dag-size", type=int, default=DAG_STEPS)
    c.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    if args.cmd == "worker":
        worker_main(args.url, args.work, args.concurrency)
    else:
        got = run_case(args.url, Path(args.scratch), args.shape, args.workers, dag_size=args.dag_size,
                       runs=args.runs)
        print(json.dumps(got.__dict__, indent=2))


if __name__ == "__main__":
    main()
