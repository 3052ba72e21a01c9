"""The progress contract (``ProgressPort``): a Run's state and progress rows after admission (ADR 0072).

Every write is a compare-and-set on the exact status and fence read: a StepRun or Run elsewhere than expected is
not written (``False``); a Run takes one cancel intent and one verdict; the candidate pages list exactly the Runs
that can advance, in id order after the cursor; rows read back exactly as written, typed, instants aware UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from fencepost.core.canonical import canonical_json
from fencepost.core.statuses import (
    RunMutationKind,
    StepMutationKind,
    StepRunStatus,
    WorkflowEventType,
    WorkflowRunStatus,
)
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import ProgressMutation, RunMutation, StepStart, WorkflowEventRow
from fencepost.testing.admission import admit
from fencepost.testing.backend import ContractHarness, StoreContract
from fencepost.testing.catalog import LOCK_1, PACKAGE, publish, refused


def _event(run_id: str, seq: int, at: datetime, step_run_id: str | None = None,
           kind: WorkflowEventType = WorkflowEventType.STEP_RUNNING) -> WorkflowEventRow:
    return WorkflowEventRow(id=f"ev-{run_id}-{seq}", run_id=run_id, step_run_id=step_run_id, seq=seq, type=kind,
                            payload=canonical_json({"run_id": run_id}), created_at=at)


def _start_extract(tx: UnitOfWork, plan_id: str, invocation_id: str = "inv-x") -> StepStart:
    """Move plan ``plan_id``'s ready step ``extract`` to running at Run fence 2, as a start barrier does."""
    run_id, step_run_id = f"run-{plan_id}", f"sr-{plan_id}-extract"
    now = tx.now()
    assert tx.progress.cas_step_run(step_run_id=step_run_id, run_id=run_id, from_status=StepRunStatus.READY,
                                    from_fence=1, to_status=StepRunStatus.RUNNING, to_fence=2)
    seq = tx.progress.next_event_seq(run_id)
    event = _event(run_id, seq, now, step_run_id)
    tx.progress.insert_event(event)
    tx.progress.insert_mutation(ProgressMutation(
        id=f"mu-{plan_id}-extract-2", step_run_id=step_run_id, run_id=run_id, fence=2, kind=StepMutationKind.START,
        from_status=StepRunStatus.READY, to_status=StepRunStatus.RUNNING, run_fence=2, reason=None,
        invocation_id=invocation_id, event_id=event.id, created_at=now))
    start = StepStart(id=f"st-{plan_id}", run_id=run_id, step_run_id=step_run_id, step_fence=2, attempt=1,
                      invocation_id=invocation_id, target_id="tgt1", timeout_seconds=60,
                      deadline_at=now + timedelta(seconds=60), started_at=now)
    tx.progress.insert_start(start)
    assert tx.progress.cas_run(run_id=run_id, from_fence=1, to_fence=2, to_status=WorkflowRunStatus.RUNNING,
                               settled_at=None)
    return start


