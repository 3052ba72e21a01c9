"""Tampered admission evidence fails closed, naming the row (issue 6 "Proof"; ADR-0224 decision 3).

Each case edits one column of one stored row (or deletes an unreferenced row) with plain SQL on a normal
connection: no trigger, foreign key or CHECK is disabled, so only edits the schema lets through are
possible. Afterwards an exact replay of the plan raises ``IntegrityViolation`` naming the table and row,
writes nothing, and the audit reports exactly one finding, for that admission, naming the row; another
intact admission beside it stays clean. Through the CLI the replay exits 5 and ``fencepost audit`` exits 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from wf_support import World, assert_refused, backend_params, cli, opened_backend

from fencepost.core.errors import IntegrityViolation
from fencepost.workflows.admission import admit
from fencepost.workflows.audit import audit_admissions

OTHER = "sha256:" + "e" * 64
LATER = "'2030-01-01T00:00:00.000000Z'"


@dataclass(frozen=True)
class Case:
    table: str
    row: str        # which row the message must name: a placeholder of ``Ids``
    sql: str        # plain SQL with placeholders of ``Ids``


CASES: dict[str, Case] = {
    # the admission ledger row
    "admission.plan": Case("workflow_admissions", "plan",
                           "UPDATE workflow_admissions SET plan = replace(plan, '\"inputs\":{{}}', "
                           "'\"inputs\":{{\"x\":1}}') WHERE plan_id = '{plan}'"),
    "admission.final_fence": Case("workflow_admissions", "plan",
                                  "UPDATE workflow_admissions SET final_fence = 2 WHERE plan_id = '{plan}'"),
    "admission.receipt_id": Case("workflow_admissions", "plan",
                                 "UPDATE workflow_admissions SET receipt_id = 'wrc_forged' WHERE plan_id = '{plan}'"),
    "admission.admitted_at": Case("workflow_admissions", "plan",
                                  f"UPDATE workflow_admissions SET admitted_at = {LATER} WHERE plan_id = '{{plan}}'"),
    # the Run
    "run.plan_id": Case("workflow_runs", "run", "UPDATE workflow_runs SET plan_id = 'forged' WHERE id = '{run}'"),
    "run.workflow_id": Case("workflow_runs", "run",
                            "UPDATE workflow_runs SET workflow_id = 'weekly' WHERE id = '{run}'"),
    "run.created_at": Case("workflow_runs", "run",
                           f"UPDATE workflow_runs SET created_at = {LATER} WHERE id = '{{run}}'"),
    # a StepRun
    "step_run.step_key": Case("workflow_step_runs", "load_sr",
                              "UPDATE workflow_step_runs SET step_key = 'zzz' WHERE id = '{load_sr}'"),
    "step_run.task_id": Case("workflow_step_runs", "load_sr",
                             "UPDATE workflow_step_runs SET task_id = 'extract' WHERE id = '{load_sr}'"),
    "step_run.task_digest": Case("workflow_step_runs", "load_sr",
                                 f"UPDATE workflow_step_runs SET task_digest = '{OTHER}' WHERE id = '{{load_sr}}'"),
    "step_run.needs": Case("workflow_step_runs", "load_sr",
                           "UPDATE workflow_step_runs SET needs = '[]' WHERE id = '{load_sr}'"),
    "step_run.status": Case("workflow_step_runs", "load_sr",
                            "UPDATE workflow_step_runs SET status = 'ready' WHERE id = '{load_sr}'"),
    "step_run.fence": Case("workflow_step_runs", "extract_sr",
                           "UPDATE workflow_step_runs SET fence = 5 WHERE id = '{extract_sr}'"),
    "step_run.created_at": Case("workflow_step_runs", "extract_sr",
                                f"UPDATE workflow_step_runs SET created_at = {LATER} WHERE id = '{{extract_sr}}'"),
    # an event
    "event.step_run_id": Case("workflow_events", "load_ev",
                              "UPDATE workflow_events SET step_run_id = '{extract_sr}' WHERE id = '{load_ev}'"),
    "event.seq": Case("workflow_events", "load_ev", "UPDATE workflow_events SET seq = 9 WHERE id = '{load_ev}'"),
    "event.payload": Case("workflow_events", "admitted_ev",
                          "UPDATE workflow_events SET payload = replace(payload, '\"step_count\":2', "
                          "'\"step_count\":3') WHERE id = '{admitted_ev}'"),
    "event.created_at": Case("workflow_events", "extract_ev",
                             f"UPDATE workflow_events SET created_at = {LATER} WHERE id = '{{extract_ev}}'"),
    "event.deleted": Case("workflow_events", "admitted_ev", "DELETE FROM workflow_events WHERE id = '{admitted_ev}'"),
    # a StepRun mutation
    "mutation.fence": Case("workflow_step_mutations", "load_mu",
                           "UPDATE workflow_step_mutations SET fence = 2 WHERE id = '{load_mu}'"),
    "mutation.to_status": Case("workflow_step_mutations", "load_mu",
                               "UPDATE workflow_step_mutations SET to_status = 'ready' WHERE id = '{load_mu}'"),
    "mutation.created_at": Case("workflow_step_mutations", "extract_mu",
                                f"UPDATE workflow_step_mutations SET created_at = {LATER} WHERE id = '{{extract_mu}}'"),
    # an admission step
    "admission_step.task_id": Case("workflow_admission_steps", "load_key",
                                   "UPDATE workflow_admission_steps SET task_id = 'extract' "
                                   "WHERE plan_id = '{plan}' AND step_key = 'load'"),
    "admission_step.task_digest": Case("workflow_admission_steps", "load_key",
                                       f"UPDATE workflow_admission_steps SET task_digest = '{OTHER}' "
                                       "WHERE plan_id = '{plan}' AND step_key = 'load'"),
    "admission_step.needs": Case("workflow_admission_steps", "load_key",
                                 "UPDATE workflow_admission_steps SET needs = '[]' "
                                 "WHERE plan_id = '{plan}' AND step_key = 'load'"),
    "admission_step.event_id": Case("workflow_admission_steps", "load_key",
                                    "UPDATE workflow_admission_steps SET event_id = '{admitted_ev}' "
                                    "WHERE plan_id = '{plan}' AND step_key = 'load'"),
    "admission_step.deleted": Case("workflow_admission_steps", "load_key",
                                   "DELETE FROM workflow_admission_steps "
                                   "WHERE plan_id = '{plan}' AND step_key = 'load'"),
    # the receipt
    "receipt.receipt": Case("workflow_admission_receipts", "receipt",
                            "UPDATE workflow_admission_receipts SET receipt = replace(receipt, '\"final_fence\":1', "
                            "'\"final_fence\":2') WHERE id = '{receipt}'"),
    "receipt.receipt_digest": Case("workflow_admission_receipts", "receipt",
                                   f"UPDATE workflow_admission_receipts SET receipt_digest = '{OTHER}' "
                                   "WHERE id = '{receipt}'"),
    "receipt.deleted": Case("workflow_admission_receipts", "receipt",
                            "DELETE FROM workflow_admission_receipts WHERE id = '{receipt}'"),
}


def ids_of(receipt: dict[str, Any]) -> dict[str, str]:
    steps = {s["key"]: s for s in receipt["step_runs"]}
    return {"plan": receipt["plan_id"], "run": receipt["run_id"], "receipt": receipt["receipt_id"],
            "admitted_ev": receipt["admitted_event_id"], "load_key": f"{receipt['plan_id']}/load",
            "extract_sr": steps["extract"]["step_run_id"], "load_sr": steps["load"]["step_run_id"],
            "extract_ev": steps["extract"]["event_id"], "load_ev": steps["load"]["event_id"],
            "extract_mu": steps["extract"]["mutation_id"], "load_mu": steps["load"]["mutation_id"]}


@pytest.fixture(scope="module", params=backend_params(["sqlite-wal", "postgres"]))
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One installed package per backend for the module, with the intact admission ``intact`` beside the
    ones each case admits (``t-<case>``) and tampers with; no case touches another's rows."""
    tmp_path = tmp_path_factory.mktemp(str(request.param))
    with opened_backend(str(request.param), tmp_path) as backend:
        world = World(backend, backend.migrated(), tmp_path / "packages")
        world.ready()
        world.admit(world.plan("intact"))
        yield world


