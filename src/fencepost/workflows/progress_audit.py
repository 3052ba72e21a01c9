"""Audit of progressed Runs: every Run's progress ledger re-verified row by row (issue 18 "Proof"; ADR 0072).

Admission's cross-check (``fencepost.workflows.audit``) verifies what admission wrote and that each StepRun's
status and fence are those of its latest mutation. This audit verifies what came after, for every Run:

- **StepRun ledger**: the mutations of each StepRun form one chain from its ``create`` mutation: each later
  mutation's ``from_status`` is the previous one's ``to_status`` and its ``fence`` the previous one's plus one;
  each transition is one the StepRun state machine allows (``TRANSITIONS``: the ADR-0156 list, with
  ``running -> cancelled`` and ``lost -> succeeded|failed``); the StepRun row ends where its chain ends;
- **Run ledger**: the Run's fence is ``max(1, every step mutation's run_fence, every run mutation's fence)`` and
  those fences are exactly ``2..fence``, each once; the Run is ``running`` unless a ``settle`` run mutation
  says its status; ``settled_at`` is set exactly when it is terminal; the cancel intent is set exactly when a
  ``cancel_request`` row exists; a terminal Run has only terminal steps and the ADR-0226 aggregation of them;
- **events**: each mutation's event exists, belongs to the Run (and to the mutation's StepRun) and has the
  type of its change (``step.<to_status>``, ``workflow.cancel_requested``, ``workflow.<status>``); the Run's
  event sequence numbers are ``1..N`` without a gap;
- **start barrier**: each ``start`` mutation has exactly one ``workflow_step_starts`` row with its invocation
  and StepRun version, and an invocation whose idempotency key is ``progress.task_key`` of them; no StepRun has
  two starts at one version, nor a start without its ``start`` mutation; every StepRun that is running, lost or
  was settled from running has a start; each ``settle`` mutation names an invocation of its StepRun's starts and
  agrees with that invocation's verdict (``task.task_verdict``), except that a ``lost`` step's invocation may
  since have been resolved by an operator.

Each problem is one ``Finding("progress", <run id>, "<table> row <id>: column <column> ...")``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import partial

from fencepost.core.errors import IntegrityViolation
from fencepost.core.statuses import (
    RunMutationKind,
    StepMutationKind,
    StepRunStatus,
    WorkflowEventType,
    WorkflowRunStatus,
)
from fencepost.store.base import Store
from fencepost.store.host_records import InvocationRecord
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import Finding
from fencepost.store.workflow_records import (
    ProgressMutation,
    RunMutation,
    RunState,
    StepMutationRow,
    StepRunRow,
    StepStart,
    TaskOutcome,
    WorkflowEventRow,
)
from fencepost.workflows.frontier import aggregate
from fencepost.workflows.progress import task_key
from fencepost.workflows.task import task_verdict

CHECK = "progress"

_S = StepRunStatus
_TERMINAL = frozenset(s for s in StepRunStatus if s.terminal)
#: The StepRun state machine (ADR-0156, ``pending`` being fencepost's ``waiting``; no ``waiting_approval``),
#: plus ``running -> cancelled`` (the task's own start check found the cancel intent) and
#: ``lost -> succeeded|failed`` (an operator's resolution of the task's invocation).
TRANSITIONS: dict[StepRunStatus, frozenset[StepRunStatus]] = {
    _S.WAITING: frozenset({_S.READY, _S.SKIPPED, _S.CANCELLED}),
    _S.READY: frozenset({_S.RUNNING, _S.FAILED, _S.SKIPPED, _S.CANCELLED, _S.TIMED_OUT}),
    _S.RUNNING: frozenset({_S.LOST}) | _TERMINAL,
    _S.LOST: frozenset({_S.READY, _S.FAILED, _S.CANCELLED, _S.SUCCEEDED}),
}
#: Statuses a StepRun can only be in (or have settled from) after a start barrier.
_STARTED = frozenset({_S.RUNNING, _S.LOST})


@dataclass(frozen=True)
class _Ledger:
    """Everything one Run's progress wrote, read in one snapshot."""

    run: RunState
    step_runs: list[StepRunRow]
    creates: list[StepMutationRow]
    mutations: list[ProgressMutation]
    run_mutations: list[RunMutation]
    events: list[WorkflowEventRow]
    starts: list[StepStart]
    invocations: dict[str, InvocationRecord]