class ProgressContract(StoreContract):
    """Every ``ProgressPort`` operation on one backend (subclass as ``TestProgress``)."""

    @pytest.fixture
    def admitted(self, store: Store) -> Store:
        """A store with ``PACKAGE`` installed, a live target ``tgt1`` and plan ``plan1`` admitted (``extract`` ready,
        ``load`` waiting on it)."""

        def fn(tx: UnitOfWork) -> None:
            publish(tx, "pub1", "1.0.0")
            tx.catalog.insert_installation(installation_id="inst1", package_name=PACKAGE, publication_id="pub1",
                                           lock_digest=LOCK_1)
            tx.delivery.insert_target(target_id="tgt1", name="t1", url="sqlite:///tmp/t1.db", labels={})
            admit(tx, "plan1")

        store.transact(fn)
        return store

    def test_a_run_reads_back_with_its_step_runs(self, admitted: Store) -> None:
        run = admitted.read(lambda tx: tx.progress.get_run("run-plan1"))
        assert run is not None and type(run.status) is WorkflowRunStatus and run.status is WorkflowRunStatus.RUNNING
        assert (run.fence, run.cancel_requested_at, run.cancel_reason, run.settled_at) == (1, None, None, None)
        assert run.created_at.utcoffset() == timedelta(0)
        steps = admitted.read(lambda tx: tx.progress.step_runs("run-plan1"))
        assert [(s.step_key, s.status) for s in steps] == [("extract", StepRunStatus.READY),
                                                            ("load", StepRunStatus.WAITING)]
        assert admitted.read(lambda tx: tx.progress.get_run("nope")) is None
        assert admitted.read(lambda tx: tx.progress.next_event_seq("run-plan1")) == 4  # admitted + two created

    def test_a_step_run_moves_only_from_its_exact_status_and_fence(self, admitted: Store) -> None:
        def cas(from_status: StepRunStatus, from_fence: int) -> bool:
            return admitted.transact(lambda tx: tx.progress.cas_step_run(
                step_run_id="sr-plan1-extract", run_id="run-plan1", from_status=from_status, from_fence=from_fence,
                to_status=StepRunStatus.RUNNING, to_fence=from_fence + 1))

        assert not cas(StepRunStatus.WAITING, 1)  # wrong status
        assert not cas(StepRunStatus.READY, 2)  # wrong fence
        assert cas(StepRunStatus.READY, 1)
        assert not cas(StepRunStatus.READY, 1)  # moved already
        steps = {s.step_key: s for s in admitted.read(lambda tx: tx.progress.step_runs("run-plan1"))}
        assert (steps["extract"].status, steps["extract"].fence) == (StepRunStatus.RUNNING, 2)

    def test_the_run_moves_by_its_fence_and_settles_once(self, admitted: Store) -> None:
        def cas(from_fence: int, to: WorkflowRunStatus) -> bool:
            def fn(tx: UnitOfWork) -> bool:
                settled = None if to is WorkflowRunStatus.RUNNING else tx.now()
                return tx.progress.cas_run(run_id="run-plan1", from_fence=from_fence, to_fence=from_fence + 1,
                                           to_status=to, settled_at=settled)
            return admitted.transact(fn)

        assert not cas(2, WorkflowRunStatus.RUNNING)
        assert cas(1, WorkflowRunStatus.RUNNING)
        assert cas(2, WorkflowRunStatus.SUCCEEDED)
        assert not cas(3, WorkflowRunStatus.FAILED)  # settled: never moves again
        run = admitted.read(lambda tx: tx.progress.get_run("run-plan1"))
        assert run is not None and (run.status, run.fence) == (WorkflowRunStatus.SUCCEEDED, 3)
        assert run.settled_at is not None and run.settled_at.utcoffset() == timedelta(0)

    def test_a_run_takes_one_cancel_intent(self, admitted: Store) -> None:
        def intent(reason: str) -> bool:
            return admitted.transact(lambda tx: tx.progress.set_cancel_intent(run_id="run-plan1", from_fence=1,
                                                                              to_fence=2, reason=reason))

        assert intent("first")
        assert not intent("second")
        run = admitted.read(lambda tx: tx.progress.get_run("run-plan1"))
        assert run is not None and run.cancel_reason == "first" and run.fence == 2
        assert run.cancel_requested_at is not None

    def test_progress_rows_read_back_exactly_and_typed(self, admitted: Store) -> None:
        start = admitted.transact(lambda tx: _start_extract(tx, "plan1"))
        assert admitted.read(lambda tx: tx.progress.starts("run-plan1")) == [start]
        assert admitted.read(lambda tx: tx.progress.start_of_invocation("inv-x")) == start
        assert admitted.read(lambda tx: tx.progress.start_of_invocation("nope")) is None
        (mutation,) = admitted.read(lambda tx: tx.progress.mutations("run-plan1"))
        assert (mutation.kind, mutation.from_status, mutation.to_status, mutation.run_fence) == (
            StepMutationKind.START, StepRunStatus.READY, StepRunStatus.RUNNING, 2)
        assert type(mutation.kind) is StepMutationKind and type(mutation.to_status) is StepRunStatus

        def settle(tx: UnitOfWork) -> RunMutation:
            now = tx.now()
            event = _event("run-plan1", tx.progress.next_event_seq("run-plan1"), now,
                           kind=WorkflowEventType.RUN_FAILED)
            tx.progress.insert_event(event)
            row = RunMutation(id="rm-1", run_id="run-plan1", fence=3, kind=RunMutationKind.SETTLE,
                              from_status=WorkflowRunStatus.RUNNING, to_status=WorkflowRunStatus.FAILED, reason="r",
                              actor=None, event_id=event.id, created_at=now)
            tx.progress.insert_run_mutation(row)
            return row

        written = admitted.transact(settle)
        assert admitted.read(lambda tx: tx.progress.run_mutations("run-plan1")) == [written]

    def test_the_schema_refuses_a_second_verdict_and_a_step_started_twice_at_one_version(
            self, admitted: Store) -> None:
        admitted.transact(lambda tx: _start_extract(tx, "plan1"))

        def verdict(tx: UnitOfWork, fence: int) -> None:
            now = tx.now()
            event = _event("run-plan1", tx.progress.next_event_seq("run-plan1"), now,
                           kind=WorkflowEventType.RUN_FAILED)
            tx.progress.insert_event(event)
            tx.progress.insert_run_mutation(RunMutation(
                id=f"rm-{fence}", run_id="run-plan1", fence=fence, kind=RunMutationKind.SETTLE,
                from_status=WorkflowRunStatus.RUNNING, to_status=WorkflowRunStatus.FAILED, reason=None, actor=None,
                event_id=event.id, created_at=now))

        admitted.transact(lambda tx: verdict(tx, 3))
        refused(admitted, lambda tx: verdict(tx, 4), "a second verdict of one Run")

        def again(tx: UnitOfWork) -> None:
            now = tx.now()
            tx.progress.insert_start(StepStart(
                id="st-again", run_id="run-plan1", step_run_id="sr-plan1-extract", step_fence=2, attempt=2,
                invocation_id="inv-y", target_id="tgt1", timeout_seconds=60, deadline_at=now, started_at=now))

        refused(admitted, again, "a second start of one StepRun version")

    def test_the_candidate_pages_list_the_runs_that_can_advance(self, admitted: Store) -> None:
        def page(name: str, after: str = "", limit: int = 64) -> list[str]:
            return admitted.read(lambda tx: tx.progress.candidates(name, after=after, limit=limit))

        admitted.transact(lambda tx: admit(tx, "plan2"))
        assert page("ready") == ["run-plan1", "run-plan2"]
        assert page("ready", after="run-plan1") == ["run-plan2"]
        assert page("ready", limit=1) == ["run-plan1"]
        assert page("cancelling") == [] and page("verdicts") == []
        admitted.transact(lambda tx: tx.progress.set_cancel_intent(run_id="run-plan2", from_fence=1, to_fence=2,
                                                                   reason="stop"))
        assert page("cancelling") == ["run-plan2"]
        admitted.transact(lambda tx: _start_extract(tx, "plan1"))
        assert page("ready") == ["run-plan2"]  # plan1's only ready step is running now
        # A running step is a verdict candidate only once its task's invocation has a verdict; with no such
        # invocation row at all, never.
        assert page("verdicts") == []
        assert admitted.read(lambda tx: tx.progress.task_outcomes("run-plan1")) == []

    def test_runs_list_newest_first_and_by_status(self, admitted: Store, backend: ContractHarness) -> None:
        backend.advance(0.01)
        admitted.transact(lambda tx: admit(tx, "plan2"))
        assert [r.id for r in admitted.read(lambda tx: tx.progress.list_runs())] == ["run-plan2", "run-plan1"]
        assert [r.id for r in admitted.read(lambda tx: tx.progress.list_runs(limit=1))] == ["run-plan2"]
        admitted.transact(lambda tx: tx.progress.cas_run(run_id="run-plan1", from_fence=1, to_fence=2,
                                                         to_status=WorkflowRunStatus.CANCELLED, settled_at=tx.now()))
        assert [r.id for r in admitted.read(lambda tx: tx.progress.list_runs(status=WorkflowRunStatus.CANCELLED))] \
            == ["run-plan1"]
