"""Leases, fencing and recovery of rehearsal Attempts with a real worker (seed: "Heartbeat And Takeover",
"Failure Boundaries"): reconcile, takeover, abort, stale writers, graceful stop and handler failures.

Lease expiry is driven by the rig's ManualClock: nothing here sleeps to wait for a lease.
"""

from __future__ import annotations

import threading
from itertools import groupby
from pathlib import Path

import pytest

from fencepost.core.errors import Conflict, LeaseActive, LeaseLost, NotFound, SchemaNotReady
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.evidence.receipts import seal
from fencepost.outbox import CommandContext
from fencepost.rehearsal.handler import AttemptHandler
from fencepost.store import open_store
from fencepost.store.ports import FencedUnit
from fencepost.store.records import AttemptRecord, RunRecord
from integration.rig import LEASE_SECONDS, Rig, SimulatedCrash, copy_example

S, R, P, A, F = (ReceiptStatus.SUCCEEDED, ReceiptStatus.RUNNING, ReceiptStatus.PENDING, ReceiptStatus.ABORTED,
                 ReceiptStatus.FAILED)
WAIT = 30.0  # upper bound on waiting for another thread; normally a few milliseconds


class RecordingHandler(AttemptHandler):
    """The real handler, remembering each ``LeaseLost`` it raised and the context it ran under."""

    def __init__(self, rig: Rig) -> None:
        super().__init__(rig.work_dir)
        self.lost: list[LeaseLost] = []
        self.contexts: list[CommandContext] = []

    def handle(self, ctx: CommandContext) -> None:
        self.contexts.append(ctx)
        try:
            super().handle(ctx)
        except LeaseLost as error:
            self.lost.append(error)
            raise


def _run(rig: Rig) -> RunRecord:
    return rig.service.create_run(copy_example(rig.tmp / "inventory"))


def _statuses(rig: Rig, attempt_id: str) -> list[ReceiptStatus]:
    return [r.status for r in rig.receipts(attempt_id)]


def _events(rig: Rig, command_id: str) -> list[str]:
    """Heartbeat history with runs of repeated events collapsed (each fenced write also records a heartbeat)."""
    return [kind for kind, _ in groupby(e.event for e in rig.lease_events(command_id))]


def _token(rig: Rig, command_id: str) -> object:
    return rig.sql("SELECT lease_token FROM commands WHERE id = ?", (command_id,))[0][0]


def _crash_first_delivery(rig: Rig, at_position: int, owner: str = "worker-a") -> tuple[AttemptRecord, CommandContext]:
    """Enqueue an Attempt, claim it as ``owner`` and let the process "die" when scenario ``at_position`` starts.

    Later deliveries run the real scenario: the crash happens once.
    """
    run = _run(rig)
    attempt = rig.service.enqueue_attempt(run.id)
    crashed = []

    def crash_once() -> None:
        if not crashed:
            crashed.append(True)
            raise SimulatedCrash()

    rig.before_scenario(at_position, crash_once)
    ctx = rig.context(rig.claim(owner))
    with pytest.raises(SimulatedCrash):
        AttemptHandler(rig.work_dir).handle(ctx)
    expected = [S] * (at_position - 1) + [R] + [P] * (6 - at_position)
    assert _statuses(rig, attempt.id) == expected
    current = rig.service.attempt(attempt.id)
    assert current.status is AttemptStatus.RUNNING and current.command_status is CommandStatus.PROCESSING
    assert current.lease_owner == owner and current.delivery_count == 1
    return current, ctx


def test_reconcile_refuses_an_active_lease_then_returns_an_expired_one_to_pending(rig: Rig) -> None:
    attempt, ctx = _crash_first_delivery(rig, at_position=4)
    before = rig.snapshot()
    with pytest.raises(LeaseActive) as caught:
        rig.service.reconcile(attempt.id)
    assert caught.value.lease_until == ctx.lease.until == attempt.lease_until
    assert "cannot be reconciled" in str(caught.value)
    assert ctx.lease.token not in str(caught.value)
    assert rig.snapshot() == before, "a refused reconcile changes nothing"

    rig.clock.advance(LEASE_SECONDS - 1)
    with pytest.raises(LeaseActive):
        rig.service.reconcile(attempt.id)
    rig.clock.advance(2)
    reconciled = rig.service.reconcile(attempt.id)
    assert reconciled.command_status is CommandStatus.PENDING
    assert reconciled.lease_owner is None and reconciled.lease_until is None
    assert reconciled.delivery_count == 1
    assert _token(rig, attempt.command_id) is None
    assert _events(rig, attempt.command_id)[-1] == "reconcile"
    with pytest.raises(Conflict) as again:
        rig.service.reconcile(attempt.id)
    assert not isinstance(again.value, LeaseActive)

    stats = rig.run_worker(worker_id="worker-b")
    assert stats.claimed == 1 and stats.delivered == 1
    done = rig.service.attempt(attempt.id)
    assert done.status is AttemptStatus.SUCCEEDED and done.command_status is CommandStatus.DELIVERED
    assert done.delivery_count == 2 and done.delivery == 2
    receipts = rig.receipts(attempt.id)
    assert [r.status for r in receipts] == [S] * 6
    assert [r.delivery for r in receipts] == [2] * 6, "all six scenarios rerun under delivery 2"
    assert all(rig.evidence(r)["execution"]["delivery"] == 2 for r in receipts)
    assert all(rig.evidence(r)["execution"]["worker"] == "worker-b" for r in receipts)
    assert rig.service.gate(attempt.run_id).passed


