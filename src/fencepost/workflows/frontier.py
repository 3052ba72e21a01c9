"""The frontier resolver: one pure pass over a Run's StepRuns (ADR 0072; the ADR-0226 rules).

Input: the Run's fence and status, its cancel intent, every StepRun (key, needs, status, fence) and the verdicts
the host has reached for steps past their start barrier. Output: the StepRun transitions of this pass, in
step-key order, each on the next Run fence, and the Run's terminal verdict when every step is terminal.

Rules, in the order one pass applies them:

1. **Verdicts.** A ``running`` step whose task's invocation has a verdict takes it (``succeeded``, ``failed``,
   ``timed_out``, ``cancelled`` when the task's own start check found the cancel intent, or ``lost`` when the
   host says ``reconciliation_required``); a ``lost`` step takes the verdict
   an operator resolved its invocation to (``succeeded`` or ``failed``).
2. **Cancel intent.** A cancelled Run's non-executing steps (``waiting``, ``ready``) become ``cancelled``;
   ``running`` and ``lost`` steps are left to finish or be resolved.
3. **Propagation** (only without cancel intent), in topological order so it completes within the pass: a
   ``waiting`` step becomes ``skipped`` (reason ``dependency_not_succeeded``) when any need is failed, skipped,
   cancelled or timed out, and ``ready`` when every need succeeded.
4. **Aggregation**, once every step is terminal: any ``failed`` or ``skipped`` step: ``failed``; else any
   ``timed_out``: ``timed_out``; else any ``cancelled``: ``cancelled``; else ``succeeded``.

A pass on a terminal Run changes nothing and answers ``settled``. A second pass over the first pass's result
changes nothing (idempotent). ``ready`` is a projection: starting a ready step is the start barrier's job
(``fencepost.workflows.progress``), not the resolver's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fencepost.core.statuses import StepRunStatus, WorkflowRunStatus

#: The reason of a step skipped because a need did not succeed (ADR-0226).
DEPENDENCY_NOT_SUCCEEDED = "dependency_not_succeeded"
#: The reason of a step cancelled by its Run's cancel intent.
CANCEL_REQUESTED = "cancel_requested"

_BLOCKING = frozenset({StepRunStatus.FAILED, StepRunStatus.SKIPPED, StepRunStatus.CANCELLED,
                       StepRunStatus.TIMED_OUT})
#: What a running step may become from its task's verdict, and a lost one from an operator's resolution.
_VERDICTS = {StepRunStatus.RUNNING: frozenset({StepRunStatus.SUCCEEDED, StepRunStatus.FAILED,
                                               StepRunStatus.TIMED_OUT, StepRunStatus.CANCELLED,
                                               StepRunStatus.LOST}),
             StepRunStatus.LOST: frozenset({StepRunStatus.SUCCEEDED, StepRunStatus.FAILED})}


@dataclass(frozen=True)
class StepState:
    """One StepRun as the resolver sees it. ``needs``: step keys; ``fence``: the StepRun's version (>= 1)."""

    key: str
    needs: tuple[str, ...]
    status: StepRunStatus
    fence: int


@dataclass(frozen=True)
class Verdict:
    """What the host decided for a step's task: ``status`` is the StepRun status it maps to; ``reason`` says why
    (the host's error, or the resolution), at most 1,000 characters."""

    status: StepRunStatus
    reason: str | None = None


@dataclass(frozen=True)
class Transition:
    """One StepRun mutation of a pass: ``step_fence`` is the StepRun's new version, ``run_fence`` the Run's fence
    after this mutation (consecutive within a pass, in step-key order)."""

    key: str
    from_status: StepRunStatus
    to_status: StepRunStatus
    reason: str | None
    step_fence: int
    run_fence: int


@dataclass(frozen=True)
class Resolution:
    """A pass's outcome. ``outcome``: ``settled`` (the Run was terminal already), ``advanced`` (transitions or a
    verdict) or ``unchanged``. ``run_status``: the Run's terminal verdict reached in this pass, else None.
    ``run_fence``: the Run's fence after the transitions. ``ready``: the keys ready after the pass, sorted."""

    outcome: str
    transitions: tuple[Transition, ...]
    run_status: WorkflowRunStatus | None
    run_fence: int
    ready: tuple[str, ...]


