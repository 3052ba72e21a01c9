"""SIGKILL on each side of the COMMIT of an ``outbox.deliver`` that carries the next claim (ADR 0093).

On SQLite the worker's completion of one batch and its claim of the next are one transaction. Two
``crash.echo`` commands, ``first`` due before ``later``, and a real worker process (``echo_worker.py``) that
claims and runs one at a time, so that the order is fixed: ``first`` is claimed alone (``outbox.claim``) and
runs, and its completion carries the claim of ``later``. The worker is SIGKILLed there, then:

- before COMMIT nothing of it is durable: ``first`` is PROCESSING under delivery 1 (it ran once), ``later``
  PENDING and never run;
- after COMMIT all of it is: ``first`` DELIVERED, ``later`` PROCESSING under delivery 1, claimed by the dead
  worker and never run;

and a fresh worker converges: every command DELIVERED once, the commands the crash left under a lease taken
over at delivery 2 after it expired, each handler run once per delivery, and ``fencepost audit`` clean.

PostgreSQL overlaps the completion with a separate claim instead (``Worker._overlap``), so these windows are
SQLite's: WAL/FULL in the default run, DELETE/FULL under soak.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crash_flows import require_backend
from crash_harness import assert_cli_audit_clean, assert_sound, claim_count, crash_db, terminal_events, wait_until
from deliver_flow import KIND, EchoWorkers

from fencepost.core.statuses import CommandStatus
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import CommandRecord

FIRST = ("echo-1",)
LATER = ("echo-2",)


def _params() -> list[Any]:
    return [pytest.param(backend, point, id=f"{backend}-{point}",
                         marks=[] if backend == "sqlite-wal" else [pytest.mark.soak])
            for backend in ("sqlite-wal", "sqlite-delete")
            for point in ("outbox.deliver:before-commit", "outbox.deliver:after-commit")]


def _records(db: Any, ids: tuple[str, ...]) -> list[CommandRecord]:
    def unit(tx: UnitOfWork) -> list[CommandRecord]:
        found = [tx.outbox.get(i) for i in ids]
        assert all(c is not None for c in found), found
        return [c for c in found if c is not None]
    return db.store.read(unit)


def _state(db: Any, ids: tuple[str, ...]) -> list[tuple[str, CommandStatus, int, list[str]]]:
    return [(c.id, c.status, c.delivery_count, [e.event for e in db.events(c.id) if e.event != "heartbeat"])
            for c in _records(db, ids)]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "point"), _params())
def test_a_claim_riding_on_a_completion_commits_with_it(backend: str, point: str, tmp_path: Path) -> None:
    require_backend(backend)
    with crash_db(backend, tmp_path) as db:
        for command_id in FIRST + LATER:  # one transaction each: ``first`` is due earlier
            db.store.transact(lambda tx, c=command_id: tx.outbox.insert(command_id=c, kind=KIND, payload={"n": c}))
        workers = EchoWorkers(db)
        try:
            workers.start("subject", crash=point, batch=1).wait_killed()
            assert_sound(db, f"after the crash at {point}")
            committed = point.endswith(":after-commit")
            first, later = _state(db, FIRST), _state(db, LATER)
            if committed:
                assert first == [(c, CommandStatus.DELIVERED, 1, ["claim", "deliver"]) for c in FIRST], first
                assert later == [(c, CommandStatus.PROCESSING, 1, ["claim"]) for c in LATER], later
            else:
                assert first == [(c, CommandStatus.PROCESSING, 1, ["claim"]) for c in FIRST], first
                assert later == [(c, CommandStatus.PENDING, 0, []) for c in LATER], later
            assert workers.ran() == [(c, 1) for c in FIRST], "only the first command ran before the crash"
            recovery = workers.start("recovery")
            try:
                wait_until(lambda: all(c.status is CommandStatus.DELIVERED for c in _records(db, FIRST + LATER)),
                           what=f"every command to be delivered (worker log: {recovery.log_path})")
            finally:
                recovery.stop_cleanly()
        finally:
            workers.kill_all()
        # Taken over at delivery 2: what the crash left under the dead worker's lease (``later`` after COMMIT,
        # ``first`` before it); claimed afresh at delivery 1: ``later`` before COMMIT.
        taken_over = LATER if committed else FIRST
        expected_runs = sorted([(c, 1) for c in FIRST + LATER if c not in taken_over or not committed]
                               + [(c, 2) for c in taken_over])
        assert workers.ran() == expected_runs, workers.ran()
        for command in _records(db, FIRST + LATER):
            events = db.events(command.id)
            deliveries = 2 if command.id in taken_over else 1
            assert command.delivery_count == claim_count(events) == deliveries, [e.event for e in events]
            assert terminal_events(events) == ["deliver"], [e.event for e in events]
        assert_sound(db, "after convergence")
        assert_cli_audit_clean(db)
