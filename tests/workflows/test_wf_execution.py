"""Workflow execution end to end on every control-store backend: admission, the frontier, step starts through
the host against the Run's target, aggregation (ADRs 0072-0074)."""

from __future__ import annotations

from pathlib import Path

import pytest
from exec_kit import ENDLESS, Steps, install, log_task

from delivery.kit import add_target, deliver
from fencepost.catalog.lifecycle import CatalogService
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import StepRunStatus, WorkflowRunStatus
from fencepost.delivery import target_db
from fencepost.host.adapter import AdapterCall, PermanentFailure, Succeeded
from fencepost.rehearsal.service import release_gate
from fencepost.store.base import Store
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.cancel import request_cancel
from fencepost.workflows.progress import advance
from fencepost.workflows.service import WorkflowService
from fencepost.workflows.task import TIMED_OUT_MARK, TaskAdapter, workflow_host

DIAMOND = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",)), "c": ("tc", ("a",)), "d": ("td", ("b", "c"))},
                tasks={"ta": log_task("a"), "tb": log_task("b"), "tc": log_task("c"), "td": log_task("d")})


def statuses(store: Store, run_id: str) -> dict[str, StepRunStatus]:
    return {r.step_key: r.status for r in store.read(lambda tx: tx.progress.step_runs(run_id))}


def run_status(store: Store, run_id: str) -> WorkflowRunStatus:
    found = store.read(lambda tx: tx.progress.get_run(run_id))
    assert found is not None
    return found.status


def _schema(path: Path) -> tuple[str, list[str]]:
    with target_db.connect("t", str(path)) as conn:
        return target_db.fingerprint(conn)["fingerprint"], target_db.user_objects(conn)


