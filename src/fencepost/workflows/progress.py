"""Advancing one Run: the frontier pass and the start barrier, in one transaction (ADRs 0072, 0073).

``advance(store, host, run_id)`` runs ONE control-store transaction (``workflow.advance``) that

1. locks the Run (PostgreSQL: its row ``FOR UPDATE``; SQLite: ``BEGIN IMMEDIATE``) and reads it, every StepRun
   and the verdict of every started step's task invocation. A terminal Run answers ``settled``: nothing is written;
2. applies the frontier resolver's transitions (``fencepost.workflows.frontier``) in step-key order, each a
   compare-and-set of the StepRun on its exact status and fence, onto consecutive Run fences, each with its
   ``step.<status>`` event and its mutation row;
3. unless the Run carries a cancel intent, passes the **start barrier** of each ready step (at most
   ``MAX_STARTS`` per transaction): re-checks the start guards (publication head and status, installation and
   lock, lifecycle disposition, quarantine, the Run's target still live), compares-and-sets the StepRun
   ``ready -> running``, bumps the Run fence, writes the ``step.running`` event, the ``start`` mutation and the
   barrier row, and only then submits the step's task as a host invocation *in the same transaction*. A false
   guard refuses every ready step of the Run (``ready -> failed``, reason ``start_refused: <guard>``); the
   resolver then skips their dependents in the same transaction;
4. when every step is terminal, settles the Run (aggregation; the run-level ledger's ``settle`` row and the
   ``workflow.<status>`` event), atomically with the round's transitions.

The task invocation commits with its barrier or not at all, so there is no window in which a step is
``running`` without an invocation, nor an invocation whose step never passed its barrier. After the barrier
the host's recovery rules decide (the task action is idempotent through its target's ledger); a step is never
started twice. Crash points: ``workflow.advance:before-commit`` / ``:after-commit`` (the store's named
transaction), and ``workflow.advance:after-start-<n>`` after the n-th barrier's writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.core.crashpoints import crashpoint
from fencepost.core.errors import Conflict, IntegrityViolation, NotAllowed, NotFound
from fencepost.core.ids import derived_id
from fencepost.core.statuses import (
    RunMutationKind,
    StepMutationKind,
    StepRunStatus,
    WorkflowEventType,
    WorkflowRunStatus,
)
from fencepost.host import Dispatch, Host
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import (
    ProgressMutation,
    PublicationRecord,
    RunMutation,
    RunState,
    StepRunRow,
    StepStart,
    WorkflowEventRow,
)
from fencepost.workflows.admission import check_guards
from fencepost.workflows.frontier import StepState, Transition, Verdict, resolve
from fencepost.workflows.plan import NormalizedPlan
from fencepost.workflows.task import TASK_ACTION_ID, task_params, task_verdict, timeout_of

#: Barriers one transaction passes at most; the next round starts the rest (bounded transactions).
MAX_STARTS = 64
#: Who submits a step's task invocation.
ACTOR = "fencepost.workflow"


@dataclass(frozen=True)
class Advance:
    """What one ``advance`` did. ``outcome``: ``settled`` (the Run was terminal before), ``advanced`` or
    ``unchanged``. ``started``: step keys whose barrier passed. ``run_status``: the Run's status after."""

    run_id: str
    outcome: str
    transitions: int
    started: tuple[str, ...]
    run_status: WorkflowRunStatus

    @property
    def changed(self) -> bool:
        return self.outcome == "advanced"


def task_key(run_id: str, step_key: str, step_fence: int) -> str:
    """The idempotency key of a step attempt's task invocation: Run, step and the StepRun version started."""
    return f"wf:{run_id}:{step_key}:{step_fence}"


