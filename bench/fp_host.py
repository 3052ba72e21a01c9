"""The action host under load: N dispatched invocations of an action with one no-op adapter step.

Imports only the standard library, pydantic and fencepost (the smoke test runs it in the project venv).

Submission is ``Host.submit(..., mode=Dispatch())``, one call per invocation as an application makes it (its
transaction writes the invocation and its ``host.invoke`` command; the call then reads the invocation back).
Processing starts when every invocation is submitted and every worker process has opened its store and said it
is ready; it ends at the last ``handle`` any worker returned from (the handler's finalization commits the
verdict and finishes the command in one transaction). Workers are separate OS processes (``python -m
bench.fp_host worker``), each running the real ``fencepost.outbox.Worker`` with the host registered on its
``HandlerRegistry`` (``Host.register``), heartbeat thread included.

``count_commits`` runs a small in-process submission and worker and counts every transaction the store
opens, by name and by read/write (the commits per invocation of the host path), and the worker's named
statements.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from bench.common import ROOT, release_and_collect
from fencepost.host import Action, AdapterCall, AdapterStep, Dispatch, Host, HostConfig, Succeeded
from fencepost.host.handler import kind_of
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.store.base import Store
from fencepost.store.group_commit import GroupCommit
from fencepost.store.open import open_store
from fencepost.store.sql.unit import SqlUnitOfWork

ACTION = "bench.noop"
DEFAULT_BATCH = 100
#: Execution slots per worker process. Every invocation runs five transactions of its own on a slot thread, so
#: more slots mostly queue on the GIL and the write lock (SQLite) or the event sequence row (PostgreSQL). In a
#: trial of 1, 10 and 100 here, 10 did best on PostgreSQL with one worker, 1 on SQLite; one setting for both.
DEFAULT_CONCURRENCY = 10
DEFAULT_LEASE = 30.0


class NoopParams(BaseModel):
    i: int


class NoopAdapter:
    """An adapter whose ``execute`` returns ``Succeeded({})`` at once: the provider costs nothing."""

    type = "noop"
    vendor = "bench"

    def execute(self, call: AdapterCall) -> object:
        return Succeeded({})


def noop_handler(ctx: Any, params: NoopParams) -> None:
    return None


def make_host(store: Store) -> Host:
    """The benchmark's host: one action, ``bench.noop`` v1, with one step ``noop`` on the no-op adapter."""
    action = Action(id=ACTION, version=1, params=NoopParams, handler=noop_handler,
                    steps=(AdapterStep(name="noop", adapter="noop", operation="noop"),))
    return Host(store, actions=[action], adapters=[NoopAdapter()], config=HostConfig(lease_seconds=DEFAULT_LEASE))


def migrated(url: str) -> Store:
    store = open_store(url)
    store.migrate()
    return store


def submit(store: Store, n: int, *, start: int = 0) -> float:
    """Submit ``n`` dispatched invocations, one ``Host.submit`` each. Returns elapsed seconds."""
    host = make_host(store)
    began = time.perf_counter()
    for i in range(start, start + n):
        host.submit(ACTION, {"i": i}, actor="bench", idempotency_key=f"k{i}", mode=Dispatch())
    return time.perf_counter() - began


class TimedWorker(Worker):
    """A ``Worker`` serving the host that remembers when its last ``host.invoke`` handler returned."""

    last_active: float = 0.0


def make_worker(store: Store, *, batch: int, concurrency: int, lease: float, poll: float = 0.01) -> TimedWorker:
    """A worker with ``make_host(store)`` registered (``Host.register``); its handler is timed, not changed."""
    registry = HandlerRegistry()
    make_host(store).register(registry)
    worker = TimedWorker(store, registry, WorkerConfig(poll_interval=poll, batch_size=batch,
                                                       concurrency=concurrency, lease_seconds=lease))
    handler = registry.get(kind_of(ACTION, 1))
    handle = handler.handle

    def timed(ctx: Any) -> None:
        try:
            handle(ctx)
        finally:
            worker.last_active = max(worker.last_active, time.time())

    handler.handle = timed  # type: ignore[method-assign]
    return worker