@pytest.mark.parametrize("case", sorted(CASES))
def test_tampering_fails_replay_and_audit_closed_naming_the_row(shared: World, case: str) -> None:
    world = shared
    plan_id = f"t-{case}"
    plan = world.plan(plan_id)
    ids = ids_of(world.admit(plan).receipt)
    assert world.admit(plan).outcome == "existing"
    spec = CASES[case]
    world.sql(spec.sql.format(**ids))
    row = ids[spec.row]
    before = world.counts()
    with pytest.raises(IntegrityViolation) as caught:
        admit(world.store, plan)
    message = str(caught.value)
    assert spec.table in message and row in message, message
    assert world.counts() == before
    findings = audit_admissions(world.store)
    assert {f.check for f in findings} == {"admission"}
    mine = [f for f in findings if f.subject == plan_id]
    assert len(mine) == 1, findings
    assert spec.table in mine[0].detail and row in mine[0].detail, mine[0].detail
    assert {f.subject for f in findings} <= {f"t-{c}" for c in CASES}, "an intact admission was reported"
    assert world.admit(world.plan("intact")).outcome == "existing"


# ── through the CLI: exit 5 on replay, exit 1 from the audit naming each admission and row ──
CLI_CASES = ("admission.final_fence", "run.workflow_id", "step_run.needs", "event.seq", "mutation.to_status",
             "admission_step.task_digest", "receipt.receipt")