class _Round:
    """The writes of one ``advance`` transaction, on the Run's counters as read at its start."""

    def __init__(self, tx: UnitOfWork, run: RunState) -> None:
        self.tx = tx
        self.run = run
        self.fence = run.fence
        self.seq = tx.progress.next_event_seq(run.id)
        self.now = tx.now()
        self._plan: dict[str, Any] | None = None
        self._attempts: dict[str, int] | None = None

    @property
    def plan(self) -> dict[str, Any]:
        """The Run's admitted plan, read once per round."""
        if self._plan is None:
            self._plan = _plan(self.tx, self.run)
        return self._plan

    def next_attempt(self, step_run_id: str) -> int:
        """The attempt number of a new start of ``step_run_id`` (its starts read once per round)."""
        if self._attempts is None:
            self._attempts = {}
            for start in self.tx.progress.starts(self.run.id):
                self._attempts[start.step_run_id] = max(self._attempts.get(start.step_run_id, 0), start.attempt)
        self._attempts[step_run_id] = self._attempts.get(step_run_id, 0) + 1
        return self._attempts[step_run_id]

    def event(self, event_type: WorkflowEventType, step_run_id: str | None, payload: dict[str, Any]) -> str:
        event_id = derived_id("wev", "workflow-event/v1", {"run_id": self.run.id, "seq": self.seq})
        self.tx.progress.insert_event(WorkflowEventRow(
            id=event_id, run_id=self.run.id, step_run_id=step_run_id, seq=self.seq, type=event_type,
            payload=canonical_json({"run_id": self.run.id, **payload}), created_at=self.now))
        self.seq += 1
        return event_id

    def step(self, row: StepRunRow, transition: Transition, kind: StepMutationKind,
             invocation_id: str | None = None) -> None:
        """One StepRun mutation: compare-and-set, event, mutation row (on the next Run fence)."""
        if transition.run_fence != self.fence + 1:
            raise IntegrityViolation(f"run {self.run.id}: transition of {row.step_key} is not on the next fence")
        if not self.tx.progress.cas_step_run(step_run_id=row.id, run_id=self.run.id,
                                             from_status=transition.from_status, from_fence=row.fence,
                                             to_status=transition.to_status, to_fence=transition.step_fence):
            raise Conflict(f"step {row.step_key} of run {self.run.id} moved under a locked Run")
        self.fence = transition.run_fence
        event_id = self.event(WorkflowEventType.of_step(transition.to_status), row.id, {
            "step_run_id": row.id, "step_key": row.step_key, "from": str(transition.from_status),
            "to": str(transition.to_status), "reason": transition.reason, "run_fence": transition.run_fence,
            "step_fence": transition.step_fence, "invocation_id": invocation_id})
        self.tx.progress.insert_mutation(ProgressMutation(
            id=derived_id("wsm", "workflow-step-mutation/v1", {"step_run_id": row.id, "fence": transition.step_fence}),
            step_run_id=row.id, run_id=self.run.id, fence=transition.step_fence, kind=kind,
            from_status=transition.from_status, to_status=transition.to_status, run_fence=transition.run_fence,
            reason=transition.reason, invocation_id=invocation_id, event_id=event_id, created_at=self.now))

    def settle(self, status: WorkflowRunStatus) -> None:
        """The Run's verdict: its fence, status and settled instant, the ledger row and ``workflow.<status>``."""
        fence = self.fence + 1
        if not self.tx.progress.cas_run(run_id=self.run.id, from_fence=self.run.fence, to_fence=fence,
                                        to_status=status, settled_at=self.now):
            raise Conflict(f"run {self.run.id} moved under its lock")
        event_id = self.event(WorkflowEventType.of_run(status), None, {"status": str(status), "run_fence": fence})
        self.tx.progress.insert_run_mutation(RunMutation(
            id=derived_id("wrm", "workflow-run-mutation/v1", {"run_id": self.run.id, "fence": fence}),
            run_id=self.run.id, fence=fence, kind=RunMutationKind.SETTLE, from_status=WorkflowRunStatus.RUNNING,
            to_status=status, reason=None, actor=None, event_id=event_id, created_at=self.now))
        self.fence = fence

    def close(self) -> None:
        """Move the Run to the round's last fence (when it did not settle)."""
        if self.fence != self.run.fence and not self.tx.progress.cas_run(
                run_id=self.run.id, from_fence=self.run.fence, to_fence=self.fence,
                to_status=WorkflowRunStatus.RUNNING, settled_at=None):
            raise Conflict(f"run {self.run.id} moved under its lock")