def worker_main(url: str, batch: int, concurrency: int, lease: float, idle_polls: int) -> None:
    """Subprocess body: open the store, say ready, wait for go, work until idle, report."""
    store = open_store(url)
    store.require_schema()
    worker = make_worker(store, batch=batch, concurrency=concurrency, lease=lease)
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    stats = worker.run(max_idle_polls=idle_polls)
    print(json.dumps({"last_active": worker.last_active, "delivered": stats.delivered, "claimed": stats.claimed,
                      "failed": stats.failed, "lost": stats.lost}), flush=True)
    store.close()


def process(url: str, workers: int, *, batch: int = DEFAULT_BATCH, concurrency: int = DEFAULT_CONCURRENCY,
            lease: float = DEFAULT_LEASE, idle_polls: int = 30) -> float:
    """Run ``workers`` worker processes over the submitted invocations. Returns seconds from go to the last
    handler return."""
    procs = [subprocess.Popen([sys.executable, "-m", "bench.fp_host", "worker", url, "--batch", str(batch),
                               "--concurrency", str(concurrency), "--lease", str(lease),
                               "--idle-polls", str(idle_polls)],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(workers)]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            for p in procs:
                p.kill()
            raise RuntimeError("a host benchmark worker failed to start")
    go, reports = release_and_collect(procs, "a host benchmark worker")
    return float(max(r["last_active"] for r in reports)) - go


def process_in_process(store: Store, *, batch: int = DEFAULT_BATCH, concurrency: int = DEFAULT_CONCURRENCY,
                       lease: float = DEFAULT_LEASE) -> float:
    """One worker in a thread of this process (smoke test, commit count). Returns seconds to the last handler."""
    worker = make_worker(store, batch=batch, concurrency=concurrency, lease=lease)
    go = time.time()
    thread = threading.Thread(target=worker.run, kwargs={"max_idle_polls": 3})
    thread.start()
    thread.join(timeout=600)
    return float(worker.last_active - go)


def verify(store: Store, n: int) -> dict[str, Any]:
    """Every invocation ``succeeded`` with ``attempt_count`` 1 (its command's ``delivery_count``), its command
    DELIVERED, and exactly one adapter row, ``succeeded``."""
    def unit(tx: Any) -> dict[str, Any]:
        rows = tx.execute_raw(
            "SELECT i.status, c.status, c.delivery_count, "
            "(SELECT count(*) FROM adapter_invocations a WHERE a.invocation_id = i.id), "
            "(SELECT count(*) FROM adapter_invocations a WHERE a.invocation_id = i.id AND a.status = 'succeeded'), "
            "count(*) FROM invocations i JOIN commands c ON c.id = i.id GROUP BY 1, 2, 3, 4, 5")
        return {"invocations": {f"{s}/{cs}/attempt {d}/rows {r}/succeeded rows {ok}": int(k)
                                for s, cs, d, r, ok, k in rows}}

    found = store.read(unit)
    ok = found["invocations"] == {"succeeded/DELIVERED/attempt 1/rows 1/succeeded rows 1": n}
    return {"ok": ok, **found}


@dataclass
class HostResult:
    enqueue_per_s: float
    process_per_s: float
    verified: dict[str, Any]


def run_host(url: str, n: int, workers: int, *, batch: int = DEFAULT_BATCH, concurrency: int = DEFAULT_CONCURRENCY,
             in_process: bool = False) -> HostResult:
    """One repetition on a fresh database ``url``: submit, process, verify."""
    store = migrated(url)
    try:
        took_submit = submit(store, n)
        took = (process_in_process(store, batch=batch, concurrency=concurrency) if in_process
                else process(url, workers, batch=batch, concurrency=concurrency))
        verified = verify(store, n)
    finally:
        store.close()
    return HostResult(enqueue_per_s=n / took_submit, process_per_s=n / took, verified=verified)


# ── commits per invocation ──

@dataclass
class Counts:
    """What ``counting`` saw: ``commits`` by ``(name, write)`` (a group commit's shared transaction is
    ``"(group)"``, a transaction without a name ``"(unnamed)"``), ``units`` of work by name (a unit alone in its
    transaction and a unit inside a group each count once, so ``units`` is what the code asked for and
    ``commits`` what the store paid), and ``statements`` by name."""

    commits: Counter[tuple[str, bool]]
    units: Counter[str]
    statements: Counter[str]


@contextmanager
def counting(store: Store) -> Iterator[Counts]:
    """Count every transaction ``store`` opens (its ``transaction`` method, which ``transact``, ``read`` and
    ``fenced`` all go through), keyed by ``(name, write)``, every unit of work by name (units a group commit
    writes in one shared transaction each count once), and every named statement a unit of work runs
    (``SqlUnitOfWork.run``). ``SqlUnitOfWork.run`` and ``GroupCommit._write`` are patched for the duration: only
    one store may be counted at a time. A unit retried on busy counts each try in ``commits`` and
    ``statements``."""
    counts = Counts(Counter(), Counter(), Counter())
    original = store.transaction
    original_run = SqlUnitOfWork.run
    original_write = GroupCommit._write
    lock = threading.Lock()
    local = threading.local()

    def transaction(*, write: bool = True, name: str | None = None) -> Any:
        grouped = getattr(local, "grouped", False) and name is None
        with lock:
            counts.commits[("(group)" if grouped else name or "(unnamed)", write)] += 1
            if write and not grouped:
                counts.units[name or "(unnamed)"] += 1
        return original(write=write, name=name)

    def run(self: SqlUnitOfWork, name: str, params: Any) -> Any:
        with lock:
            counts.statements[name] += 1
        return original_run(self, name, params)

    def write_group(self: GroupCommit, group: list[Any]) -> None:
        if len(group) == 1:  # alone: its own named transaction, counted by ``transaction``
            original_write(self, group)
            return
        with lock:
            counts.units.update(unit.name or "(unnamed)" for unit in group)
        local.grouped = True
        try:
            original_write(self, group)
        finally:
            local.grouped = False

    store.transaction = transaction  # type: ignore[method-assign]
    SqlUnitOfWork.run = run  # type: ignore[method-assign]
    GroupCommit._write = write_group  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        SqlUnitOfWork.run = original_run  # type: ignore[method-assign]
        GroupCommit._write = original_write  # type: ignore[method-assign]
        del store.transaction  # back to the class's method


def count_commits(url: str, n: int = 100, *, batch: int = DEFAULT_BATCH,
                  concurrency: int = DEFAULT_CONCURRENCY) -> dict[str, Any]:
    """Submit ``n`` invocations and run one in-process worker over them, counting transactions.

    Returns:
        ``{"submit": {name: count}, "worker": {name: count}, "worker_units": {name: count}, "reads": {...},
        "per_invocation": {...}, "worker_statements": {name: count}, "verified": ...}``: write transactions
        (commits) by name for each phase (a group commit's shared one is ``"(group)"``), the worker's units of
        write work by name (one per unit, grouped or not), read transactions, the worker's named statements
        (BEGIN, COMMIT and the server clock read not included), and per invocation the commits (submit, worker,
        total), the worker's units and its statements.
    """
    store = migrated(url)
    try:
        with counting(store) as at_submit:
            submit(store, n)
        with counting(store) as at_worker:
            process_in_process(store, batch=batch, concurrency=concurrency)
        verified = verify(store, n)
    finally:
        store.close()

    def writes(counts: Counts) -> dict[str, int]:
        return {name: c for (name, write), c in sorted(counts.commits.items()) if write}

    def reads(counts: Counts) -> int:
        return sum(c for (_, write), c in counts.commits.items() if not write)

    w_submit, w_worker = writes(at_submit), writes(at_worker)
    units = dict(sorted(at_worker.units.items()))
    statements = dict(at_worker.statements.most_common())
    return {"n": n, "submit": w_submit, "worker": w_worker, "worker_units": units,
            "reads": {"submit": reads(at_submit), "worker": reads(at_worker)},
            "per_invocation": {"submit": sum(w_submit.values()) / n, "worker": sum(w_worker.values()) / n,
                               "total": (sum(w_submit.values()) + sum(w_worker.values())) / n,
                               "worker_units": sum(units.values()) / n,
                               "worker_statements": sum(statements.values()) / n},
            "worker_statements": statements, "verified": verified}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.fp_host")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("url")
    w.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    w.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    w.add_argument("--lease", type=float, default=DEFAULT_LEASE)
    w.add_argument("--idle-polls", type=int, default=30)
    c = sub.add_parser("commits", help="count the transactions of the host path (prints JSON)")
    c.add_argument("url")
    c.add_argument("--n", type=int, default=100)
    args = parser.parse_args(argv)
    if args.cmd == "worker":
        worker_main(args.url, args.batch, args.concurrency, args.lease, args.idle_polls)
    else:
        print(json.dumps(count_commits(args.url, args.n), indent=2))


if __name__ == "__main__":
    main()