def audit_progress(store: Store) -> list[Finding]:
    """One ``progress`` finding per problem of any Run's progress ledger (module docstring); empty when sound.

    Args:
        store: the control store (read only; one read unit per Run, so each Run is checked on one snapshot).
    Returns:
        Findings in Run (admission) order, each naming the table, the row and the column that disagrees.
    """
    run_ids = store.read(_run_ids)
    found: list[Finding] = []
    for plan_id, run_id in run_ids:
        try:
            ledger = store.read(partial(_read, plan_id=plan_id, run_id=run_id))
        except IntegrityViolation as error:  # a value outside its vocabulary: the store names the row
            found.append(Finding(CHECK, run_id, str(error)))
            continue
        if ledger is None:
            found.append(Finding(CHECK, run_id, f"workflow_runs row {run_id} of admission {plan_id} is missing"))
            continue
        found.extend(Finding(CHECK, run_id, problem) for problem in dict.fromkeys(check_ledger(ledger)))
    return found


def _run_ids(tx: UnitOfWork) -> list[tuple[str, str]]:
    pairs = []
    for plan_id in tx.admission.plan_ids():
        row = tx.admission.get(plan_id)
        if row is not None:
            pairs.append((plan_id, row.run_id))
    return pairs


def _read(tx: UnitOfWork, *, plan_id: str, run_id: str) -> _Ledger | None:
    run = tx.progress.get_run(run_id)
    if run is None:
        return None
    stored = tx.admission.stored(plan_id, run_id)
    starts = tx.progress.starts(run_id)
    invocations = {}
    for start in starts:
        invocation = tx.host.get_invocation(start.invocation_id)
        if invocation is not None:
            invocations[invocation.id] = invocation
    return _Ledger(run=run, step_runs=stored.step_runs,
                   creates=[m for m in stored.mutations if m.kind is StepMutationKind.CREATE],
                   mutations=tx.progress.mutations(run_id), run_mutations=tx.progress.run_mutations(run_id),
                   events=stored.events, starts=starts, invocations=invocations)


def check_ledger(ledger: _Ledger) -> list[str]:
    """The problems of one Run's ledger (empty when sound), each naming table, row and column."""
    return [*_step_chains(ledger), *_run_ledger(ledger), *_events(ledger), *_starts(ledger)]


def _step_chains(ledger: _Ledger) -> list[str]:
    problems: list[str] = []
    by_step: dict[str, list[ProgressMutation]] = {}
    for m in ledger.mutations:
        by_step.setdefault(m.step_run_id, []).append(m)
    creates = {m.step_run_id: m for m in ledger.creates}
    known = {s.id for s in ledger.step_runs}
    for step_run_id in sorted(set(by_step) - known):
        first = by_step[step_run_id][0]
        problems.append(f"workflow_step_mutations row {first.id}: column step_run_id names no StepRun of run "
                        f"{ledger.run.id}")
    for step in ledger.step_runs:
        create = creates.get(step.id)
        if create is None:
            problems.append(f"workflow_step_runs row {step.id}: its create mutation is missing")
            continue
        status, fence, previous = create.to_status, create.fence, create.id
        for m in sorted(by_step.get(step.id, []), key=lambda m: m.fence):
            where = f"workflow_step_mutations row {m.id}"
            if m.fence != fence + 1:
                problems.append(f"{where}: column fence is {m.fence}, not {fence + 1} (one above mutation "
                                f"{previous})")
            if m.from_status is not status:
                problems.append(f"{where}: column from_status is {m.from_status}, but the previous mutation "
                                f"{previous} left the step {status}")
            if m.to_status not in TRANSITIONS.get(m.from_status, frozenset()):
                problems.append(f"{where}: columns from_status, to_status: {m.from_status} -> {m.to_status} is "
                                "not a StepRun transition")
            problems.extend(_kind_problems(where, m))
            status, fence, previous = m.to_status, m.fence, m.id
        if (step.status, step.fence) != (status, fence):
            column = "status" if step.status is not status else "fence"
            problems.append(f"workflow_step_runs row {step.id}: column {column} is "
                            f"{getattr(step, column)}, its latest mutation {previous} says "
                            f"{status if column == 'status' else fence}")
    return problems