def _kind(transition: Transition) -> StepMutationKind:
    if transition.from_status in (StepRunStatus.RUNNING, StepRunStatus.LOST):
        return StepMutationKind.SETTLE
    if transition.to_status is StepRunStatus.CANCELLED:
        return StepMutationKind.CANCEL
    return StepMutationKind.ADVANCE


def _states(run_id: str, rows: dict[str, StepRunRow]) -> list[StepState]:
    """The resolver's view of the Run's StepRuns (``rows`` by step key).

    Raises:
        IntegrityViolation: a StepRun's needs are not a list of the Run's step keys (the plan's rules and the
            schema admit nothing else, so the row was edited behind our back).
    """
    states = []
    for row in rows.values():
        try:
            needs = parse_json(row.needs)
        except ValueError:
            needs = None
        if not isinstance(needs, list) or not all(isinstance(n, str) and n in rows for n in needs):
            raise IntegrityViolation(f"run {run_id}: the needs of step {row.step_key} ({row.needs[:200]}) are not "
                                     "a list of the run's step keys")
        states.append(StepState(row.step_key, tuple(needs), row.status, row.fence))
    return states


def advance(store: Store, host: Host, run_id: str) -> Advance:
    """Advance the Run ``run_id`` once (module docstring).

    Args:
        store: the control store. host: the workflow host (``fencepost.workflows.task.workflow_host``), which
            submits step tasks in this transaction.
    Returns:
        ``Advance``.
    Raises:
        NotFound: no such Run. IntegrityViolation: the Run's rows contradict each other (a row edited behind
        our back). StoreUnavailable / StoreBusy: the store failed (nothing of this round committed).
    """

    def unit(tx: UnitOfWork) -> Advance:
        tx.progress.lock_run(run_id)
        run = tx.progress.get_run(run_id)
        if run is None:
            raise NotFound(f"no workflow run {run_id}")
        if run.status.terminal:
            return Advance(run_id, "settled", 0, (), run.status)
        rows = {r.step_key: r for r in tx.progress.step_runs(run_id)}
        by_id = {r.id: r for r in rows.values()}
        verdicts: dict[str, Verdict] = {}
        outcomes = {o.step_run_id: o for o in tx.progress.task_outcomes(run_id)}
        for step_run_id, outcome in outcomes.items():
            verdict = task_verdict(outcome)
            if verdict is not None and step_run_id in by_id:
                verdicts[by_id[step_run_id].step_key] = verdict
        work = _Round(tx, run)
        cancel = run.cancel_requested_at is not None
        transitions = 0
        started: list[str] = []
        refused: str | None = None
        while True:
            try:
                resolution = resolve(_states(run_id, rows), run_status=run.status, run_fence=work.fence,
                                     cancel_requested=cancel, verdicts=verdicts)
            except ValueError as error:  # a cycle (or duplicate keys): rows edited behind our back
                raise IntegrityViolation(f"run {run_id}: {error}") from None
            for t in resolution.transitions:
                row = rows[t.key]
                invocation = outcomes[row.id].invocation_id if _kind(t) is StepMutationKind.SETTLE else None
                work.step(row, t, _kind(t), invocation)
                rows[t.key] = _moved(row, t)
                transitions += 1
            verdicts = {}  # verdicts are taken once; later passes of this round only propagate
            if resolution.run_status is not None:
                work.settle(resolution.run_status)
                return Advance(run_id, "advanced", transitions, tuple(started), resolution.run_status)
            ready = [k for k in resolution.ready if k not in started]
            if cancel or not ready or len(started) >= MAX_STARTS:
                break
            if refused is None:
                refused = _guard(tx, work.plan)
            if refused is not None:
                for key in ready:
                    row = rows[key]
                    t = Transition(key, StepRunStatus.READY, StepRunStatus.FAILED, refused, row.fence + 1,
                                   work.fence + 1)
                    work.step(row, t, StepMutationKind.REFUSE)
                    rows[key] = _moved(row, t)
                    transitions += 1
                continue  # the resolver skips the refused steps' dependents and may settle the Run
            publication = tx.catalog.get_publication(run.publication_id)
            target = tx.delivery.get_target(str(work.plan["target_id"]))
            if publication is None or target is None:
                raise IntegrityViolation(f"run {run.id}: its publication or target row is gone")
            for key in ready[:MAX_STARTS - len(started)]:
                _start(host, work, rows, key, publication, target)
                started.append(key)
                crashpoint(f"workflow.advance:after-start-{len(started)}")
            break
        work.close()
        changed = transitions or started
        return Advance(run_id, "advanced" if changed else "unchanged", transitions, tuple(started), run.status)

    return store.transact(unit, name="workflow.advance")


