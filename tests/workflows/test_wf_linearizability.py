"""Linearizability of the start guard (ADR-0224 decision 2; issue 6 "Proof").

One process changes a guard (quarantines the installation, disables it, or moves the publication head by
publishing a new version) while three other processes admit fresh plans in a loop; every plan was built
before the change. The guard change and every admission are serialized transactions that read their
instant inside the serialized section (SQLite: after ``BEGIN IMMEDIATE``; PostgreSQL: after the package's
advisory lock), so durable data gives the commit order:

- every admission that stands was committed before the guard change (``admitted_at`` < the change's
  ``quarantined_at`` / disposition ``updated_at`` / head ``updated_at``), so none was committed after it;
- every refused attempt names the changed guard and left nothing behind, and every admitted plan was
  reported created by its process: refusal and durable absence agree exactly;
- real time agrees: an attempt that started after the change returned is refused, and one that returned
  before the change started stands.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from wf_support import PACKAGE, World, backend_params, opened_backend, raw

from fencepost.core.clock import from_iso
from fencepost.workflows.audit import audit_admissions
from helpers.processes import Process, kill_all, start

RACE = Path(__file__).with_name("wf_race.py")
WORKERS = 3
DEADLINE_S = 60.0

CHANGES = {  # action -> (guard refusing later admissions, SQL of the durable instant of the change)
    "quarantine": ("quarantine", "SELECT quarantined_at FROM installation_quarantines"),
    "disable": ("lifecycle_disposition", "SELECT updated_at FROM installation_dispositions"),
    "publish": ("publication_head", f"SELECT updated_at FROM package_heads WHERE package_name = '{PACKAGE}'"),
}


def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else from_iso(str(value))


def _durable(world: World, change_sql: str) -> tuple[datetime, dict[str, datetime]]:
    def unit(tx: Any) -> tuple[datetime, dict[str, datetime]]:
        changed = raw(tx, change_sql)
        assert len(changed) == 1, changed
        admitted = raw(tx, "SELECT plan_id, admitted_at FROM workflow_admissions")
        return _instant(changed[0][0]), {str(p): _instant(t) for p, t in admitted}

    return world.store.read(unit)


def _race_process(tmp_path: Path, name: str, *args: str) -> Process:
    """``wf_race.py ARGS`` as a subprocess, its output in ``<name>.log``."""
    return start(args, name=name, stdout_path=tmp_path / f"{name}.log", argv_prefix=[sys.executable, str(RACE)])


def _race(world: World, tmp_path: Path, action: str, plans: int) -> None:
    guard, change_sql = CHANGES[action]
    world.ready()
    planned = [world.plan(f"lin-{i:04d}") for i in range(plans)]   # every plan is built before the change
    plans_file = tmp_path / "plans.json"
    plans_file.write_text(json.dumps(planned), encoding="utf-8")
    new_version = world.package("2.0.0", load_sql="SELECT 3;")
    go = tmp_path / "go"
    url = world.cli_url
    outs = [tmp_path / f"admit-{i}.json" for i in range(WORKERS)]
    guard_out = tmp_path / "guard.json"
    processes = [_race_process(tmp_path, f"admit-{i}", "admit", url, str(plans_file), str(i), str(WORKERS),
                               str(outs[i]), str(go), str(DEADLINE_S)) for i in range(WORKERS)]
    processes.append(_race_process(tmp_path, "guard", "guard", url, action, str(new_version), str(plans // 4),
                                   str(guard_out), str(go), str(DEADLINE_S)))
    ready_by = time.monotonic() + DEADLINE_S   # every process imported and connected, then all go at once
    while not all(Path(f"{out}.ready").exists() for out in [*outs, guard_out]):
        assert time.monotonic() < ready_by, "a race process never became ready"
        assert all(p.alive for p in processes), "\n".join(p.describe() for p in processes)
        time.sleep(0.02)
    go.touch()
    try:
        for process in processes:
            assert process.wait_exit(DEADLINE_S + 30) == 0, process.describe()
    finally:
        kill_all(processes)

    records = [r for out in outs for r in json.loads(out.read_text(encoding="utf-8"))]
    change = json.loads(guard_out.read_text(encoding="utf-8"))
    assert len(records) == plans, "a worker stopped at its deadline"
    assert [r for r in records if "error" in r] == []
    created = {r["plan_id"] for r in records if r.get("outcome") == "created"}
    refused = {r["plan_id"]: r["refused"] for r in records if "refused" in r}
    assert len(created) + len(refused) == plans
    assert created and refused, f"vacuous race: {len(created)} admitted, {len(refused)} refused"
    assert set(refused.values()) == {guard}

    changed_at, admitted = _durable(world, change_sql)
    # durable commit order: every standing admission precedes the change; every refusal left nothing
    assert set(admitted) == created
    late = {p: t for p, t in admitted.items() if not t < changed_at}
    assert late == {}, f"admissions committed after the {action} at {changed_at}: {late}"
    # real time: after the change returned -> refused; done before it began -> admitted
    after = [r for r in records if r["t0"] > change["t1"]]
    before = [r for r in records if r["t1"] < change["t0"]]
    assert all("refused" in r for r in after), [r for r in after if "refused" not in r]
    assert all(r.get("outcome") == "created" for r in before), [r for r in before if "refused" in r]
    assert len(before) >= plans // 4 - WORKERS
    assert audit_admissions(world.store) == []


@pytest.mark.slow
@pytest.mark.parametrize("action", sorted(CHANGES))
@pytest.mark.parametrize("backend_name", backend_params(["sqlite-wal", "postgres"]))
def test_guard_change_linearizes_with_concurrent_admissions(backend_name: str, action: str, tmp_path: Path) -> None:
    with opened_backend(backend_name, tmp_path) as backend:
        _race(World(backend, backend.migrated(), tmp_path / "packages"), tmp_path, action, plans=90)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
@pytest.mark.parametrize("action", sorted(CHANGES))
@pytest.mark.parametrize("backend_name", backend_params([], soak=["sqlite-delete", "sqlite-wal", "postgres"]))
def test_guard_change_linearizes_soak(backend_name: str, action: str, round_: int, tmp_path: Path) -> None:
    with opened_backend(backend_name, tmp_path) as backend:
        _race(World(backend, backend.migrated(), tmp_path / "packages"), tmp_path, action, plans=240)


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", backend_params(["sqlite-wal", "postgres"], soak=["sqlite-delete"]))
def test_concurrent_admissions_of_the_same_plans_create_each_exactly_once(backend_name: str, tmp_path: Path) -> None:
    """Three processes admit the same plans (a client retrying after a lost COMMIT response, raced):
    each plan is created by exactly one of them, every other answer is ``existing`` with the same receipt."""
    with opened_backend(backend_name, tmp_path) as backend:
        world = World(backend, backend.migrated(), tmp_path / "packages")
        world.ready()
        plans = [world.plan(f"same-{i:03d}") for i in range(30)]
        plans_file = tmp_path / "plans.json"
        plans_file.write_text(json.dumps(plans), encoding="utf-8")
        go = tmp_path / "go"
        outs = [tmp_path / f"admit-{i}.json" for i in range(WORKERS)]
        processes = [_race_process(tmp_path, f"admit-{i}", "admit", world.cli_url, str(plans_file), "0", "1",
                                   str(out), str(go), str(DEADLINE_S)) for i, out in enumerate(outs)]
        time.sleep(0.5)
        go.touch()
        try:
            assert [p.wait_exit(DEADLINE_S + 30) for p in processes] == [0] * WORKERS
        finally:
            kill_all(processes)
        records = [r for out in outs for r in json.loads(out.read_text(encoding="utf-8"))]
        assert len(records) == WORKERS * len(plans)
        assert [r for r in records if "outcome" not in r] == []
        for plan in plans:
            answers = [r for r in records if r["plan_id"] == plan["plan_id"]]
            assert sorted(r["outcome"] for r in answers) == ["created"] + ["existing"] * (WORKERS - 1)
            assert len({json.dumps(r["receipt"], sort_keys=True) for r in answers}) == 1
        counts = world.counts(("workflow_admissions", "workflow_runs"))
        assert counts == {"workflow_admissions": len(plans), "workflow_runs": len(plans)}
        assert audit_admissions(world.store) == []