def _kind_problems(where: str, m: ProgressMutation) -> list[str]:
    """A mutation's kind says which change it is (``StepMutationKind``)."""
    start = (m.from_status, m.to_status) == (_S.READY, _S.RUNNING)
    if (m.kind is StepMutationKind.START) != start:
        return [f"{where}: column kind is {m.kind} for {m.from_status} -> {m.to_status}"]
    if (m.kind is StepMutationKind.SETTLE) != (m.from_status in _STARTED):
        return [f"{where}: column kind is {m.kind} for {m.from_status} -> {m.to_status}"]
    return []


def _run_ledger(ledger: _Ledger) -> list[str]:
    run = ledger.run
    where = f"workflow_runs row {run.id}"
    problems: list[str] = []
    fences = [m.run_fence for m in ledger.mutations] + [m.fence for m in ledger.run_mutations]
    expected = max([1, *fences])
    if run.fence != expected:
        problems.append(f"{where}: column fence is {run.fence}, its ledgers end at {expected}")
    counted = Counter(fences)
    for fence, count in sorted(counted.items()):
        if count > 1:
            problems.append(f"{where}: run fence {fence} is taken by {count} mutations")
    missing = sorted(set(range(2, expected + 1)) - set(counted))
    if missing:
        problems.append(f"{where}: run fences {missing} have no mutation (workflow_step_mutations column "
                        "run_fence / workflow_run_mutations column fence)")
    settles = [m for m in ledger.run_mutations if m.kind is RunMutationKind.SETTLE]
    verdict = settles[0].to_status if settles else WorkflowRunStatus.RUNNING
    if run.status is not verdict:
        problems.append(f"{where}: column status is {run.status}, its run-level ledger says {verdict}")
    if (run.settled_at is not None) != run.status.terminal:
        problems.append(f"{where}: column settled_at is {'set' if run.settled_at else 'empty'} for a "
                        f"{run.status} Run")
    cancels = [m for m in ledger.run_mutations if m.kind is RunMutationKind.CANCEL_REQUEST]
    if (run.cancel_requested_at is not None) != bool(cancels):
        problems.append(f"{where}: column cancel_requested_at is {'set' if run.cancel_requested_at else 'empty'}"
                        f" with {len(cancels)} cancel_request rows in workflow_run_mutations")
    for m in settles:
        later = [s.run_fence for s in ledger.mutations if s.run_fence > m.fence]
        later += [c.fence for c in ledger.run_mutations if c.fence > m.fence]
        if later:
            problems.append(f"workflow_run_mutations row {m.id}: column fence {m.fence} is not the Run's last "
                            f"(fences {sorted(later)} follow its verdict)")
    if run.status.terminal:
        open_steps = sorted(s.step_key for s in ledger.step_runs if not s.status.terminal)
        if open_steps:
            problems.append(f"{where}: column status is {run.status} while steps {open_steps} are not terminal")
        else:
            aggregated = aggregate(s.status for s in ledger.step_runs)
            if aggregated is not run.status:
                problems.append(f"{where}: column status is {run.status}, its steps aggregate to {aggregated}")
    return problems


def _events(ledger: _Ledger) -> list[str]:
    run = ledger.run
    problems: list[str] = []
    events = {e.id: e for e in ledger.events}
    seqs = sorted(e.seq for e in ledger.events)
    if seqs != list(range(1, len(seqs) + 1)):
        duplicated = sorted(s for s, n in Counter(seqs).items() if n > 1)
        gaps = sorted(set(range(1, (seqs[-1] if seqs else 0) + 1)) - set(seqs))
        problems.append(f"workflow_events of run {run.id}: column seq is not 1..{len(seqs)} (gaps {gaps}, "
                        f"duplicates {duplicated})")
    wanted: list[tuple[str, str, WorkflowEventType, str | None]] = []
    for m in ledger.mutations:
        wanted.append((f"workflow_step_mutations row {m.id}", m.event_id, WorkflowEventType.of_step(m.to_status),
                       m.step_run_id))
    for r in ledger.run_mutations:
        kind = (WorkflowEventType.CANCEL_REQUESTED if r.kind is RunMutationKind.CANCEL_REQUEST
                else WorkflowEventType.of_run(r.to_status))
        wanted.append((f"workflow_run_mutations row {r.id}", r.event_id, kind, None))
    for where, event_id, event_type, step_run_id in wanted:
        event = events.get(event_id)
        if event is None:
            problems.append(f"{where}: column event_id names {event_id}, which is not an event of run {run.id}")
        elif event.type is not event_type:
            problems.append(f"workflow_events row {event_id}: column type is {event.type}, its mutation says "
                            f"{event_type}")
        elif event.step_run_id != step_run_id:
            problems.append(f"workflow_events row {event_id}: column step_run_id is {event.step_run_id}, its "
                            f"mutation's is {step_run_id}")
    return problems


