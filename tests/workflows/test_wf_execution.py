"""Workflow execution end to end on every control-store backend: admission, the frontier, step starts through
the host against the Run's target, aggregation (ADRs 0072-0074)."""

from __future__ import annotations

from pathlib import Path

from exec_kit import ENDLESS, Steps, install, log_task

from delivery.kit import add_target
from fencepost.core.statuses import StepRunStatus, WorkflowRunStatus
from fencepost.store.base import Store
from fencepost.workflows.progress import advance
from fencepost.workflows.service import WorkflowService
from fencepost.workflows.task import workflow_host

DIAMOND = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",)), "c": ("tc", ("a",)), "d": ("td", ("b", "c"))},
                tasks={"ta": log_task("a"), "tb": log_task("b"), "tc": log_task("c"), "td": log_task("d")})


def statuses(store: Store, run_id: str) -> dict[str, StepRunStatus]:
    return {r.step_key: r.status for r in store.read(lambda tx: tx.progress.step_runs(run_id))}


def run_status(store: Store, run_id: str) -> WorkflowRunStatus:
    found = store.read(lambda tx: tx.progress.get_run(run_id))
    assert found is not None
    return found.status


def test_a_diamond_runs_to_succeeded_each_task_once_in_dependency_order(control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    run_id = kit.admit()
    kit.drain(run_id)
    assert run_status(control, run_id) is WorkflowRunStatus.SUCCEEDED
    assert set(statuses(control, run_id).values()) == {StepRunStatus.SUCCEEDED}
    ran = kit.log()
    assert sorted(ran) == ["a", "b", "c", "d"]
    assert ran[0] == "a" and ran[-1] == "d"
    # A replay on the settled Run answers settled and writes nothing.
    assert advance(control, workflow_host(control), run_id).outcome == "settled"


def test_a_failed_step_skips_its_dependents_and_fails_the_run(control: Store, tmp_path: Path) -> None:
    shape = Steps(steps=DIAMOND.steps, tasks={**DIAMOND.tasks, "tb": "INSERT INTO nowhere VALUES (1);\n"})
    kit = install(control, tmp_path, shape)
    run_id = kit.admit()
    kit.drain(run_id)
    assert run_status(control, run_id) is WorkflowRunStatus.FAILED
    assert statuses(control, run_id) == {"a": StepRunStatus.SUCCEEDED, "b": StepRunStatus.FAILED,
                                         "c": StepRunStatus.SUCCEEDED, "d": StepRunStatus.SKIPPED}
    assert sorted(kit.log()) == ["a", "c"]


def test_an_endless_task_is_interrupted_at_its_deadline_and_times_the_run_out(control: Store,
                                                                                tmp_path: Path) -> None:
    shape = Steps(steps={"a": ("ta", ()), "slow": ("endless", ("a",))},
                  tasks={"ta": log_task("a"), "endless": ENDLESS}, timeouts={"endless": 2})
    kit = install(control, tmp_path, shape)
    run_id = kit.admit()
    kit.drain(run_id)
    assert statuses(control, run_id) == {"a": StepRunStatus.SUCCEEDED, "slow": StepRunStatus.TIMED_OUT}
    assert run_status(control, run_id) is WorkflowRunStatus.TIMED_OUT
    mutations = control.read(lambda tx: tx.progress.mutations(run_id))
    timed_out = [m for m in mutations if m.to_status is StepRunStatus.TIMED_OUT]
    assert len(timed_out) == 1 and "2 s deadline" in (timed_out[0].reason or "")


def test_a_plan_without_a_target_is_admitted_and_its_steps_are_refused(control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    add_target(control, tmp_path, "t2")  # two live targets, one delivered to: the plan may name none
    plan = kit.plan()
    del plan["target_id"], plan["digest"]
    run_id = WorkflowService(control).admit(plan).run_id
    kit.drain(run_id)
    assert run_status(control, run_id) is WorkflowRunStatus.FAILED
    assert statuses(control, run_id)["a"] is StepRunStatus.FAILED
    refused = [m for m in control.read(lambda tx: tx.progress.mutations(run_id)) if m.step_run_id]
    assert any("guard target" in (m.reason or "") for m in refused)
    assert kit.log() == []