def test_takeover_replays_all_scenarios_and_the_target_replays_its_receipt(rig: Rig) -> None:
    attempt, _ = _crash_first_delivery(rig, at_position=3)
    first = rig.evidence(rig.receipts(attempt.id)[0])
    assert first["target_receipt"]["replayed"] is False

    assert rig.run_worker(worker_id="worker-b").claimed == 0, "an active lease is not taken over"
    rig.clock.advance(LEASE_SECONDS + 1)
    stats = rig.run_worker(worker_id="worker-b")
    assert stats.claimed == 1 and stats.delivered == 1

    done = rig.service.attempt(attempt.id)
    assert done.status is AttemptStatus.SUCCEEDED and done.delivery_count == 2
    receipts = rig.receipts(attempt.id)
    assert [(r.status, r.delivery) for r in receipts] == [(S, 2)] * 6
    second = rig.evidence(receipts[0])
    assert second["idempotency_key"] == first["idempotency_key"]
    assert second["target_receipt"]["receipt_id"] == first["target_receipt"]["receipt_id"]
    assert second["target_receipt"]["delivered_at"] == first["target_receipt"]["delivered_at"]
    assert second["target_receipt"]["replayed"] is True
    assert len(list((rig.work_dir / "target").glob("*.json"))) == 1, "one delivery at the target"

    events = rig.lease_events(attempt.command_id)
    assert _events(rig, attempt.command_id) == ["claim", "heartbeat", "takeover", "heartbeat", "deliver"]
    by_kind = {(e.event, e.delivery, e.owner) for e in events}
    assert {("claim", 1, "worker-a"), ("heartbeat", 1, "worker-a"), ("takeover", 2, "worker-b"),
            ("heartbeat", 2, "worker-b"), ("deliver", 2, "worker-b")} == by_kind
    assert rig.service.gate(attempt.run_id).passed


def test_stale_lease_cannot_write_renew_or_finish_after_takeover(rig: Rig) -> None:
    attempt, old_ctx = _crash_first_delivery(rig, at_position=4)
    rig.clock.advance(LEASE_SECONDS + 1)
    new_ctx = rig.context(rig.claim("worker-b"))
    assert new_ctx.delivery == 2
    old_lease = old_ctx.lease
    before = rig.snapshot()

    # A stale receipt write: receipt 4 is still RUNNING under delivery 1, but the write carries the lease
    # condition, so it touches nothing and raises LeaseLost itself (ADR 0015).
    text, fp = seal({"scenario": "reapply_is_noop", "forged": True})
    ran: list[bool] = []

    def stale_receipt(tx: FencedUnit) -> None:
        ran.append(tx.rehearsal.receipt_finish(attempt.id, 4, ReceiptStatus.SUCCEEDED, text, fp))

    stale = rig.context(old_ctx.command)
    with pytest.raises(LeaseLost):
        stale.fenced(stale_receipt, name="test.stale")
    assert ran == [], "the stale write was refused by its own lease condition"
    assert stale.lost
    # A write without a lease condition of its own does execute, but the fence at the end of the same
    # transaction fails, so the whole transaction rolls back (ADR 0002).
    executed: list[int] = []

    def stale_plain_write(tx: FencedUnit) -> None:
        executed.append(tx.rehearsal.abort_open_receipts(attempt.id))

    with pytest.raises(LeaseLost):
        rig.context(old_ctx.command).fenced(stale_plain_write, name="test.stale")
    assert executed and executed[0] > 0, "the unconditioned write did execute inside the transaction"
    with pytest.raises(LeaseLost):
        stale.fenced(stale_receipt, name="test.stale")
    assert ran == [], "once lost, a context does not even open another transaction"

    # A stale completion of the whole Attempt, and a stale finish, renew and release.
    def stale_success(tx: FencedUnit) -> None:
        tx.rehearsal.finish_attempt(attempt.id, AttemptStatus.SUCCEEDED)

    with pytest.raises(LeaseLost):
        rig.context(old_ctx.command).fenced(stale_success, name="test.stale", finish=CommandStatus.DELIVERED)
    for write in (lambda tx: tx.outbox.finish(old_lease, CommandStatus.DELIVERED),
                  lambda tx: tx.outbox.renew(old_lease, lease_seconds=LEASE_SECONDS),
                  lambda tx: tx.outbox.release(old_lease)):
        with pytest.raises(LeaseLost):
            rig.store.transact(write)
    heartbeat_ctx = rig.context(old_ctx.command)
    assert heartbeat_ctx.heartbeat() is False and heartbeat_ctx.lost
    assert rig.snapshot() == before, "a stale lease persisted nothing"

    AttemptHandler(rig.work_dir).handle(new_ctx)
    done = rig.service.attempt(attempt.id)
    assert done.status is AttemptStatus.SUCCEEDED and done.command_status is CommandStatus.DELIVERED
    assert [(r.status, r.delivery) for r in rig.receipts(attempt.id)] == [(S, 2)] * 6
    assert all("forged" not in (r.evidence or "") for r in rig.receipts(attempt.id))


