"""The progress audit (``fencepost.workflows.progress_audit``): a clean progressed Run has no finding, and each
tampering of its progress ledger yields a finding naming the table, the row and the column (issue 18 "Proof").

Each case edits or deletes one stored row with plain SQL on a normal connection (nothing is disabled, so only
edits the schema lets through are possible), on both control-store backends (fixture ``control``). Progressed
Runs come from the real worker: a diamond that succeeded, one whose step failed, one cancelled mid-way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exec_kit import Installed, Steps, install, log_task
from wf_support import cli, cli_url, execute, opened_backend, raw

from fencepost.core.statuses import StepRunStatus
from fencepost.store.base import Store
from fencepost.store.workflow_records import ProgressMutation, StepRunRow
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.cancel import request_cancel
from fencepost.workflows.progress import advance
from fencepost.workflows.progress_audit import TRANSITIONS, audit_progress
from fencepost.workflows.task import workflow_host

DIAMOND = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",)), "c": ("tc", ("a",)), "d": ("td", ("b", "c"))},
                tasks={"ta": log_task("a"), "tb": log_task("b"), "tc": log_task("c"), "td": log_task("d")})


@dataclass(frozen=True)
class Progressed:
    kit: Installed
    run_id: str

    @property
    def store(self) -> Store:
        return self.kit.store

    def steps(self) -> dict[str, StepRunRow]:
        return {r.step_key: r for r in self.store.read(lambda tx: tx.progress.step_runs(self.run_id))}

    def mutations(self) -> list[ProgressMutation]:
        return self.store.read(lambda tx: tx.progress.mutations(self.run_id))

    def of(self, key: str, kind: str) -> ProgressMutation:
        sid = self.steps()[key].id
        return next(m for m in self.mutations() if m.step_run_id == sid and str(m.kind) == kind)

    def one_value(self, query: str) -> object:
        return self.store.read(lambda tx: raw(tx, query))[0][0]


def test_clean_succeeded_failed_and_cancelled_runs_have_no_finding(control: Store, tmp_path: Path) -> None:
    shape = Steps(steps=DIAMOND.steps, tasks={**DIAMOND.tasks, "tb": "INSERT INTO nowhere VALUES (1);\n"})
    kit = install(control, tmp_path, shape)
    failed = kit.admit("plan-failed")
    kit.drain(failed)
    cancelled = kit.admit("plan-cancelled")
    host = workflow_host(control)
    advance(control, host, cancelled)  # a starts; b, c, d wait
    request_cancel(control, cancelled, reason="stop", actor="test")
    kit.drain(cancelled)
    statuses = {r.step_key: r.status for r in control.read(lambda tx: tx.progress.step_runs(cancelled))}
    assert statuses["b"] is StepRunStatus.CANCELLED
    assert len(control.read(lambda tx: tx.progress.mutations(failed))) > 4  # really progressed
    assert audit_progress(control) == []
    assert audit_admissions(control) == []


def test_the_transition_table_is_the_adr_list_plus_the_two_additions() -> None:
    s = StepRunStatus
    assert s.CANCELLED in TRANSITIONS[s.RUNNING] and s.SUCCEEDED in TRANSITIONS[s.LOST]
    assert s.RUNNING not in TRANSITIONS[s.WAITING] and s.READY not in TRANSITIONS[s.RUNNING]
    assert not any(t.terminal for t in TRANSITIONS if t.terminal)


Tamper = Callable[[Progressed], tuple[str, list[str]]]


def _step_status(p: Progressed) -> tuple[str, list[str]]:
    sid = p.steps()["b"].id
    execute(p.store, f"UPDATE workflow_step_runs SET status = 'failed' WHERE id = '{sid}'")
    return sid, ["workflow_step_runs", "column status"]


def _step_fence(p: Progressed) -> tuple[str, list[str]]:
    sid = p.steps()["c"].id
    execute(p.store, f"UPDATE workflow_step_runs SET fence = fence + 1 WHERE id = '{sid}'")
    return sid, ["workflow_step_runs", "column fence"]


def _delete_settle(p: Progressed) -> tuple[str, list[str]]:
    m = p.of("d", "settle")
    execute(p.store, f"DELETE FROM workflow_step_mutations WHERE id = '{m.id}'")
    return p.run_id, ["workflow_runs", "run fences", str(m.run_fence)]


def _from_status(p: Progressed) -> tuple[str, list[str]]:
    m = p.of("b", "settle")
    execute(p.store, f"UPDATE workflow_step_mutations SET from_status = 'lost' WHERE id = '{m.id}'")
    return m.id, ["workflow_step_mutations", "column from_status"]


def _mutation_fence(p: Progressed) -> tuple[str, list[str]]:
    m = p.of("d", "settle")
    execute(p.store, f"UPDATE workflow_step_mutations SET fence = fence + 5 WHERE id = '{m.id}'")
    return m.id, ["workflow_step_mutations", "column fence"]


def _run_fence(p: Progressed) -> tuple[str, list[str]]:
    execute(p.store, f"UPDATE workflow_runs SET fence = fence + 1 WHERE id = '{p.run_id}'")
    return p.run_id, ["workflow_runs", "column fence"]


def _mutation_run_fence(p: Progressed) -> tuple[str, list[str]]:
    m = p.of("a", "start")
    top = int(str(p.one_value(f"SELECT fence FROM workflow_runs WHERE id = '{p.run_id}'")))
    execute(p.store, f"UPDATE workflow_step_mutations SET run_fence = {top + 7} WHERE id = '{m.id}'")
    return p.run_id, ["workflow_runs", "column fence"]


def _run_status(p: Progressed) -> tuple[str, list[str]]:
    execute(p.store, f"UPDATE workflow_runs SET status = 'failed' WHERE id = '{p.run_id}'")
    return p.run_id, ["workflow_runs", "column status"]


def _settled_at(p: Progressed) -> tuple[str, list[str]]:
    # The schema ties settled_at to status, so reopen the Run (status and settled_at together).
    execute(p.store, f"UPDATE workflow_runs SET status = 'running', settled_at = NULL WHERE id = '{p.run_id}'")
    return p.run_id, ["workflow_runs", "column status"]


def _delete_start(p: Progressed) -> tuple[str, list[str]]:
    sid = p.steps()["c"].id
    execute(p.store, f"DELETE FROM workflow_step_starts WHERE step_run_id = '{sid}'")
    return p.of("c", "start").id, ["workflow_step_mutations", "column invocation_id", "workflow_step_starts"]


def _start_fence(p: Progressed) -> tuple[str, list[str]]:
    sid = p.steps()["b"].id
    execute(p.store, f"UPDATE workflow_step_starts SET step_fence = step_fence + 3 WHERE step_run_id = '{sid}'")
    return p.of("b", "start").id, ["workflow_step_mutations", "step_fence"]


def _idempotency_key(p: Progressed) -> tuple[str, list[str]]:
    invocation = p.of("a", "start").invocation_id
    execute(p.store, f"UPDATE invocations SET idempotency_key = 'forged' WHERE id = '{invocation}'")
    return str(invocation), ["invocations", "column idempotency_key"]


def _invocation_verdict(p: Progressed) -> tuple[str, list[str]]:
    invocation = p.of("b", "settle").invocation_id
    execute(p.store, f"UPDATE invocations SET status = 'failed', error = 'forged' WHERE id = '{invocation}'")
    return p.of("b", "settle").id, ["workflow_step_mutations", "column to_status"]


def _event_seq_gap(p: Progressed) -> tuple[str, list[str]]:
    top = int(str(p.one_value(f"SELECT max(seq) FROM workflow_events WHERE run_id = '{p.run_id}'")))
    execute(p.store, f"UPDATE workflow_events SET seq = {top + 3} WHERE run_id = '{p.run_id}' AND seq = {top}")
    return p.run_id, ["workflow_events", "column seq"]


def _event_type(p: Progressed) -> tuple[str, list[str]]:
    m = p.of("c", "settle")
    execute(p.store, f"UPDATE workflow_events SET type = 'step.failed' WHERE id = '{m.event_id}'")
    return m.event_id, ["workflow_events", "column type"]


def _delete_run_settle(p: Progressed) -> tuple[str, list[str]]:
    execute(p.store, f"DELETE FROM workflow_run_mutations WHERE run_id = '{p.run_id}' AND kind = 'settle'")
    return p.run_id, ["workflow_runs", "column status"]


def _run_mutation_to_status(p: Progressed) -> tuple[str, list[str]]:
    execute(p.store, f"UPDATE workflow_run_mutations SET to_status = 'failed' WHERE run_id = '{p.run_id}'")
    return p.run_id, ["workflow_runs", "column status"]


def _duplicate_start(p: Progressed) -> tuple[str, list[str]]:
    """A second start row of StepRun a (another attempt, another invocation): the schema allows it."""
    sid = p.steps()["a"].id
    execute(p.store, "INSERT INTO workflow_step_starts (id, run_id, step_run_id, step_fence, attempt, invocation_id, "
                     "target_id, timeout_seconds, deadline_at, started_at) SELECT 'wss_forged', run_id, step_run_id, "
                     "step_fence + 10, 2, 'inv_forged', target_id, timeout_seconds, deadline_at, started_at "
                     f"FROM workflow_step_starts WHERE step_run_id = '{sid}'")
    return "wss_forged", ["workflow_step_starts", "no start mutation"]


TAMPERS: dict[str, Tamper] = {
    "step_run.status": _step_status, "step_run.fence": _step_fence, "mutation.deleted": _delete_settle,
    "mutation.from_status": _from_status, "mutation.fence": _mutation_fence, "run.fence": _run_fence,
    "mutation.run_fence": _mutation_run_fence, "run.status": _run_status, "run.reopened": _settled_at,
    "start.deleted": _delete_start, "start.step_fence": _start_fence, "invocation.key": _idempotency_key,
    "invocation.verdict": _invocation_verdict, "event.seq_gap": _event_seq_gap, "event.type": _event_type,
    "run_mutation.deleted": _delete_run_settle, "run_mutation.to_status": _run_mutation_to_status,
    "start.extra": _duplicate_start,
}


def test_each_tampering_is_a_finding_naming_table_row_and_column(control: Store, tmp_path: Path) -> None:
    """One progressed Run per case, all from one installation: each case's finding names its Run only (the
    other Runs, tampered or not yet, are never blamed for it)."""
    kit = install(control, tmp_path, DIAMOND)
    runs = {case: kit.admit(f"plan-{n}") for n, case in enumerate(sorted(TAMPERS))}
    for run_id in runs.values():
        kit.drain(run_id)
    assert audit_progress(control) == []
    blamed: set[str] = set()
    for case, run_id in runs.items():
        row, needles = TAMPERS[case](Progressed(kit, run_id))
        findings = [f for f in audit_progress(control) if f.subject not in blamed]
        assert findings, f"{case}: no finding"
        assert {f.check for f in findings} == {"progress"} and {f.subject for f in findings} == {run_id}, case
        named = [f.detail for f in findings if row in f.detail and all(n in f.detail for n in needles)]
        assert named, f"{case}: no finding names {row} and {needles}: {[f.detail for f in findings]}"
        blamed.add(run_id)


def test_fencepost_audit_reports_a_progress_finding(tmp_path: Path) -> None:
    with opened_backend("sqlite-wal", tmp_path) as backend:
        kit = install(backend.migrated(), tmp_path, DIAMOND)
        run_id = kit.admit()
        kit.drain(run_id)
        sound = cli(cli_url(backend), "audit", "--json")
        assert sound.returncode == 0, sound.describe()
        execute(kit.store, f"UPDATE workflow_runs SET fence = fence + 1 WHERE id = '{run_id}'")
        found = cli(cli_url(backend), "audit", "--json")
        assert found.returncode == 1, found.describe()
        findings = found.json()["findings"]
        assert [f["check"] for f in findings] == ["progress"], findings
        assert findings[0]["subject"] == run_id and "column fence" in findings[0]["detail"]
