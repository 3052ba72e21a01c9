"""The integration rig: one real SQLite control store in ``tmp_path``, a ``ManualClock`` as its lease clock,
the rehearsal service, and in-process workers running the real ``AttemptHandler`` in real sandboxes.

Also helpers to build package directories at test time and to reach the database with plain ``sqlite3``
(as an attacker or an operator with a shell would), bypassing fencepost entirely.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fencepost.core.canonical import parse_json
from fencepost.core.clock import ManualClock
from fencepost.outbox import CommandContext, HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.handlers import Handler
from fencepost.outbox.worker import WorkerStats
from fencepost.rehearsal import handler as handler_module
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.scenarios import ScenarioEnv
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store, open_store
from fencepost.store.records import AttemptRecord, ClaimedCommand, LeaseEvent, ReceiptRecord, RunRecord

EXAMPLE_PACKAGE = Path(__file__).resolve().parents[2] / "examples" / "inventory"
LEASE_SECONDS = 30.0

Scenario = Callable[[ScenarioEnv], dict[str, Any]]


class SimulatedCrash(BaseException):
    """Stands for a process death in the middle of a scenario: not an ``Exception``, so no handler or
    worker code path catches it, and nothing after the raise point runs (no fenced write, no release)."""


@dataclass
class Rig:
    tmp: Path
    db_path: Path
    clock: ManualClock
    store: Store
    service: RehearsalService
    work_dir: Path
    monkeypatch: pytest.MonkeyPatch
    workers: list[Worker] = field(default_factory=list)

    # ── workers ──
    def handler(self) -> AttemptHandler:
        return AttemptHandler(self.work_dir)

    def worker(self, handler: Handler | None = None, *, worker_id: str = "worker-a",
               lease_seconds: float = LEASE_SECONDS, store: Store | None = None) -> Worker:
        registry = HandlerRegistry()
        registry.register(KIND, handler or self.handler())
        worker = Worker(store or self.store, registry,
                        WorkerConfig(poll_interval=0.01, batch_size=1, lease_seconds=lease_seconds,
                                     worker_id=worker_id))
        self.workers.append(worker)
        return worker

    def run_worker(self, handler: Handler | None = None, *, worker_id: str = "worker-a") -> WorkerStats:
        """Run a worker until it finds nothing to claim (the ManualClock never lets a lease lapse by itself)."""
        return self.worker(handler, worker_id=worker_id).run(max_idle_polls=1)

    def claim(self, owner: str, lease_seconds: float = LEASE_SECONDS) -> ClaimedCommand:
        """Claim the one due command by hand, as a worker's claim transaction would."""
        claimed = self.store.transact(lambda tx: tx.outbox.claim(owner=owner, kinds=[KIND], limit=1,
                                                                    lease_seconds=lease_seconds))
        assert len(claimed) == 1, f"expected one due command, claimed {len(claimed)}"
        return claimed[0]

    def context(self, claimed: ClaimedCommand) -> CommandContext:
        return CommandContext(self.store, claimed, LEASE_SECONDS)

    # ── scenarios ──
    def wrap_scenario(self, position: int, wrap: Callable[[Scenario], Scenario]) -> None:
        """Replace scenario ``position`` (1-based) for the handler with ``wrap(original)`` (undone after the test)."""
        scenarios = list(handler_module.SCENARIOS)
        code, original = scenarios[position - 1]
        scenarios[position - 1] = (code, wrap(original))
        self.monkeypatch.setattr(handler_module, "SCENARIOS", tuple(scenarios))

    def before_scenario(self, position: int, action: Callable[[], None]) -> None:
        """Run ``action()`` when scenario ``position`` starts, then the real scenario."""

        def wrap(original: Scenario) -> Scenario:
            def scenario(env: ScenarioEnv) -> dict[str, Any]:
                action()
                return original(env)

            return scenario

        self.wrap_scenario(position, wrap)

    # ── rehearsals ──
    def rehearse(self, package_dir: Path, attempts: int = 2) -> tuple[RunRecord, list[AttemptRecord]]:
        """Freeze ``package_dir`` as a Run, enqueue and run ``attempts`` Attempts one after the other."""
        run = self.service.create_run(package_dir)
        done = []
        for _ in range(attempts):
            attempt = self.service.enqueue_attempt(run.id)
            self.run_worker()
            done.append(self.service.attempt(attempt.id))
        return run, done

    def receipts(self, attempt_id: str) -> list[ReceiptRecord]:
        return self.service.receipts(attempt_id)

    def evidence(self, receipt: ReceiptRecord) -> dict[str, Any]:
        assert receipt.evidence is not None, f"receipt {receipt.position} has no evidence"
        value = parse_json(receipt.evidence)
        assert isinstance(value, dict)
        return value

    def lease_events(self, command_id: str) -> list[LeaseEvent]:
        return self.store.read(lambda tx: tx.outbox.lease_events(command_id))

    # ── plain sqlite3, outside fencepost ──
    @contextmanager
    def raw(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.db_path, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.raw() as conn:
            return conn.execute(statement, params).fetchall()

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every control table (lease tokens included), to prove a refused operation changed nothing."""
        tables = ["commands", "lease_events", "rehearsal_runs", "rehearsal_attempts", "rehearsal_receipts"]
        return {t: self.sql(f"SELECT * FROM {t} ORDER BY rowid") for t in tables}


def open_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rig:
    db_path = tmp_path / "c.db"
    clock = ManualClock()
    store = open_store(f"sqlite:///{db_path}", clock=clock)
    store.migrate()
    store.require_schema()
    return Rig(tmp=tmp_path, db_path=db_path, clock=clock, store=store, service=RehearsalService(store),
               work_dir=tmp_path / "work", monkeypatch=monkeypatch)


def write_package(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create package directory ``root`` holding ``{relative path: text or bytes}``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def copy_example(destination: Path) -> Path:
    """A private copy of ``examples/inventory`` (tests may edit it)."""
    shutil.copytree(EXAMPLE_PACKAGE, destination)
    return destination