def _starts(ledger: _Ledger) -> list[str]:
    run = ledger.run
    problems: list[str] = []
    keys = {s.id: s.step_key for s in ledger.step_runs}
    by_invocation: dict[str, list[StepStart]] = {}
    for start in ledger.starts:
        by_invocation.setdefault(start.invocation_id, []).append(start)
    versions = Counter((s.step_run_id, s.step_fence) for s in ledger.starts)
    for (step_run_id, fence), count in sorted(versions.items()):
        if count > 1:
            problems.append(f"workflow_step_starts of StepRun {step_run_id}: {count} starts at step_fence {fence}")
    start_mutations = [m for m in ledger.mutations if m.kind is StepMutationKind.START]
    claimed = set()
    for m in start_mutations:
        where = f"workflow_step_mutations row {m.id}"
        rows = [s for s in by_invocation.get(m.invocation_id or "", [])
                if s.step_run_id == m.step_run_id and s.step_fence == m.fence]
        if len(rows) != 1:
            problems.append(f"{where}: column invocation_id {m.invocation_id} has {len(rows)} workflow_step_starts "
                            f"rows at step_fence {m.fence}")
            continue
        claimed.add(rows[0].id)
        invocation = ledger.invocations.get(m.invocation_id or "")
        expected_key = task_key(run.id, keys.get(m.step_run_id, "?"), m.fence)
        if invocation is None:
            problems.append(f"workflow_step_starts row {rows[0].id}: column invocation_id names {m.invocation_id}, "
                            "which has no invocations row")
        elif invocation.idempotency_key != expected_key:
            problems.append(f"invocations row {invocation.id}: column idempotency_key is "
                            f"{invocation.idempotency_key}, not {expected_key}")
    for start in ledger.starts:
        if start.id not in claimed:
            problems.append(f"workflow_step_starts row {start.id}: no start mutation of StepRun {start.step_run_id}"
                            f" at step_fence {start.step_fence} with invocation {start.invocation_id}")
    started = {m.step_run_id for m in start_mutations}
    settled_from_running = {m.step_run_id for m in ledger.mutations if m.from_status in _STARTED}
    for step in ledger.step_runs:
        if (step.status in _STARTED or step.id in settled_from_running) and step.id not in {
                s.step_run_id for s in ledger.starts}:
            problems.append(f"workflow_step_runs row {step.id}: column status {step.status} (or its settlement) "
                            "needs a workflow_step_starts row, and it has none")
        elif step.status in _STARTED and step.id not in started:
            problems.append(f"workflow_step_runs row {step.id}: column status {step.status} without a start "
                            "mutation")
    problems.extend(_settlements(ledger))
    return problems


def _settlements(ledger: _Ledger) -> list[str]:
    """Each ``settle`` mutation agrees with its invocation's verdict (a lost step's may since be resolved)."""
    problems: list[str] = []
    starts_of = {s.invocation_id: s for s in ledger.starts}
    for m in ledger.mutations:
        if m.kind is not StepMutationKind.SETTLE:
            continue
        where = f"workflow_step_mutations row {m.id}"
        start = starts_of.get(m.invocation_id or "")
        if start is None or start.step_run_id != m.step_run_id:
            problems.append(f"{where}: column invocation_id {m.invocation_id} is not a start of its StepRun")
            continue
        invocation = ledger.invocations.get(start.invocation_id)
        if invocation is None:
            continue  # reported with the start
        verdict = task_verdict(TaskOutcome(m.step_run_id, invocation.id, str(invocation.status), invocation.error))
        if m.to_status is _S.LOST and (verdict is None or verdict.status in (_S.LOST, _S.SUCCEEDED, _S.FAILED)):
            if verdict is None:
                problems.append(f"{where}: column to_status is lost, its invocation {invocation.id} has no verdict")
            continue
        if verdict is None or verdict.status is not m.to_status:
            problems.append(f"{where}: column to_status is {m.to_status}, its invocation {invocation.id} "
                            f"({invocation.status}) says {verdict.status if verdict else 'no verdict yet'}")
    return problems
