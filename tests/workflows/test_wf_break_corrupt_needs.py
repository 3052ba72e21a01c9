"""A StepRun whose ``needs`` is not a list of its Run's step keys is an integrity violation of that one Run, never a
worker crash (issue 18, found by breaking it).

The schema only holds ``needs`` to a JSON array; an edit behind fencepost's back can still make it name a number,
a step that does not exist, or a cycle. The frontier resolver raised ``ValueError`` on them, out of ``advance``
and out of the coordinator sweep, so one corrupt Run stopped every worker's sweep. Now ``advance`` raises
``IntegrityViolation`` naming the Run and the step, and the sweep sets that Run aside (logged) and keeps serving
the others, as for any other integrity problem. Real parts: the released, installed and delivered package of
``exec_kit``, the real workflow host and coordinator, plain SQL for the corruption, on both control stores.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from exec_kit import Steps, install, log_task
from wf_support import execute

from fencepost.core.errors import IntegrityViolation
from fencepost.core.statuses import StepRunStatus
from fencepost.store.base import Store
from fencepost.workflows.coordinator import Coordinator
from fencepost.workflows.progress import advance
from fencepost.workflows.task import workflow_host

DIAMOND = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",)), "c": ("tc", ("a",)), "d": ("td", ("b", "c"))},
                tasks={"ta": log_task("a"), "tb": log_task("b"), "tc": log_task("c"), "td": log_task("d")})


def statuses(store: Store, run_id: str) -> dict[str, StepRunStatus]:
    return {r.step_key: r.status for r in store.read(lambda tx: tx.progress.step_runs(run_id))}


@pytest.mark.parametrize("corrupt", [
    {"b": "[1]"},                 # not a step key at all
    {"b": '["ghost"]'},           # a key no step of the Run has
    {"b": "[null]"},
    {"b": '[["a"]]'},             # not even hashable
    {"a": '["d"]'},               # a cycle a -> b -> d -> a
], ids=["number", "ghost", "null", "nested-list", "cycle"])
def test_corrupt_needs_set_one_run_aside_and_the_sweep_serves_the_others(
        corrupt: dict[str, str], control: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kit = install(control, tmp_path, DIAMOND)
    bad, good = kit.admit("plan-bad"), kit.admit("plan-good")
    for key, needs in corrupt.items():
        execute(control, f"UPDATE workflow_step_runs SET needs = '{needs}' "
                         f"WHERE run_id = '{bad}' AND step_key = '{key}'")
    host = workflow_host(control)
    before = control.read(lambda tx: tx.progress.get_run(bad))

    with pytest.raises(IntegrityViolation, match=bad):
        advance(control, host, bad)

    caplog.set_level(logging.INFO, logger="fencepost.workflow")
    coordinator = Coordinator(control, host)
    coordinator.run(control, 5.0)  # raised ValueError here before, whichever Run came first
    assert statuses(control, good)["a"] is StepRunStatus.RUNNING  # the other Run was served
    assert control.read(lambda tx: tx.progress.get_run(bad)) == before  # nothing of the corrupt Run was written
    refused = [r for r in caplog.records if getattr(r, "event", None) == "workflow_advance_refused"]
    assert [getattr(r, "run_id", None) for r in refused] == [bad], caplog.text
    coordinator.run(control, 5.0)  # set aside: not tried (nor logged) again at once
    assert len([r for r in caplog.records if getattr(r, "event", None) == "workflow_advance_refused"]) == 1
