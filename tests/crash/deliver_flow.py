"""Crash windows of ``outbox.deliver``: the worker's batched DELIVERED finish.

Three commands of kind ``crash.echo`` are enqueued in one transaction; a real worker process
(``echo_worker.py``: the real ``fencepost.outbox.Worker``, batch size 3, whose handler only records that it
ran) claims all three, runs the handler for each and finishes the batch in one ``outbox.deliver``
transaction, where it is SIGKILLed (``FENCEPOST_CRASHPOINT``). ``run_deliver_flow`` then checks:

1. the worker died of SIGKILL;
2. right after the crash, ``fencepost audit``'s checks are clean and the batch is whole: before COMMIT all
   three are PROCESSING under delivery 1 with no ``deliver`` event (nothing persisted, though each handler
   ran); after COMMIT all three are DELIVERED with one ``deliver`` event each (everything persisted);
3. recovery: before COMMIT a fresh worker takes the three over once their leases expire (delivery 2, each
   handler runs again: execution is at-least-once); after COMMIT a fresh worker given more than a lease
   duration finds nothing to do and touches nothing;
4. afterwards: DELIVERED with one claim or takeover per delivery and exactly one terminal event each, the
   predicted delivery count, ``fencepost audit`` (the CLI) exits 0, and the outcome equals the crash-free run's.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from crash_harness import (
    LEASE_SECONDS,
    CrashDB,
    assert_cli_audit_clean,
    assert_sound,
    claim_count,
    terminal_events,
    wait_until,
)

from fencepost.core.statuses import CommandStatus
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import CommandRecord
from helpers.processes import Process, kill_all, start

ECHO_WORKER = Path(__file__).with_name("echo_worker.py")
KIND = "crash.echo"
POLL_SECONDS = 0.05  # echo_worker.POLL_SECONDS
COMMANDS = ("echo-1", "echo-2", "echo-3")
WINDOWS: tuple[str, ...] = ("outbox.deliver:before-commit", "outbox.deliver:after-commit")


class EchoWorkers:
    """Starts ``echo_worker.py`` processes on one database and SIGKILLs (by pid) any left running."""

    def __init__(self, db: CrashDB) -> None:
        self.db = db
        self.executions = db.root / "executions.jsonl"
        self.started: list[Process] = []

    def start(self, name: str, *, crash: str | None = None, batch: int = len(COMMANDS)) -> Process:
        """A worker process claiming ``batch`` commands at a time (and running as many at once)."""
        worker_id = f"{name}-{len(self.started)}"
        args = [self.db.url, worker_id, str(batch), f"{LEASE_SECONDS:g}", str(self.executions)]
        worker = start(args, name=name, stdout_path=self.db.root / f"echo-{len(self.started)}-{name}.log",
                       cwd=self.db.root, crash=crash, argv_prefix=[sys.executable, str(ECHO_WORKER)],
                       worker_id=worker_id, started_event="worker_started")
        self.started.append(worker)
        return worker

    def ran(self) -> list[tuple[str, int]]:
        """Every handler execution so far, ``(command id, delivery)``, sorted."""
        if not self.executions.exists():
            return []
        lines = self.executions.read_text(encoding="utf-8").splitlines()
        return sorted((str(e["command"]), int(e["delivery"])) for e in map(json.loads, lines))

    def kill_all(self) -> None:
        kill_all(self.started)


def commands(db: CrashDB) -> list[CommandRecord]:
    def unit(tx: UnitOfWork) -> list[CommandRecord]:
        found = [tx.outbox.get(command_id) for command_id in COMMANDS]
        assert all(c is not None for c in found), found
        return [c for c in found if c is not None]

    return db.store.read(unit)


def enqueue(db: CrashDB) -> None:
    """The three commands, due now, in one transaction."""
    def unit(tx: UnitOfWork) -> None:
        for command_id in COMMANDS:
            tx.outbox.insert(command_id=command_id, kind=KIND, payload={"n": command_id})

    db.store.transact(unit)


def run_deliver_flow(db: CrashDB, point: str | None) -> tuple[Any, ...]:
    """Run the flow, crashing at ``point`` when given; return the converged outcome (per command: status,
    terminal events, error), comparable with the crash-free run's."""
    enqueue(db)
    workers = EchoWorkers(db)
    try:
        deliveries = _run(db, workers, point)
    finally:
        workers.kill_all()
    found = commands(db)
    for command in found:
        events = db.events(command.id)
        assert command.status is CommandStatus.DELIVERED, command
        assert claim_count(events) == command.delivery_count == deliveries, [e.event for e in events]
        assert terminal_events(events) == ["deliver"], [e.event for e in events]
    assert workers.ran() == sorted((c, n) for c in COMMANDS for n in range(1, deliveries + 1)), workers.ran()
    assert_sound(db, "after convergence")
    assert_cli_audit_clean(db)
    return tuple((str(c.status), tuple(terminal_events(db.events(c.id))), c.last_error) for c in found)


def _run(db: CrashDB, workers: EchoWorkers, point: str | None) -> int:
    """The worker part of the flow; returns the delivery count it converges to."""
    if point is None:
        _drain(db, workers, "only")
        return 1
    workers.start("subject", crash=point).wait_killed()
    assert_sound(db, f"after the crash at {point}")
    committed = point.endswith(":after-commit")
    status = CommandStatus.DELIVERED if committed else CommandStatus.PROCESSING
    # (heartbeats may renew the leases while the batch is handled: they are not part of the prediction)
    seen = [(c.id, c.status, c.delivery_count, [e.event for e in db.events(c.id) if e.event != "heartbeat"])
            for c in commands(db)]
    assert seen == [(c, status, 1, ["claim", "deliver"] if committed else ["claim"]) for c in COMMANDS], (
        f"after the crash at {point}: {seen}")
    assert workers.ran() == [(c, 1) for c in COMMANDS], "every handler ran once before the deliver transaction"
    if committed:
        _idle(db, workers)
        return 1
    _drain(db, workers, "recovery")
    return 2


def _drain(db: CrashDB, workers: EchoWorkers, name: str) -> None:
    """A fresh worker runs until every command is DELIVERED, then stops gracefully."""
    worker = workers.start(name)
    try:
        wait_until(lambda: all(c.status is CommandStatus.DELIVERED for c in commands(db)),
                   what=f"the commands to be delivered (worker log: {worker.log_path})")
    finally:
        worker.stop_cleanly()


def _idle(db: CrashDB, workers: EchoWorkers) -> None:
    """A fresh worker gets more than a lease duration to find work; delivered commands must give it none."""
    before = (commands(db), [db.events(c) for c in COMMANDS])
    worker = workers.start("idle")
    try:
        wait_until(lambda: worker.events("worker_started"), what="the idle worker to start")
        time.sleep(LEASE_SECONDS + 4 * POLL_SECONDS)
    finally:
        worker.stop_cleanly()
    assert (commands(db), [db.events(c) for c in COMMANDS]) == before, "a delivered command was touched again"
    assert not worker.events("claimed") and not worker.events("takeover"), worker.describe()
