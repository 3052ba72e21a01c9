"""Admission semantics on every backend (ADR-0224 decisions 2 and 3; issue 6 "Semantics").

Each test runs on sqlite-wal, sqlite-delete and postgres (``world`` is parametrized by the shared backend
fixtures; PostgreSQL unreachable fails). "Nothing written" is checked as exact row counts of every
workflow and package table, before and after.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from wf_support import ADMISSION_TABLES, PACKAGE, WORKFLOW, World, expected_admission_counts

from fencepost.core.clock import to_iso
from fencepost.core.errors import Conflict, NotAllowed, StoreUnavailable
from fencepost.store.base import StoreBusy
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.sql.admission import INSERTS
from fencepost.workflows.admission import admit
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.bundle import derive_bundle
from fencepost.workflows.plan import normalize_plan

OTHER_DIGEST = "sha256:" + "9" * 64


def refused_with(world: World, plan: dict[str, Any], guard: str) -> NotAllowed:
    """Admission of ``plan`` is refused by ``guard``, naming it, and writes nothing at all."""
    before = world.counts()
    with pytest.raises(NotAllowed) as caught:
        world.admit(plan)
    assert caught.value.guard == guard
    assert f"guard {guard}" in str(caught.value)
    assert world.counts() == before
    return caught.value


def conflicted(world: World, plan: dict[str, Any], *needles: str) -> Conflict:
    before = world.counts()
    with pytest.raises(Conflict) as caught:
        world.admit(plan)
    for needle in needles:
        assert needle in str(caught.value), str(caught.value)
    assert world.counts() == before
    return caught.value


def stored_receipt(world: World, plan_id: str) -> dict[str, Any]:
    shown = world.workflows.show(plan_id)
    return dict(json.loads(shown["rows"]["workflow_admission_receipts"][0]["receipt"]))


# ── created, then existing ──
def test_created_then_existing_with_the_identical_original_receipt(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    empty = w.counts(ADMISSION_TABLES)
    assert set(empty.values()) == {0}
    first = w.admit(plan)
    assert first.outcome == "created"
    assert w.counts(ADMISSION_TABLES) == expected_admission_counts(steps=2)
    after_first = w.counts()
    second = w.admit(plan)
    assert second.outcome == "existing"
    assert (second.run_id, second.receipt) == (first.run_id, first.receipt)
    assert w.counts() == after_first
    assert stored_receipt(w, "p1") == first.receipt
    # the receipt is the plan's: its identities, the derived ids, and every StepRun with its status
    bundle = derive_bundle(normalize_plan(plan))
    receipt = first.receipt
    assert receipt["plan_digest"] == plan["digest"] and receipt["run_id"] == bundle.run_id == first.run_id
    assert receipt["receipt_id"] == bundle.receipt_id
    assert [(s["key"], s["status"], s["step_run_id"]) for s in receipt["step_runs"]] == [
        ("extract", "ready", bundle.step_run_ids["extract"]), ("load", "waiting", bundle.step_run_ids["load"])]
    admission = w.workflows.show(first.run_id)["admission"]
    assert receipt["admitted_at"] == to_iso(admission.admitted_at)
    assert audit_admissions(w.store) == []


def test_the_normalized_and_the_raw_form_of_one_plan_are_the_same_admission(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    raw = {k: v for k, v in plan.items() if k != "digest"}
    raw["steps"] = [{k: v for k, v in s.items() if k != "ready"} for s in reversed(plan["steps"])]
    created = w.admit(raw)
    assert created.outcome == "created"
    assert w.admit(plan).receipt == created.receipt


def test_the_stored_rows_are_the_running_run_and_its_steps(ready_world: World) -> None:
    w = ready_world
    result = w.admit(w.plan("p1"))
    rows = w.workflows.show("p1")["rows"]
    assert [(r["id"], r["status"], r["fence"]) for r in rows["workflow_runs"]] == [(result.run_id, "running", 1)]
    assert [(r["step_key"], r["status"], r["needs"]) for r in rows["workflow_step_runs"]] == [
        ("extract", "ready", "[]"), ("load", "waiting", '["extract"]')]
    assert [(r["seq"], r["type"]) for r in rows["workflow_events"]] == [
        (1, "workflow.admitted"), (2, "step.created"), (3, "step.created")]
    assert sorted(r["to_status"] for r in rows["workflow_step_mutations"]) == ["ready", "waiting"]


def test_distinct_plans_make_distinct_runs(ready_world: World) -> None:
    w = ready_world
    runs = {w.admit(w.plan(f"p{i}")).run_id for i in range(3)}
    assert len(runs) == 3
    assert w.counts(ADMISSION_TABLES) == expected_admission_counts(steps=2, admissions=3)


def test_the_same_plan_id_with_another_plan_is_a_conflict(ready_world: World) -> None:
    w = ready_world
    w.admit(w.plan("p1"))
    other = w.plan("p1", inputs={"day": "tomorrow"})
    conflicted(w, other, "already bound to another plan")


# ── guards: each false guard refuses, names itself and writes nothing ──
def test_publication_head_moved_by_a_newer_publish(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    w.publish("2.0.0")
    refused_with(w, plan, "publication_head")


def test_publication_withdrawn(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    w.catalog.withdraw(PACKAGE, "1.0.0")
    refused_with(w, plan, "publication_active")


def test_not_installed(world: World) -> None:
    w = world
    publication_id = w.publish()
    publication = w.catalog.state(PACKAGE).publications[0]
    workflow = publication.definition["workflows"][WORKFLOW]
    plan = {"format": 1, "plan_id": "p1", "package": PACKAGE, "publication_id": publication_id,
            "installation_id": "ins_never", "lock": OTHER_DIGEST, "workflow_id": WORKFLOW,
            "workflow_digest": workflow["digest"], "inputs": {},
            "steps": [{**s, "task_digest": publication.definition["tasks"][s["task"]]["digest"]}
                      for s in workflow["steps"]]}
    refused_with(w, plan, "installation_active")


def test_another_installation_than_the_plans(ready_world: World) -> None:
    w = ready_world
    plan = {k: v for k, v in w.plan("p1").items() if k != "digest"}
    plan["installation_id"] = "ins_someone_else"
    refused_with(w, plan, "installation_active")


def test_lock_mismatch_after_installing_another_version(world: World) -> None:
    w = world
    w.publish("1.0.0")
    w.ready("2.0.0")                        # head and installation at 2.0.0
    plan = w.plan("p1")
    w.catalog.install(PACKAGE, "1.0.0")     # the same installation, locked to another publication
    refused_with(w, plan, "installation_lock")
    w.catalog.install(PACKAGE, "2.0.0")     # the plan's lock again
    assert w.admit(plan).outcome == "created"


def test_disabled_then_enabled(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    w.catalog.set_disposition(PACKAGE, "disabled", "maintenance")
    refused_with(w, plan, "lifecycle_disposition")
    w.catalog.set_disposition(PACKAGE, "active")
    assert w.admit(plan).outcome == "created"


def test_quarantine_survives_enable_and_only_a_release_clears_it(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    w.catalog.quarantine(PACKAGE, "suspicious task")
    error = refused_with(w, plan, "quarantine")
    assert "suspicious task" in str(error)
    w.catalog.set_disposition(PACKAGE, "disabled", "also off")
    w.catalog.set_disposition(PACKAGE, "active")
    refused_with(w, plan, "quarantine")
    w.catalog.release_quarantine(PACKAGE, "cleared by review")
    assert w.admit(plan).outcome == "created"
    assert w.catalog.state(PACKAGE).quarantine is None


def test_a_quarantine_binds_the_exact_installation_and_lock(ready_world: World) -> None:
    w = ready_world
    w.catalog.quarantine(PACKAGE, "bad 1.0.0")
    refused_with(w, w.plan("p1"), "quarantine")
    w.ready("2.0.0")                        # a new lock for the same installation: not quarantined
    assert w.admit(w.plan("p2")).outcome == "created"
    with pytest.raises(Conflict):           # nothing to release at the current lock
        w.catalog.release_quarantine(PACKAGE, "wrong lock")


def test_guards_are_checked_in_order_head_first(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    w.catalog.quarantine(PACKAGE, "q")
    w.catalog.set_disposition(PACKAGE, "disabled")
    refused_with(w, plan, "lifecycle_disposition")
    w.publish("2.0.0")
    refused_with(w, plan, "publication_head")


# ── replay after a guard change returns the original receipt; a new plan is refused ──
GUARD_CHANGES: dict[str, tuple[Callable[[World], Any], str]] = {
    "quarantine": (lambda w: w.catalog.quarantine(PACKAGE, "incident"), "quarantine"),
    "withdraw": (lambda w: w.catalog.withdraw(PACKAGE, "1.0.0"), "publication_active"),
    "disable": (lambda w: w.catalog.set_disposition(PACKAGE, "disabled"), "lifecycle_disposition"),
    "newer-publish": (lambda w: w.publish("2.0.0"), "publication_head"),
}


@pytest.mark.parametrize("change", sorted(GUARD_CHANGES))
def test_replay_after_a_guard_change_returns_the_original_receipt(ready_world: World, change: str) -> None:
    w = ready_world
    plan, fresh = w.plan("p1"), w.plan("p2")
    original = w.admit(plan)
    act, guard = GUARD_CHANGES[change]
    act(w)
    before = w.counts()
    replay = w.admit(plan)
    assert (replay.outcome, replay.run_id, replay.receipt) == ("existing", original.run_id, original.receipt)
    assert w.counts() == before
    refused_with(w, fresh, guard)
    # a conflicting plan under the same id is still a conflict, not a guard refusal
    conflicted(w, {**{k: v for k, v in plan.items() if k != "digest"}, "inputs": {"x": 1}})


# ── drift of the workflow or a task against the publication ──
def _edited(plan: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    plan = {k: v for k, v in plan.items() if k != "digest"}
    plan["steps"] = [dict(s) for s in plan["steps"]]
    edit(plan)
    return plan


DRIFTS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "workflow-digest": (lambda p: p.update(workflow_digest=OTHER_DIGEST), "drifted"),
    "task-digest": (lambda p: p["steps"][1].update(task_digest=OTHER_DIGEST), "task load"),
    "task-swapped": (lambda p: p["steps"][1].update(task="extract"), "differ"),
    "needs-dropped": (lambda p: p["steps"][1].update(needs=[], ready=True), "differ"),
    "step-dropped": (lambda p: p["steps"].pop(), "differ"),
    "unknown-workflow": (lambda p: p.update(workflow_id="weekly"), "no workflow"),
}


@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_workflow_or_task_drift_is_a_conflict(ready_world: World, drift: str) -> None:
    w = ready_world
    edit, needle = DRIFTS[drift]
    conflicted(w, _edited(w.plan("p1"), edit), needle)
    assert w.admit(w.plan("p2")).outcome == "created"


# ── identity collisions roll back everything ──
NOW_SQL = "'2026-01-01T00:00:00.000000Z'"   # a time literal both backends accept


def test_a_run_identity_taken_by_another_plan_rolls_back_everything(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    bundle = derive_bundle(normalize_plan(plan))
    state = w.catalog.state(PACKAGE)
    assert state.installation is not None and state.head is not None
    w.sql("INSERT INTO workflow_runs (id, plan_id, installation_id, publication_id, workflow_id, status, fence, "
          f"created_at) VALUES ('{bundle.run_id}', 'someone-else', '{state.installation.id}', "
          f"'{state.head.publication_id}', '{WORKFLOW}', 'running', 1, {NOW_SQL})")
    conflicted(w, plan)
    assert w.catalog.state(PACKAGE).installation == state.installation


def _collide_late(w: World, table: str) -> tuple[dict[str, Any], int]:
    """Admit p1, then occupy one identity that p2's admission derives (a later insert), by p1's run.

    Returns p2 and the 1-based number of the insert that must fail."""
    first = w.admit(w.plan("p1"))
    mine = {s["key"]: s["step_run_id"] for s in first.receipt["step_runs"]}
    plan = w.plan("p2")
    b = derive_bundle(normalize_plan(plan))
    now = NOW_SQL
    if table == "workflow_step_runs":
        w.sql("INSERT INTO workflow_step_runs (id, run_id, step_key, task_id, task_digest, needs, status, fence, "
              f"created_at) VALUES ('{b.step_run_ids['load']}', '{first.run_id}', 'squatter', 'load', "
              f"'{OTHER_DIGEST}', '[]', 'waiting', 1, {now})")
        return plan, 4
    if table == "workflow_events":
        w.sql("INSERT INTO workflow_events (id, run_id, step_run_id, seq, type, payload, created_at) VALUES "
              f"('{b.step_event_ids['load']}', '{first.run_id}', '{mine['load']}', 9, 'step.created', "
              f"'{{\"run_id\":\"{first.run_id}\"}}', {now})")
        return plan, 6
    w.sql("INSERT INTO workflow_step_mutations (id, step_run_id, run_id, fence, kind, to_status, created_at) "
          f"VALUES ('{b.mutation_ids['load']}', '{mine['load']}', '{first.run_id}', 2, 'create', 'waiting', {now})")
    return plan, 8


@pytest.mark.parametrize("table", ["workflow_step_runs", "workflow_events", "workflow_step_mutations"])
def test_a_later_identity_collision_rolls_back_the_earlier_inserts(ready_world: World, table: str) -> None:
    w = ready_world
    plan, failing_insert = _collide_late(w, table)
    assert failing_insert > 1
    conflicted(w, plan)
    assert w.counts(("workflow_admissions",)) == {"workflow_admissions": 1}


# ── a write failure mid-admission rolls back everything ──
def admission_insert_order(steps: int) -> list[str]:
    """ADR-0224 decision 2.5, in order: Run, workflow.admitted, StepRuns, step.created events, mutations,
    the admission, its steps, the receipt."""
    return (["insert_workflow_run", "insert_workflow_event"] + ["insert_step_run"] * steps
            + ["insert_workflow_event"] * steps + ["insert_step_mutation"] * steps + ["insert_admission"]
            + ["insert_admission_step"] * steps + ["insert_admission_receipt"])


def test_the_bundle_inserts_in_adr_order(ready_world: World) -> None:
    bundle = derive_bundle(normalize_plan(ready_world.plan("p1")))
    records = bundle.records(ready_world.store.clock.now())
    assert [INSERTS[type(r)] for r in records] == admission_insert_order(2)


def _nth(order: list[str], number: int) -> tuple[str, int]:
    """(query name, occurrence of that name) of the ``number``-th insert."""
    name = order[number - 1]
    return name, order[:number].count(name)


@pytest.mark.parametrize("number", range(1, len(admission_insert_order(2)) + 1))
def test_a_write_failure_at_any_insert_rolls_back_everything(ready_world: World, number: int) -> None:
    w = ready_world
    plan = w.plan("p1")
    query, occurrence = _nth(admission_insert_order(2), number)
    faulty = FaultInjectingStore(w.store, nth=occurrence, query=query, message="disk full (injected)")
    before = w.counts()
    with pytest.raises(StoreUnavailable, match="injected"):
        admit(faulty, plan)
    assert faulty.fired == 1
    assert faulty.executed.count(query) == occurrence
    assert w.counts() == before
    assert w.admit(plan).outcome == "created"
    assert w.counts(ADMISSION_TABLES) == expected_admission_counts(steps=2)
    assert audit_admissions(w.store) == []


def test_a_busy_failure_mid_admission_retries_the_whole_transaction_once(ready_world: World) -> None:
    w = ready_world
    plan = w.plan("p1")
    faulty = FaultInjectingStore(w.store, nth=2, query="insert_step_mutation", error=StoreBusy)
    result = admit(faulty, plan)
    assert result.outcome == "created" and faulty.fired == 1
    assert faulty.executed.count("insert_workflow_run") == 2   # the first attempt rolled back whole
    assert w.counts(ADMISSION_TABLES) == expected_admission_counts(steps=2)
    assert audit_admissions(w.store) == []


# ── larger plans ──
def test_a_128_step_workflow_is_admitted_whole(world: World) -> None:
    w = world
    w.ready(extra_steps=126)
    result = w.admit(w.plan("big"))
    assert len(result.receipt["step_runs"]) == 128
    assert w.counts(ADMISSION_TABLES) == expected_admission_counts(steps=128)
    assert sum(s["status"] == "ready" for s in result.receipt["step_runs"]) == 1
    assert w.admit(w.plan("big")).receipt == result.receipt
    assert audit_admissions(w.store) == []
