"""Fault injection (fencepost.store.faults) driving the failure boundaries: a failed enqueue leaves nothing
behind, a busy retry re-runs the whole unit, and a failed terminal commit leaves PROCESSING for takeover."""

from __future__ import annotations

import pytest

from fencepost.core.errors import Conflict, StoreUnavailable
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.base import StoreBusy
from fencepost.store.faults import FaultInjectingStore
from integration.rig import LEASE_SECONDS, Rig, copy_example

COUNT_ALL = ("SELECT (SELECT count(*) FROM commands), (SELECT count(*) FROM rehearsal_attempts), "
             "(SELECT count(*) FROM rehearsal_receipts), (SELECT count(*) FROM lease_events)")


def test_enqueue_failing_part_way_leaves_no_attempt_receipt_or_command(rig: Rig) -> None:
    run = rig.service.create_run(copy_example(rig.tmp / "inventory"))
    faulty = FaultInjectingStore(rig.store, nth=3, query="insert_receipt")
    service = RehearsalService(faulty)
    with pytest.raises(StoreUnavailable, match="injected fault"):
        service.enqueue_attempt(run.id)
    assert faulty.fired == 1
    # The command, the Attempt and two Receipts were written before the fault, then rolled back.
    inserts = [name for name in faulty.executed if name.startswith("insert_")]
    assert inserts[inserts.index("insert_command"):] == [
        "insert_command", "insert_attempt", "insert_receipt", "insert_receipt", "insert_receipt"]
    assert rig.sql(COUNT_ALL) == [(0, 0, 0, 0)]
    assert service.attempts(run.id) == []

    attempt = service.enqueue_attempt(run.id)  # the fault fired once: the next enqueue works
    assert attempt.seq == 1 and attempt.command_status is CommandStatus.PENDING
    assert [r.status for r in rig.receipts(attempt.id)] == [ReceiptStatus.PENDING] * 6
    assert rig.sql(COUNT_ALL) == [(1, 1, 6, 0)]
    rig.run_worker()
    assert rig.service.attempt(attempt.id).status is AttemptStatus.SUCCEEDED


def test_busy_enqueue_is_retried_whole_and_commits_once(rig: Rig) -> None:
    run = rig.service.create_run(copy_example(rig.tmp / "inventory"))
    faulty = FaultInjectingStore(rig.store, nth=5, query="insert_receipt", error=StoreBusy)
    attempt = RehearsalService(faulty).enqueue_attempt(run.id)
    assert faulty.fired == 1
    assert faulty.executed.count("insert_command") == 2, "the whole unit ran again after the busy error"
    assert attempt.seq == 1
    assert rig.sql(COUNT_ALL) == [(1, 1, 6, 0)]


def test_failed_terminal_commit_leaves_processing_for_takeover(rig: Rig) -> None:
    run = rig.service.create_run(copy_example(rig.tmp / "inventory"))
    attempt = rig.service.enqueue_attempt(run.id)
    faulty = FaultInjectingStore(rig.store, nth=1, query="finish_command")
    stats = rig.worker(store=faulty, worker_id="worker-a").run(max_idle_polls=1)
    assert faulty.fired == 1
    assert stats.claimed == 1 and stats.delivered == 0 and stats.failed == 0
    stuck = rig.service.attempt(attempt.id)
    assert stuck.status is AttemptStatus.RUNNING and stuck.command_status is CommandStatus.PROCESSING
    receipts = rig.receipts(attempt.id)
    assert [r.status for r in receipts] == [ReceiptStatus.SUCCEEDED] * 5 + [ReceiptStatus.RUNNING]
    assert receipts[5].evidence is None, "the final receipt write rolled back with the failed finish"

    rig.clock.advance(LEASE_SECONDS + 1)
    assert rig.run_worker(worker_id="worker-b").delivered == 1
    done = rig.service.attempt(attempt.id)
    assert done.status is AttemptStatus.SUCCEEDED and done.delivery_count == 2
    assert rig.service.gate(run.id).passed


def test_fault_counting_options(rig: Rig) -> None:
    run = rig.service.create_run(copy_example(rig.tmp / "inventory"))
    faulty = FaultInjectingStore(rig.store, nth=2, error=Conflict("planned conflict"), times=2)
    service = RehearsalService(faulty)
    # Every query counts when no name is given: the 2nd and 3rd queries fail, then the wrapper disarms.
    for _ in range(2):
        with pytest.raises(Conflict, match="planned conflict"):
            service.enqueue_attempt(run.id)
    assert (faulty.seen, faulty.fired, faulty.armed) == (3, 2, False)
    assert service.enqueue_attempt(run.id).seq == 1
    faulty.arm(nth=1, query="get_run")
    faulty.disarm()
    assert service.get_run(run.id).id == run.id
    with pytest.raises(ValueError):
        faulty.arm(nth=0)
    assert faulty.schema_version() == rig.store.schema_version()
    assert faulty.backend == "sqlite" and faulty.clock is rig.clock