def test_abort_of_a_pending_attempt(rig: Rig) -> None:
    run = _run(rig)
    attempt = rig.service.enqueue_attempt(run.id)
    aborted = rig.service.abort(attempt.id, "not needed")
    assert aborted.status is AttemptStatus.ABORTED and aborted.error == "not needed"
    assert aborted.command_status is CommandStatus.ABORTED
    assert _statuses(rig, attempt.id) == [A] * 6
    assert _token(rig, attempt.command_id) is None
    assert _events(rig, attempt.command_id) == ["abort"]
    assert rig.worker().run_once() == 0, "an aborted command is never claimed"
    before = rig.snapshot()
    with pytest.raises(Conflict, match="only PENDING or RUNNING can be aborted"):
        rig.service.abort(attempt.id)
    assert rig.snapshot() == before


def test_abort_of_a_running_attempt_from_another_thread_fences_the_worker(rig: Rig) -> None:
    run = _run(rig)
    attempt = rig.service.enqueue_attempt(run.id)
    reached, resume = threading.Event(), threading.Event()

    def pause() -> None:
        reached.set()
        assert resume.wait(WAIT), "the test never resumed the scenario"

    rig.before_scenario(3, pause)
    handler = RecordingHandler(rig)
    worker = rig.worker(handler, worker_id="worker-a")
    thread = threading.Thread(target=worker.run, kwargs={"max_idle_polls": 1}, name="test-worker")
    thread.start()
    try:
        assert reached.wait(WAIT), "the worker never reached scenario 3"
        running = rig.service.attempt(attempt.id)
        assert running.status is AttemptStatus.RUNNING and running.command_status is CommandStatus.PROCESSING
        assert _statuses(rig, attempt.id) == [S, S, R, P, P, P]

        aborted = rig.service.abort(attempt.id, "operator abort")
        assert aborted.status is AttemptStatus.ABORTED
        assert aborted.command_status is CommandStatus.ABORTED and aborted.lease_owner is None
        assert _statuses(rig, attempt.id) == [S, S, A, A, A, A]
        assert _token(rig, attempt.command_id) is None
        after_abort = rig.snapshot()
    finally:
        resume.set()
        thread.join(WAIT)
    assert not thread.is_alive()

    # Scenario 3 finished in the sandbox, but its fenced write found the Attempt aborted: LeaseLost.
    assert len(handler.lost) == 1 and handler.contexts[0].lost
    assert worker.stats.lost == 1 and worker.stats.delivered == 0 and worker.stats.failed == 0
    assert rig.snapshot() == after_abort, "the fenced-out worker persisted nothing more"
    receipts = rig.receipts(attempt.id)
    assert receipts[2].evidence is None and receipts[0].evidence is not None
    assert _events(rig, attempt.command_id)[-1] == "abort"
    with pytest.raises(LeaseLost):
        handler.contexts[0].fenced(lambda tx: None, name="test.after-abort")
    with pytest.raises(LeaseLost):  # the token itself is gone, not just the context's flag
        rig.store.transact(lambda tx: tx.outbox.renew(handler.contexts[0].lease, lease_seconds=LEASE_SECONDS))
    assert not rig.service.gate(run.id).passed


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_abort_of_a_terminal_attempt_is_a_conflict(rig: Rig, outcome: str) -> None:
    run = _run(rig)
    attempt = rig.service.enqueue_attempt(run.id)
    if outcome == "failed":
        def boom() -> None:
            raise RuntimeError("scenario exploded")

        rig.before_scenario(2, boom)
    rig.run_worker()
    status = rig.service.attempt(attempt.id).status
    assert status is (AttemptStatus.SUCCEEDED if outcome == "succeeded" else AttemptStatus.FAILED)
    before = rig.snapshot()
    with pytest.raises(Conflict) as caught:
        rig.service.abort(attempt.id)
    assert f"is {status}" in str(caught.value)
    assert rig.snapshot() == before, "terminal records are immutable"


