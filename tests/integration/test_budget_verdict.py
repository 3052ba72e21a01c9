"""The delivery budget verdict of a rehearsal carries the command's lease history as sealed evidence, in the
fenced unit that fails the command (issue 10, ADR 0021); the audit stays clean and nothing runs it again.

Lease expiry is driven by the rig's ManualClock, and on PostgreSQL by short leases that run out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fencepost.core.canonical import parse_json
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.evidence.receipts import verify_receipt
from fencepost.outbox import CommandContext, HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.handlers import FunctionHandler
from fencepost.rehearsal.audit import audit
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store
from helpers.store_backends import StoreBackend
from integration.rig import LEASE_SECONDS, Rig, SimulatedCrash, copy_example

BUDGET = 3


class CountingHandler(AttemptHandler):
    """The real handler, counting the deliveries it was asked to run."""

    runs = 0

    def handle(self, ctx: CommandContext) -> None:
        CountingHandler.runs += 1
        super().handle(ctx)


def _crash_at(rig: Rig, position: int, owner: str) -> None:
    """Claim the due command as ``owner`` and let the process "die" as scenario ``position`` starts."""
    dying = {"now": True}

    def crash() -> None:
        if dying["now"]:
            raise SimulatedCrash()

    rig.before_scenario(position, crash)
    with pytest.raises(SimulatedCrash):
        AttemptHandler(rig.work_dir).handle(rig.context(rig.claim(owner)))
    dying["now"] = False


def _budget_worker(rig: Rig, handler: Any, worker_id: str = "worker-d") -> Worker:
    registry = HandlerRegistry()
    registry.register(KIND, handler, max_deliveries=BUDGET)
    worker = Worker(rig.store, registry, WorkerConfig(poll_interval=0.01, batch_size=1, lease_seconds=LEASE_SECONDS,
                                                      worker_id=worker_id))
    rig.workers.append(worker)
    return worker


def test_the_budget_verdict_seals_the_lease_history_and_the_audit_stays_clean(rig: Rig) -> None:
    run = rig.service.create_run(copy_example(rig.tmp / "inventory"))
    attempt = rig.service.enqueue_attempt(run.id)
    _crash_at(rig, 3, "worker-a")                 # delivery 1: dies in scenario 3; its lease expires
    rig.clock.advance(LEASE_SECONDS + 1)
    _crash_at(rig, 2, "worker-b")                 # delivery 2 (takeover): dies in scenario 2 ...
    rig.clock.advance(LEASE_SECONDS + 1)
    rig.service.reconcile(attempt.id)             # ... and an operator returns it to PENDING
    _crash_at(rig, 1, "worker-c")                 # delivery 3: dies at once
    rig.clock.advance(LEASE_SECONDS + 1)
    fourth = rig.claim("worker-x")                # delivery 4: claimed, then given back by a stop: a release
    rig.store.transact(lambda tx: tx.outbox.release(fourth.lease))  # gives its delivery back (not spent)

    CountingHandler.runs = 0
    stats = _budget_worker(rig, CountingHandler(rig.work_dir)).run(max_idle_polls=1)
    assert stats.claimed == 1 and stats.exhausted == 1 and stats.failed == 1
    assert CountingHandler.runs == 0, "the handler never runs a command past its budget"

    failed = rig.service.attempt(attempt.id)
    assert failed.status is AttemptStatus.FAILED and failed.command_status is CommandStatus.FAILED
    assert failed.error == f"delivery budget exhausted ({BUDGET}/{BUDGET})"
    assert failed.delivery_count == failed.delivery == BUDGET + 2  # three spent, one given back, this one
    receipts = rig.receipts(attempt.id)
    assert [r.status for r in receipts] == [ReceiptStatus.FAILED] + [ReceiptStatus.ABORTED] * 5
    assert receipts[0].delivery == BUDGET + 2
    assert all(r.evidence is None for r in receipts[1:])
    assert verify_receipt(receipts[0], content_digest=run.content_digest).ok

    evidence = rig.evidence(receipts[0])
    assert evidence["status"] == "FAILED" and evidence["scenario"] == "deliver_and_install"
    assert evidence["error"] == {"message": "delivery budget exhausted"}  # the counts are in "budget"
    assert evidence["budget"] == {"deliveries": BUDGET, "max": BUDGET}
    assert evidence["execution"] == {"worker": "worker-d", "delivery": BUDGET + 2, "attempt_id": attempt.id}
    assert evidence["package"]["content_digest"] == run.content_digest
    history = evidence["lease_history"]
    assert [(h["delivery"], h["owner"], h["claim"], h["ended"]) for h in history] == [
        (1, "worker-a", "claim", "expired"), (2, "worker-b", "takeover", "reconciled"),
        (3, "worker-c", "takeover", "expired"), (4, "worker-x", "takeover", "released"),
        (5, "worker-d", "takeover", "failed")]
    assert all(h["claimed_at"] and h["ended_at"] for h in history)
    # What the last delivery that started had reached before it died (its Receipts were discarded).
    assert evidence["last_progress"] == {"delivery": 3, "succeeded": [], "running": "deliver_and_install"}

    events = [e.event for e in rig.lease_events(attempt.command_id)]
    assert events[-1] == "fail" and events.count("claim") + events.count("takeover") == BUDGET + 2
    assert audit(rig.store) == []
    assert not rig.service.gate(run.id).passed

    assert _budget_worker(rig, CountingHandler(rig.work_dir), "worker-e").run(max_idle_polls=1).claimed == 0
    assert CountingHandler.runs == 0


def test_a_handler_without_the_hook_fails_with_on_failure(rig: Rig) -> None:
    failures: list[str] = []

    class Plain(FunctionHandler):
        def on_failure(self, tx: Any, ctx: CommandContext, error: str) -> None:
            failures.append(error)

    ran: list[int] = []
    rig.store.transact(lambda tx: tx.outbox.insert(command_id="cmd_plain", kind=KIND, payload={}))
    for owner in ("a", "b", "c"):
        rig.claim(owner)
        rig.clock.advance(LEASE_SECONDS + 1)
    stats = _budget_worker(rig, Plain(lambda ctx: ran.append(ctx.delivery))).run(max_idle_polls=1)
    assert stats.exhausted == 1 and ran == []
    assert failures == [f"delivery budget exhausted ({BUDGET}/{BUDGET})"]
    command = rig.store.read(lambda tx: tx.outbox.get("cmd_plain"))
    assert command is not None and command.status is CommandStatus.FAILED
    assert rig.sql("SELECT last_error FROM commands WHERE id = 'cmd_plain'") == [
        (f"delivery budget exhausted ({BUDGET}/{BUDGET})",)]


def test_released_deliveries_never_spend_the_budget(rig: Rig) -> None:
    """Rolling restarts (each stop releases its command) must never exhaust it (break-it finding)."""
    ran: list[int] = []
    rig.store.transact(lambda tx: tx.outbox.insert(command_id="cmd_restarts", kind=KIND, payload={}))
    for owner in ("a", "b", "c", "d", "e", "f"):  # twice the budget, each given back by a graceful stop
        claimed = rig.claim(owner)
        rig.store.transact(lambda tx, lease=claimed.lease: tx.outbox.release(lease))
    rig.claim("g")  # and one that really died: that one is spent
    rig.clock.advance(LEASE_SECONDS + 1)
    stats = _budget_worker(rig, FunctionHandler(lambda ctx: ran.append(ctx.delivery))).run(max_idle_polls=1)
    assert stats.exhausted == 0 and ran == [8], "the command ran: one delivery of three was spent"
    command = rig.store.read(lambda tx: tx.outbox.get("cmd_restarts"))
    assert command is not None and command.status is CommandStatus.DELIVERED


def test_the_budget_verdict_on_every_backend(backend: StoreBackend, store: Store, tmp_path: Path) -> None:
    service = RehearsalService(store)
    run = service.create_run(copy_example(tmp_path / "inventory"))
    attempt = service.enqueue_attempt(run.id)
    for owner in ("w1", "w2"):  # two deliveries die without a verdict: their short leases expire
        claimed = store.transact(lambda tx, o=owner: tx.outbox.claim(owner=o, kinds=[KIND], limit=1,
                                                                     lease_seconds=backend.short_lease))
        assert len(claimed) == 1
        backend.expire()
    registry = HandlerRegistry()
    registry.register(KIND, AttemptHandler(tmp_path / "work"), max_deliveries=2)
    config = WorkerConfig(poll_interval=0.01, batch_size=1, lease_seconds=backend.long_lease, worker_id="w3")
    assert Worker(store, registry, config).run(max_idle_polls=1).exhausted == 1
    failed = service.attempt(attempt.id)
    assert failed.status is AttemptStatus.FAILED and failed.error == "delivery budget exhausted (2/2)"
    first = service.receipts(attempt.id)[0]
    assert first.status is ReceiptStatus.FAILED and first.evidence is not None
    evidence = parse_json(first.evidence)
    assert isinstance(evidence, dict) and evidence["budget"] == {"deliveries": 2, "max": 2}
    assert [(h["owner"], h["ended"]) for h in evidence["lease_history"]] == [
        ("w1", "expired"), ("w2", "expired"), ("w3", "failed")]
    assert audit(store) == []