@pytest.mark.slow
def test_cli_replay_of_tampered_evidence_exits_5_and_audit_names_every_row(lean_world: World,
                                                                            tmp_path: Path) -> None:
    """One admission per table, each tampered in a different row; every replay exits 5 naming its row and
    one ``fencepost audit`` reports one finding per admission, naming its row."""
    world = lean_world
    world.ready()
    rows: dict[str, tuple[Path, Case, str]] = {}
    runs: dict[str, str] = {}  # run id -> plan id
    for number, case in enumerate(CLI_CASES):
        plan_id = f"p{number}"
        plan_file = tmp_path / f"{plan_id}.json"
        plan_file.write_text(json.dumps(world.plan(plan_id)), encoding="utf-8")
        ids = ids_of(world.admit(world.plan(plan_id)).receipt)
        spec = CASES[case]
        world.sql(spec.sql.format(**ids))
        rows[plan_id] = (plan_file, spec, ids[spec.row])
        runs[ids["run"]] = plan_id
    intact = tmp_path / "intact.json"
    intact.write_text(json.dumps(world.plan("intact")), encoding="utf-8")
    created = cli(world.cli_url, "workflow", "admit", str(intact), "--json")
    assert created.returncode == 0 and created.json()["outcome"] == "created", created.describe()
    for plan_file, spec, row in rows.values():
        replay = cli(world.cli_url, "workflow", "admit", str(plan_file), "--json")
        assert_refused(replay, 5, spec.table, row)
    audit = cli(world.cli_url, "audit", "--json")
    assert audit.returncode == 1, audit.describe()
    report = audit.json()
    assert report["sound"] is False
    findings = {f["subject"]: f["detail"] for f in report["findings"] if f["check"] == "admission"}
    assert sorted(findings) == sorted(rows), report
    # The progress audit (ADR 0072) sees some of the same damage from the Run's side (an event gone from the
    # Run's sequence, a StepRun off its ledger); it names only tampered Runs, never the intact one.
    others = [f for f in report["findings"] if f["check"] != "admission"]
    assert all(f["check"] == "progress" and f["subject"] in runs for f in others), report
    for plan_id, (_, spec, row) in rows.items():
        assert spec.table in findings[plan_id] and row in findings[plan_id], (plan_id, findings[plan_id])
    text = cli(world.cli_url, "audit")
    assert text.returncode == 1
    assert all(f"FINDING admission: {plan_id}:" in text.stdout for plan_id in rows), text.describe()
