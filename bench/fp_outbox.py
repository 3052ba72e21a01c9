"""fencepost's outbox under load: enqueue, claim and complete N no-op commands; the raw commit rate.

Imports only the standard library, psycopg and fencepost (the smoke test runs it in the project venv).

Enqueue is one transaction per command, as a producer writes it (``store.transact`` with
``insert_command``). Processing starts when every command is enqueued and every worker process has opened
its store and said it is ready; it ends at the last completion any worker made. Workers are separate OS
processes (``python -m bench.fp_outbox worker``), each running the real ``fencepost.outbox.Worker`` with a
no-op ``FunctionHandler``, its heartbeat thread included.
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
from typing import Any

import psycopg

from bench.common import ROOT, release_and_collect, sqlite_path
from fencepost.core.ids import new_id
from fencepost.outbox import FunctionHandler, HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.context import CommandContext
from fencepost.store.base import Store
from fencepost.store.open import open_store
from fencepost.store.records import ClaimedCommand

KIND = "bench.noop"
DEFAULT_BATCH = 100
DEFAULT_LEASE = 30.0


def noop(ctx: CommandContext) -> None:
    return None


def migrated(url: str) -> Store:
    store = open_store(url)
    store.migrate()
    return store


def enqueue(store: Store, n: int, kind: str = KIND, payload: dict[str, Any] | None = None) -> float:
    """Insert ``n`` PENDING commands, one transaction each. Returns elapsed seconds."""
    body = payload if payload is not None else {"i": 0}
    ids = [new_id("cmd") for _ in range(n)]
    start = time.perf_counter()
    for command_id in ids:
        store.transact(lambda tx, c=command_id: tx.outbox.insert(command_id=c, kind=kind, payload=body),
                       name="outbox.enqueue")
    return time.perf_counter() - start


def enqueue_bulk(store: Store, n: int, kind: str = KIND, per_tx: int = 1000) -> None:
    """Insert ``n`` commands ``per_tx`` to a transaction (set-up only, not measured)."""
    left = n
    while left > 0:
        take = min(per_tx, left)
        ids = [new_id("cmd") for _ in range(take)]

        def unit(tx: Any, ids: list[str] = ids) -> None:
            for command_id in ids:
                tx.outbox.insert(command_id=command_id, kind=kind, payload={"i": 0})

        store.transact(unit)
        left -= take


class TimedWorker(Worker):
    """A ``Worker`` that remembers when its last batch completion committed (the end of useful work)."""

    last_active: float = 0.0

    def _complete(self, contexts: list[CommandContext],
                  claim_limit: int | None = None) -> tuple[list[bool], list[ClaimedCommand]]:
        outcome = super()._complete(contexts, claim_limit)
        if contexts:
            self.last_active = time.time()
        return outcome


def make_worker(store: Store, *, batch: int, lease: float, poll: float = 0.01,
                handler: Any = noop, kind: str = KIND, listen: bool = True) -> TimedWorker:
    registry = HandlerRegistry()
    registry.register(kind, FunctionHandler(handler))
    return TimedWorker(store, registry, WorkerConfig(poll_interval=poll, batch_size=batch, concurrency=batch,
                                                     lease_seconds=lease, listen=listen))


def worker_main(url: str, batch: int, lease: float, idle_polls: int) -> None:
    """Subprocess body: open the store, say ready, wait for go, work until idle, report."""
    store = open_store(url)
    store.require_schema()
    worker = make_worker(store, batch=batch, lease=lease)
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    started = time.time()
    stats = worker.run(max_idle_polls=idle_polls)
    print(json.dumps({"started": started, "last_active": worker.last_active, "delivered": stats.delivered,
                      "claimed": stats.claimed, "lost": stats.lost}), flush=True)
    store.close()


def spawn_workers(url: str, count: int, *, batch: int, lease: float, idle_polls: int = 30,
                  python: str | None = None) -> list[subprocess.Popen[str]]:
    procs = []
    for _ in range(count):
        procs.append(subprocess.Popen(
            [python or sys.executable, "-m", "bench.fp_outbox", "worker", url, "--batch", str(batch),
             "--lease", str(lease), "--idle-polls", str(idle_polls)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError("a benchmark worker failed to start")
    return procs


def process(url: str, workers: int, *, batch: int = DEFAULT_BATCH, lease: float = DEFAULT_LEASE) -> float:
    """Run ``workers`` worker processes over the enqueued commands. Returns seconds from go to last completion."""
    procs = spawn_workers(url, workers, batch=batch, lease=lease)
    go, reports = release_and_collect(procs, "a benchmark worker")
    return max(r["last_active"] for r in reports) - go


def process_in_process(store: Store, *, batch: int = DEFAULT_BATCH, lease: float = DEFAULT_LEASE) -> float:
    """One worker in a thread of this process (smoke test). Returns seconds to the last completion."""
    worker = make_worker(store, batch=batch, lease=lease)
    go = time.time()
    thread = threading.Thread(target=worker.run, kwargs={"max_idle_polls": 3})
    thread.start()
    thread.join(timeout=600)
    return worker.last_active - go


def verify(store: Store, n: int) -> dict[str, Any]:
    """Every command DELIVERED exactly once: one delivery, one claim and one deliver event each."""
    def unit(tx: Any) -> dict[str, Any]:
        rows = tx.execute_raw("SELECT status, delivery_count, count(*) FROM commands GROUP BY status, delivery_count")
        events = tx.execute_raw("SELECT event, count(*) FROM lease_events GROUP BY event")
        return {"commands": {f"{s}/{d}": int(c) for s, d, c in rows}, "events": {e: int(c) for e, c in events}}

    found = store.read(unit)
    ok = found["commands"] == {"DELIVERED/1": n} and found["events"] == {"claim": n, "deliver": n}
    return {"ok": ok, **found}


# ── raw commit rate ──

def raw_commit_rate(url: str, n: int) -> float:
    """Single-row INSERT transactions per second on the same database, same durability settings."""
    if url.startswith("sqlite"):
        path = sqlite_path(url) + ".raw"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        values = [new_id("cmd") for _ in range(n)]
        start = time.perf_counter()
        for v in values:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO raw (v) VALUES (?)", (v,))
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        conn.close()
        return n / elapsed
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("CREATE TABLE IF NOT EXISTS raw (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
        values = [new_id("cmd") for _ in range(n)]
        start = time.perf_counter()
        for v in values:
            pg.execute("INSERT INTO raw (v) VALUES (%s)", (v,))  # autocommit: one transaction each
        elapsed = time.perf_counter() - start
        pg.execute("DROP TABLE raw")
        return n / elapsed


@dataclass
class ThroughputResult:
    enqueue_per_s: float
    process_per_s: float
    raw_per_s: float
    verified: dict[str, Any]


def run_throughput(url: str, n: int, workers: int, *, batch: int = DEFAULT_BATCH,
                   in_process: bool = False, raw_n: int | None = None) -> ThroughputResult:
    """One repetition on a fresh database ``url``: raw commit rate, enqueue, process, verify."""
    raw = raw_commit_rate(url, raw_n or n)
    store = migrated(url)
    try:
        enq = enqueue(store, n)
        took = process_in_process(store, batch=batch) if in_process else process(url, workers, batch=batch)
        verified = verify(store, n)
    finally:
        store.close()
    return ThroughputResult(enqueue_per_s=n / enq, process_per_s=n / took, raw_per_s=raw, verified=verified)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.fp_outbox")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("url")
    w.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    w.add_argument("--lease", type=float, default=DEFAULT_LEASE)
    w.add_argument("--idle-polls", type=int, default=30)
    args = parser.parse_args(argv)
    if args.cmd == "worker":
        worker_main(args.url, args.batch, args.lease, args.idle_polls)


if __name__ == "__main__":
    main()