def test_a_diamond_runs_to_succeeded_each_task_once_in_dependency_order(control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    before = _schema(kit.target_path)
    run_id = kit.admit()
    kit.drain(run_id)
    # The task ledger is fencepost's own table: not drift, not part of the schema a delivery compares.
    assert _schema(kit.target_path) == before
    assert run_status(control, run_id) is WorkflowRunStatus.SUCCEEDED
    assert set(statuses(control, run_id).values()) == {StepRunStatus.SUCCEEDED}
    ran = kit.log()
    assert sorted(ran) == ["a", "b", "c", "d"]
    assert ran[0] == "a" and ran[-1] == "d"
    # A replay on the settled Run answers settled and writes nothing.
    assert advance(control, workflow_host(control), run_id).outcome == "settled"
    # Admission's own cross-check still holds on the progressed Run (its StepRuns are those of their latest
    # mutations), and a re-admission of the plan returns the original receipt.
    assert audit_admissions(control) == []
    assert WorkflowService(control).admit(kit.plan()).outcome == "existing"


def test_a_failed_step_skips_its_dependents_and_fails_the_run(control: Store, tmp_path: Path) -> None:
    shape = Steps(steps=DIAMOND.steps, tasks={**DIAMOND.tasks, "tb": "INSERT INTO nowhere VALUES (1);\n"})
    kit = install(control, tmp_path, shape)
    run_id = kit.admit()
    kit.drain(run_id)
    assert run_status(control, run_id) is WorkflowRunStatus.FAILED
    assert statuses(control, run_id) == {"a": StepRunStatus.SUCCEEDED, "b": StepRunStatus.FAILED,
                                         "c": StepRunStatus.SUCCEEDED, "d": StepRunStatus.SKIPPED}
    assert sorted(kit.log()) == ["a", "c"]


def test_a_step_whose_target_file_is_gone_fails_saying_so_once(control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    run_id = kit.admit()
    kit.target_path.unlink()
    kit.drain(run_id)
    assert statuses(control, run_id)["a"] is StepRunStatus.FAILED
    (step,) = [s for s in WorkflowService(control).run(run_id)["steps"] if s["key"] == "a"]
    # the reason said "...; nothing was applied; nothing was applied" (a trial): the target's own message
    # already ends with it
    assert "database file" in step["reason"] and "does not exist" in step["reason"], step
    assert step["reason"].count("nothing was applied") == 1, step


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


def test_a_task_applied_before_a_crash_is_reported_applied_even_past_its_deadline(control: Store,
                                                                                  tmp_path: Path) -> None:
    """Recovery re-sends the step under the same adapter id: the target's ledger answers first, so a task that
    committed on the target is never reported timed out (or refused) afterwards, and never runs twice."""
    kit = install(control, tmp_path, DIAMOND)
    run_id = kit.admit()
    kit.drain(run_id)
    start = next(s for s in control.read(lambda tx: tx.progress.starts(run_id)))
    invocation = control.read(lambda tx: tx.host.get_invocation(start.invocation_id))
    assert invocation is not None
    params = dict(invocation.params)
    adapter = TaskAdapter(control)
    (row,) = control.read(lambda tx: tx.host.list_adapter_invocations(invocation.id))
    call = AdapterCall(row.id, "run_task",
                       {**params, "deadline_at": "2000-01-01T00:00:00.000000Z"})
    replay = adapter.execute(call)
    assert isinstance(replay, Succeeded) and replay.output["replayed"] is True
    # A fresh adapter id past its deadline is refused without running.
    fresh = adapter.execute(AdapterCall("ai_fresh", "run_task", {**params, "deadline_at": "2000-01-01T00:00:00Z"}))
    assert isinstance(fresh, PermanentFailure) and TIMED_OUT_MARK in fresh.reason
    assert sorted(kit.log()) == ["a", "b", "c", "d"]  # nothing ran again


def test_a_quarantine_refuses_new_step_starts_and_the_started_ones_finish(control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    run_id = kit.admit()
    host = workflow_host(control)
    assert advance(control, host, run_id).started == ("a",)  # a is past its barrier
    CatalogService(control, release_gate=release_gate).quarantine(kit.package, "key compromise")
    kit.drain(run_id)
    assert statuses(control, run_id) == {"a": StepRunStatus.SUCCEEDED, "b": StepRunStatus.FAILED,
                                         "c": StepRunStatus.FAILED, "d": StepRunStatus.SKIPPED}
    assert run_status(control, run_id) is WorkflowRunStatus.FAILED
    reasons = {m.to_status: m.reason for m in control.read(lambda tx: tx.progress.mutations(run_id))}
    assert "start_refused" in (reasons[StepRunStatus.FAILED] or "") and "quarantine" in (
        reasons[StepRunStatus.FAILED] or "")
    assert kit.log() == ["a"]


def test_cancel_stores_the_intent_first_and_the_run_settles_cancelled(control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    run_id = kit.admit()
    host = workflow_host(control)
    assert advance(control, host, run_id).started == ("a",)
    assert request_cancel(control, run_id, reason="operator asked", actor="ops").outcome == "requested"
    assert request_cancel(control, run_id, reason="again", actor="ops").outcome == "existing"
    # The intent alone changed no step: a's task is queued; the next advance cancels the waiting steps.
    assert statuses(control, run_id)["b"] is StepRunStatus.WAITING
    kit.drain(run_id)
    assert run_status(control, run_id) is WorkflowRunStatus.CANCELLED
    final = statuses(control, run_id)
    assert final["a"] is StepRunStatus.CANCELLED  # its task saw the intent at its own start check
    assert {final["b"], final["c"], final["d"]} == {StepRunStatus.CANCELLED}
    assert kit.log() == []  # nothing ran on the target
    ledger = control.read(lambda tx: tx.progress.run_mutations(run_id))
    assert [(str(m.kind), str(m.to_status)) for m in ledger] == [("cancel_request", "running"),
                                                                  ("settle", "cancelled")]
    assert ledger[0].fence < ledger[1].fence
    assert request_cancel(control, run_id, reason="late", actor="ops").outcome == "settled"


@pytest.mark.parametrize(("reason", "actor", "refused"), [
    ("r\x00x", "ops", "reason holds a NUL character"),
    ("stop", "o\x00ps", "actor holds a NUL character"),
    ("r\ud800x", "ops", "reason holds a lone surrogate")])
def test_a_cancel_reason_or_actor_no_backend_stores_is_refused_on_every_backend(
        control: Store, tmp_path: Path, reason: str, actor: str, refused: str) -> None:
    # SQLite stored a NUL in a reason and PostgreSQL answered a schema conflict (409) for it (a trial): both
    # refuse it as bad input now, before anything is written.
    kit = install(control, tmp_path, DIAMOND)
    run_id = kit.admit()
    with pytest.raises(InvalidInput, match=refused):
        WorkflowService(control).cancel(run_id, reason=reason, actor=actor)
    found = control.read(lambda tx: tx.progress.get_run(run_id))
    assert found is not None and found.cancel_requested_at is None
    assert control.read(lambda tx: tx.progress.run_mutations(run_id)) == []


def test_the_default_target_is_the_one_the_version_was_delivered_to_successfully(control: Store,
                                                                                 tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    _, broken = add_target(control, tmp_path, "t2")
    broken.unlink()  # its delivery fails: the file is gone
    failed = deliver(control, kit.package, "t2", kit.work_dir)
    assert str(failed.status) == "failed"
    plan = WorkflowService(control).plan(kit.package, "flow", plan_id="p-default")
    t1 = control.read(lambda tx: tx.delivery.get_live_target("t1"))
    assert t1 is not None and plan["target_id"] == t1.id


def test_a_named_target_without_a_successful_delivery_of_the_version_is_refused_at_planning(
        control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    add_target(control, tmp_path, "t2")  # live, never delivered to
    with pytest.raises(InvalidInput, match=r"holds no successful delivery of shop 1\.0\.0"):
        WorkflowService(control).plan(kit.package, "flow", plan_id="p-t2", target="t2")
    assert control.read(lambda tx: tx.progress.list_runs()) == []


def test_a_run_is_found_by_its_plan_id_too(control: Store, tmp_path: Path) -> None:
    kit = install(control, tmp_path, DIAMOND)
    run_id = kit.admit("nightly-2026-12-02")
    service = WorkflowService(control)
    assert service.run("nightly-2026-12-02")["run_id"] == run_id
    cancelled = service.cancel("nightly-2026-12-02", reason="by plan id", actor="ops")
    assert cancelled["run_id"] == run_id and cancelled["outcome"] == "requested"


def test_a_task_whose_own_error_quotes_a_marker_word_fails_and_is_not_timed_out_or_cancelled(
        control: Store, tmp_path: Path) -> None:
    """The markers of ADR 0074 are the host's words at the start of the error text; a task's own SQL error that
    quotes them (here: a missing table named after them) is a plain failure (found by breaking it)."""
    shape = Steps(steps={"a": ("ta", ()), "b": ("tb", ()), "c": ("tc", ())},
                  tasks={"ta": 'SELECT * FROM "[task_timed_out]";\n', "tb": 'SELECT * FROM "guard run_cancelled";\n',
                         "tc": 'SELECT * FROM "guard task_deadline";\n'})
    kit = install(control, tmp_path, shape)
    run_id = kit.admit()
    kit.drain(run_id)
    assert statuses(control, run_id) == {"a": StepRunStatus.FAILED, "b": StepRunStatus.FAILED,
                                         "c": StepRunStatus.FAILED}
    assert run_status(control, run_id) is WorkflowRunStatus.FAILED
    reasons = [m.reason or "" for m in control.read(lambda tx: tx.progress.mutations(run_id))
               if m.to_status is StepRunStatus.FAILED]
    assert len(reasons) == 3 and all("no such table" in r for r in reasons), reasons


def test_a_task_whose_result_holds_a_non_finite_number_fails_rolled_back_and_the_run_settles(
        control: Store, tmp_path: Path) -> None:
    """A step's result is JSON, which has no infinity or NaN: a task whose last result set holds one (SQLite reads
    ``1e999`` as inf) fails naming the column, its target transaction rolled back, and the Run settles. Found by
    breaking it: the target committed, the host read the output as unreadable, the step was lost for good."""
    shape = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",))},
                  tasks={"ta": log_task("a") + "SELECT 1 AS n, -1e999 AS ratio;\n", "tb": log_task("b")})
    kit = install(control, tmp_path, shape)
    run_id = kit.admit()
    kit.drain(run_id, seconds=20)
    assert statuses(control, run_id) == {"a": StepRunStatus.FAILED, "b": StepRunStatus.SKIPPED}
    assert run_status(control, run_id) is WorkflowRunStatus.FAILED
    (failed,) = [m for m in control.read(lambda tx: tx.progress.mutations(run_id))
                 if m.to_status is StepRunStatus.FAILED]
    assert "'ratio'" in (failed.reason or "") and "-inf" in (failed.reason or ""), failed.reason
    assert "rolled back" in (failed.reason or "")
    assert kit.log() == []  # the task's INSERT was rolled back
    with target_db.connect("t", str(kit.target_path)) as conn:  # no ledger row (its table's DDL rolled back too)
        ledger = conn.execute("SELECT name FROM sqlite_master WHERE name = ?",
                              (target_db.TASK_LEDGER_TABLE,)).fetchone()
        assert ledger is None or conn.execute(
            f'SELECT count(*) FROM "{target_db.TASK_LEDGER_TABLE}"').fetchone() == (0,)
