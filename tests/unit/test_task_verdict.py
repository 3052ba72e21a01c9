"""The StepRun verdict of a task invocation's error text (``task_verdict``, ADR 0074): a marker counts only where
the host writes it, at the start of the text, never inside a task's own error message (found by breaking it)."""

from __future__ import annotations

import pytest

from fencepost.core.statuses import InvocationStatus, StepRunStatus
from fencepost.store.workflow_records import TaskOutcome
from fencepost.workflows.task import task_verdict

# The texts exactly as the host stores them (``step <name> failed: <reason>``, ``handler: <Type>: <message>``).
INTERRUPTED = ("step run failed: [task_timed_out] task endless of step slow passed its 2 s deadline on target t1 "
               "and was interrupted; rolled back, nothing was applied")
PAST_DEADLINE = ("step run failed: [task_timed_out] step slow reached its 2 s deadline before its task ran; "
                 "nothing was applied")
DEADLINE_REFUSED = ("handler: NotAllowed: not allowed by guard task_deadline: step slow reached its 2 s deadline "
                    "before its task started; nothing ran on the target")
CANCEL_REFUSED = ("handler: NotAllowed: not allowed by guard run_cancelled: run wfr_1 was cancelled before step a "
                  "started (maintenance); nothing ran on the target")


def verdict_of(error: str, status: InvocationStatus = InvocationStatus.FAILED) -> StepRunStatus | None:
    found = task_verdict(TaskOutcome("wsr_1", "inv_1", str(status), error))
    return None if found is None else found.status


@pytest.mark.parametrize(("error", "expected"), [
    (INTERRUPTED, StepRunStatus.TIMED_OUT),
    (PAST_DEADLINE, StepRunStatus.TIMED_OUT),
    (DEADLINE_REFUSED, StepRunStatus.TIMED_OUT),
    (CANCEL_REFUSED, StepRunStatus.CANCELLED),
])
def test_the_markers_the_host_writes_map_onto_their_step_verdicts(error: str, expected: StepRunStatus) -> None:
    assert verdict_of(error) is expected


@pytest.mark.parametrize("error", [
    "step run failed: task t failed on target t1: no such table: [task_timed_out]; rolled back, nothing was applied",
    "step run failed: task t failed on target t1: no such table: guard task_deadline; rolled back, nothing was "
    "applied",
    "step run failed: task t failed on target t1: no such column: guard run_cancelled; rolled back, nothing was "
    "applied",
    "step run failed: target t1: near \"[task_timed_out]\": syntax error; nothing was applied",
    "[task_timed_out] written by nobody the host knows",
    "handler: ValueError: not allowed by guard run_cancelled: a handler's other error",
])
def test_a_marker_word_inside_a_tasks_own_error_is_a_plain_failure(error: str) -> None:
    assert verdict_of(error) is StepRunStatus.FAILED


def test_a_marker_in_an_ambiguous_outcome_is_still_lost() -> None:
    assert verdict_of(INTERRUPTED, InvocationStatus.RECONCILIATION_REQUIRED) is StepRunStatus.LOST
