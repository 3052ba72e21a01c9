"""A process that submits or works several invocations of ``shop.charge`` at once, for the group-commit crash
windows (``test_group_commit_windows``; ADR 0079).

Usage: ``python group_subject.py URL LEDGER_DIR submit|work IDEMPOTENT(0|1) COUNT``.

``submit`` dispatches COUNT invocations (keys ``order-0`` ...). ``work`` runs one worker with COUNT execution
slots until every invocation has a verdict, then prints ``{id: status}`` as JSON. The provider is
``host_subject.DiskProvider`` (its ground truth on disk survives the SIGKILL), behind a barrier: the first COUNT
calls of this process wait for each other, so that the slots reach their checkpoints together and their units
share commits. ``FENCEPOST_CRASHPOINT`` kills the process at the armed point. Before each group is written, the
names of its units are appended (and fsynced) to ``LEDGER_DIR/groups`` as a JSON list, one line per group, so
that the test knows which units the killed COMMIT held.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from host_subject import DiskProvider, Params, handler

from fencepost.host import Action, AdapterCall, AdapterStep, Host, HostConfig, RetryPolicy
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.worker import Worker, WorkerConfig
from fencepost.store import open_store

LEASE_SECONDS = 1.0


class TogetherProvider(DiskProvider):
    """``DiskProvider`` whose first ``count`` calls in this process return together (a barrier)."""

    def __init__(self, root: Path, count: int) -> None:
        super().__init__(root)
        self.barrier = threading.Barrier(count, timeout=10)
        self.calls = 0
        self.lock = threading.Lock()

    def execute(self, call: AdapterCall) -> object:
        reply = super().execute(call)
        with self.lock:
            self.calls += 1
            waits = self.calls <= self.barrier.parties
        if waits:  # fewer calls than slots (a recovery run) break the barrier after its timeout: go on
            with contextlib.suppress(threading.BrokenBarrierError):
                self.barrier.wait()
        return reply


def log_groups(committer: Any, path: Path) -> None:
    """Record each group's unit names in ``path`` before it is written (durably: the process may die next)."""
    write = committer._write

    def logged(group: list[Any]) -> None:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps([unit.name for unit in group]) + "\n")
            out.flush()
            os.fsync(out.fileno())
        write(group)

    committer._write = logged


def main(url: str, ledger: str, mode: str, idempotent: str, count: str) -> int:
    store = open_store(url, create=False)
    n = int(count)
    action = Action(id="shop.charge", version=1, params=Params, handler=handler, idempotent=idempotent == "1",
                    steps=(AdapterStep(name="charge", adapter="pay", operation="create_charge",
                                       retry=RetryPolicy(max_attempts=1, initial=timedelta(0))),))
    host = Host(store, actions=[action], adapters=[TogetherProvider(Path(ledger), n)],
                config=HostConfig(lease_seconds=LEASE_SECONDS))
    if mode == "submit":
        for i in range(n):
            host.submit(action.id, {"order_id": f"o-{i}", "amount_cents": 100 + i, "behaviour": "ok"},
                        actor="user:1", idempotency_key=f"order-{i}")
        return 0
    log_groups(store.group_commit, Path(ledger) / "groups")
    registry = HandlerRegistry()
    host.register(registry)
    worker = Worker(store, registry, WorkerConfig(poll_interval=0.05, lease_seconds=LEASE_SECONDS, grace_seconds=0,
                                                  batch_size=n, concurrency=n, worker_id=f"group-{os.getpid()}"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        worker.run_once()
        views = host.list()
        if len(views) == n and all(v.status.terminal for v in views):
            print(json.dumps({v.id: str(v.status) for v in views}))
            return 0
        time.sleep(0.1)
    print(json.dumps({"error": "no verdicts within 60 s"}))
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
