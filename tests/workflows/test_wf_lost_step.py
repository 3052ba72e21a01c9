"""A step whose task's outcome nobody can tell is ``lost``, the Run waits, and an operator's resolution of the task
invocation is the step's verdict (ADRs 0073, 0074). Real worker subprocesses SIGKILLed inside the task's target
transaction until the host's recovery budget is spent (host-spec H1, H4)."""

from __future__ import annotations

import time
from pathlib import Path

from exec_kit import Steps, install, log_task

from fencepost.core.statuses import InvocationStatus, StepRunStatus, WorkflowRunStatus
from fencepost.workflows.progress import advance
from fencepost.workflows.task import workflow_host
from fencepost.workflows.views import run_view
from helpers.processes import run_cli, start, worker_args
from helpers.store_backends import store_backend

CHAIN = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",))}, tasks={"ta": log_task("a"), "tb": log_task("b")})


def test_a_task_killed_at_every_claim_leaves_its_step_lost_until_an_operator_resolves_it(tmp_path: Path) -> None:
    with store_backend("sqlite-wal", tmp_path) as backend:
        store = backend.migrated()
        kit = install(store, tmp_path, CHAIN)
        run_id = kit.admit()
        host = workflow_host(store)
        # Every worker dies inside a's target transaction, before its COMMIT: nothing is applied, and the host
        # cannot know that. After the budget (5 claims) the next claim settles reconciliation_required. (The
        # workers start the step themselves: its deadline is on their clock, the real one, not this test's.)
        invocation = None
        for attempt in range(12):
            starts = store.read(lambda tx: tx.progress.starts(run_id))
            if starts:
                invocation = store.read(lambda tx, i=starts[0].invocation_id: tx.host.get_invocation(i))
                assert invocation is not None
                if invocation.status is InvocationStatus.RECONCILIATION_REQUIRED:
                    break
                assert invocation.status in (InvocationStatus.PENDING, InvocationStatus.RUNNING), invocation
            worker = start(worker_args(backend.url, tmp_path / "work", lease_seconds=1, poll_interval=0.05),
                           name=f"worker-{attempt}", stdout_path=tmp_path / f"worker-{attempt}.log",
                           crash="workflow.task:a:before-commit")
            deadline = time.monotonic() + 60
            while worker.proc.poll() is None and time.monotonic() < deadline:
                found = store.read(lambda tx: tx.progress.starts(run_id))
                settled = found and store.read(lambda tx, i=found[0].invocation_id: tx.host.get_invocation(i))
                if settled and settled.status is InvocationStatus.RECONCILIATION_REQUIRED:
                    break  # the claim past the budget settled it; this worker had nothing to crash on
                time.sleep(0.05)
            if worker.proc.poll() is None:
                worker.proc.kill()
            worker.proc.wait(timeout=10)
            time.sleep(1.1)  # past the dead worker's lease
        else:
            raise AssertionError("the invocation never reached its budget verdict")
        assert invocation is not None and "recovery attempts exhausted" in (invocation.error or "")
        start_row = starts[0]
        advance(store, host, run_id)
        steps = {s.step_key: s.status for s in store.read(lambda tx: tx.progress.step_runs(run_id))}
        assert steps == {"a": StepRunStatus.LOST, "b": StepRunStatus.WAITING}
        run = store.read(lambda tx: tx.progress.get_run(run_id))
        assert run is not None and run.status is WorkflowRunStatus.RUNNING  # it waits for the operator
        assert kit.log() == []  # every kill was before the target's COMMIT
        # The operator looks at the target (no row in its ledger) and resolves the task failed: the step fails,
        # its dependent is skipped, the Run fails.
        resolved = run_cli(["host", "resolve", start_row.invocation_id, "--failed", "--as", "ops:alice",
                            "--note", "no row in the target's fencepost_workflow_tasks ledger", "-d", backend.url])
        assert resolved.returncode == 0, resolved.describe()
        advance(store, host, run_id)
        steps = {s.step_key: s.status for s in store.read(lambda tx: tx.progress.step_runs(run_id))}
        assert steps == {"a": StepRunStatus.FAILED, "b": StepRunStatus.SKIPPED}
        run = store.read(lambda tx: tx.progress.get_run(run_id))
        assert run is not None and run.status is WorkflowRunStatus.FAILED
        # What status shows says who decided and why, before the verdict's own "outcome unknown" reason.
        shown = {s["key"]: s["reason"] for s in store.read(lambda tx: run_view(tx, run_id))["steps"]}
        assert shown["a"].startswith("resolved failed by ops:alice: no row in the target's "
                                     "fencepost_workflow_tasks ledger (before: "), shown["a"]