def test_graceful_stop_releases_the_lease_for_the_next_worker(rig: Rig) -> None:
    run = _run(rig)
    attempt = rig.service.enqueue_attempt(run.id)
    worker = rig.worker(worker_id="worker-a")
    rig.before_scenario(2, lambda: worker.request_stop(0.0))  # a stop whose grace period is over
    stats = worker.run()  # returns because of request_stop, not because it ran out of work
    assert stats.released == 1 and stats.delivered == 0 and stats.failed == 0

    released = rig.service.attempt(attempt.id)
    assert released.command_status is CommandStatus.PENDING
    assert released.lease_owner is None and released.lease_until is None
    assert released.available_at == rig.clock.now(), "due at once, no waiting for the lease to lapse"
    assert _token(rig, attempt.command_id) is None
    assert _events(rig, attempt.command_id)[-1] == "release"
    assert released.status is AttemptStatus.RUNNING  # provisional: the next delivery replays it
    # Interrupted during scenario 2: its receipt stays RUNNING with no evidence; nothing was recorded for it.
    assert _statuses(rig, attempt.id) == [S, R, P, P, P, P]
    assert rig.receipts(attempt.id)[1].evidence is None

    assert rig.run_worker(worker_id="worker-b").delivered == 1
    done = rig.service.attempt(attempt.id)
    assert done.status is AttemptStatus.SUCCEEDED and done.delivery_count == 2
    assert [(r.status, r.delivery) for r in rig.receipts(attempt.id)] == [(S, 2)] * 6


def test_unexpected_handler_exception_fails_command_and_attempt(rig: Rig) -> None:
    run = _run(rig)
    attempt = rig.service.enqueue_attempt(run.id)

    def explode() -> None:
        raise RuntimeError("disk on fire")

    rig.before_scenario(3, explode)
    stats = rig.run_worker()
    assert stats.failed == 1 and stats.delivered == 0
    failed = rig.service.attempt(attempt.id)
    assert failed.status is AttemptStatus.FAILED
    assert failed.command_status is CommandStatus.FAILED
    assert failed.error is not None and "RuntimeError: disk on fire" in failed.error
    command = rig.store.read(lambda tx: tx.outbox.get(attempt.command_id))
    assert command is not None and command.last_error == failed.error
    assert _statuses(rig, attempt.id) == [S, S, A, A, A, A]
    assert rig.receipts(attempt.id)[2].evidence is None
    assert _token(rig, attempt.command_id) is None
    assert _events(rig, attempt.command_id)[-1] == "fail"
    assert not rig.service.gate(run.id).passed


def test_unmigrated_store_is_refused_naming_fencepost_migrate(tmp_path: Path) -> None:
    fresh = open_store(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        with pytest.raises(SchemaNotReady) as caught:
            fresh.require_schema()
        assert "unmigrated" in str(caught.value) and "`fencepost migrate`" in str(caught.value)
    finally:
        fresh.close()
    missing = tmp_path / "missing.db"
    absent = open_store(f"sqlite:///{missing}", create=False)
    try:
        with pytest.raises(SchemaNotReady, match="fencepost migrate"):
            absent.require_schema()
    finally:
        absent.close()
    assert not missing.exists(), "checking readiness never creates the database"


def test_operator_paths_on_unknown_or_unfit_records(rig: Rig) -> None:
    run = _run(rig)
    for operation in (rig.service.reconcile, rig.service.abort, rig.service.attempt):
        with pytest.raises(NotFound):
            operation("att_missing")
    with pytest.raises(NotFound):
        rig.service.enqueue_attempt("run_missing")
    attempt = rig.service.enqueue_attempt(run.id)
    with pytest.raises(Conflict, match=f"attempt {attempt.id} is PENDING with its command PENDING; only an Attempt "
                                       "whose lease has expired can be reconciled"):
        rig.service.reconcile(attempt.id)
    assert rig.store.transact(lambda tx: tx.rehearsal.retire_run(run.id))
    before = rig.snapshot()
    with pytest.raises(Conflict, match="only a READY Run takes new Attempts"):
        rig.service.enqueue_attempt(run.id)
    assert rig.snapshot() == before