def aggregate(statuses: Iterable[StepRunStatus]) -> WorkflowRunStatus | None:
    """The Run's verdict over its step statuses, or None while any step is not terminal (ADR-0226 order)."""
    seen = set(statuses)
    if not seen or any(not s.terminal for s in seen):
        return None
    if seen & {StepRunStatus.FAILED, StepRunStatus.SKIPPED}:
        return WorkflowRunStatus.FAILED
    if StepRunStatus.TIMED_OUT in seen:
        return WorkflowRunStatus.TIMED_OUT
    if StepRunStatus.CANCELLED in seen:
        return WorkflowRunStatus.CANCELLED
    return WorkflowRunStatus.SUCCEEDED


def _topological(steps: Mapping[str, StepState]) -> list[str]:
    """Keys with every need before its dependents; ties in key order (Kahn's algorithm).

    Raises:
        ValueError: a need names no step, or the needs form a cycle.
    """
    pending = {k: set(s.needs) for k, s in steps.items()}
    unknown = sorted({n for needs in pending.values() for n in needs} - steps.keys())
    if unknown:
        raise ValueError(f"the steps' needs name unknown steps: {unknown!r}")
    order: list[str] = []
    free = sorted(k for k, needs in pending.items() if not needs)
    dependents: dict[str, list[str]] = {k: [] for k in steps}
    # Over the de-duplicated needs: a need named twice must not release its dependent twice.
    for key, needs in pending.items():
        for need in needs:
            dependents[need].append(key)
    while free:
        key = free.pop(0)
        order.append(key)
        for child in sorted(dependents[key]):
            pending[child].discard(key)
            if not pending[child]:
                free.append(child)
        free.sort()
    if len(order) != len(steps):
        raise ValueError("the steps' needs form a cycle or name unknown steps")
    return order


def resolve(steps: Iterable[StepState], *, run_status: WorkflowRunStatus, run_fence: int,
            cancel_requested: bool = False, verdicts: Mapping[str, Verdict] | None = None) -> Resolution:
    """One frontier pass (module docstring).

    Args:
        steps: every StepRun of the Run (keys unique; needs name keys of ``steps``).
        run_status, run_fence: the Run's exact status and fence as read in the pass's transaction.
        cancel_requested: the Run carries a cancel intent.
        verdicts: by step key, the host's verdicts for ``running`` and ``lost`` steps; a verdict a step's status
            cannot take (a ``lost`` for a lost step, anything for a waiting step) is ignored.
    Returns:
        The ``Resolution``.
    Raises:
        ValueError: duplicate keys, an unknown need or a cycle (the plan's rules exclude them).
    """
    by_key: dict[str, StepState] = {}
    for state in steps:
        if state.key in by_key:
            raise ValueError(f"duplicate step key {state.key!r}")
        by_key[state.key] = state
    order = _topological(by_key)
    if run_status.terminal:
        return Resolution("settled", (), None, run_fence,
                          tuple(sorted(k for k, s in by_key.items() if s.status is StepRunStatus.READY)))
    status = {k: s.status for k, s in by_key.items()}
    reason: dict[str, str | None] = {}
    for key, verdict in (verdicts or {}).items():
        if key in status and verdict.status in _VERDICTS.get(status[key], frozenset()):
            status[key], reason[key] = verdict.status, verdict.reason
    for key in order:
        if status[key] not in (StepRunStatus.WAITING, StepRunStatus.READY):
            continue
        if cancel_requested:
            status[key], reason[key] = StepRunStatus.CANCELLED, CANCEL_REQUESTED
        elif status[key] is StepRunStatus.WAITING:
            needs = [status[n] for n in by_key[key].needs]
            if any(n in _BLOCKING for n in needs):
                status[key], reason[key] = StepRunStatus.SKIPPED, DEPENDENCY_NOT_SUCCEEDED
            elif all(n is StepRunStatus.SUCCEEDED for n in needs):
                status[key], reason[key] = StepRunStatus.READY, None
    transitions: list[Transition] = []
    fence = run_fence
    for key in sorted(by_key):
        before = by_key[key]
        if status[key] is before.status:
            continue
        fence += 1
        transitions.append(Transition(key, before.status, status[key], reason.get(key), before.fence + 1, fence))
    run_verdict = aggregate(status.values())
    outcome = "advanced" if transitions or run_verdict is not None else "unchanged"
    ready = tuple(sorted(k for k, s in status.items() if s is StepRunStatus.READY))
    return Resolution(outcome, tuple(transitions), run_verdict, fence, ready)