def _moved(row: StepRunRow, t: Transition) -> StepRunRow:
    return StepRunRow(id=row.id, run_id=row.run_id, step_key=row.step_key, task_id=row.task_id,
                      task_digest=row.task_digest, needs=row.needs, status=t.to_status, fence=t.step_fence,
                      created_at=row.created_at)


def _plan(tx: UnitOfWork, run: RunState) -> dict[str, Any]:
    admission = tx.admission.get(run.plan_id)
    if admission is None:
        raise IntegrityViolation(f"run {run.id} has no admission row")
    plan = parse_json(admission.plan)
    if not isinstance(plan, dict):
        raise IntegrityViolation(f"run {run.id}: its admission's plan is not an object")
    return plan


def _guard(tx: UnitOfWork, plan: dict[str, Any]) -> str | None:
    """The start guards of a step of the Run admitted with ``plan`` (ADR 0073): None when all hold, else the
    refusal reason."""
    tx.catalog.lock_package(str(plan["package"]))
    try:
        check_guards(tx, NormalizedPlan(plan, ""))
    except NotAllowed as refusal:
        return f"start_refused: {refusal}"[:1000]
    target_id = plan.get("target_id")
    if not isinstance(target_id, str):
        return "start_refused: not allowed by guard target: the run's plan names no target to run its tasks on"
    target = tx.delivery.get_target(target_id)
    if target is None or target.removed_at is not None:
        return f"start_refused: not allowed by guard target_live: target {target_id} was removed"
    return None


def _start(host: Host, work: _Round, rows: dict[str, StepRunRow], key: str, publication: PublicationRecord,
           target: TargetRecord) -> None:
    """The start barrier of the ready step ``key``, then its task's submission, in the round's transaction."""
    tx, run = work.tx, work.run
    row = rows[key]
    timeout = timeout_of(publication.definition, row.task_id)
    t = Transition(key, StepRunStatus.READY, StepRunStatus.RUNNING, None, row.fence + 1, work.fence + 1)
    idempotency_key = task_key(run.id, key, t.step_fence)
    invocation = host.invocation_id("default", "default", TASK_ACTION_ID, idempotency_key, tx)
    attempt = work.next_attempt(row.id)
    deadline = work.now + timedelta(seconds=timeout)
    work.step(row, t, StepMutationKind.START, invocation)
    tx.progress.insert_start(StepStart(
        id=derived_id("wss", "workflow-step-start/v1", {"step_run_id": row.id, "attempt": attempt}),
        run_id=run.id, step_run_id=row.id, step_fence=t.step_fence, attempt=attempt, invocation_id=invocation,
        target_id=target.id, timeout_seconds=timeout, deadline_at=deadline, started_at=work.now))
    rows[key] = _moved(row, t)
    params = task_params(run=run, step=row, step_fence=t.step_fence, attempt=attempt, publication=publication,
                         target=target, timeout_seconds=timeout, deadline_at=deadline)
    submitted = host.submit(TASK_ACTION_ID, params, actor=ACTOR, idempotency_key=idempotency_key,
                            mode=Dispatch(), tx=tx)
    if submitted.id != invocation:  # pragma: no cover - the id is derived the same way
        raise IntegrityViolation(f"step {key}: the task invocation is {submitted.id}, not {invocation}")
