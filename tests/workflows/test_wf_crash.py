"""Crash matrix of atomic admission (ADR-0224 "当前验证" item 6; issue 6 "Proof").

A real ``fencepost workflow admit`` subprocess is SIGKILLed (``FENCEPOST_CRASHPOINT``) after each insert of
a two-step admission and before COMMIT, at ``before-commit``, and at ``after-commit``. Afterwards:

- the process died by SIGKILL (return code -9) and printed nothing;
- no admission row is visible after a pre-COMMIT kill, a complete one after the post-COMMIT kill, as exact
  row counts of every workflow and package table;
- the store audit (``integrity_check``, ``foreign_key_check``, invariants, readiness cross-check) is clean;
- re-admitting answers ``created`` after a pre-COMMIT kill and ``existing`` (the stored receipt) after the
  post-COMMIT one, and ``fencepost audit`` then exits 0.

The default run covers every window on SQLite WAL/FULL; ``-m soak`` runs the full matrix on SQLite
DELETE/FULL, SQLite WAL/FULL and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wf_support import (
    ADMISSION_TABLES,
    World,
    backend_params,
    cli,
    expected_admission_counts,
    opened_backend,
    table_counts,
)

from fencepost.rehearsal.audit import audit
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.bundle import derive_bundle
from fencepost.workflows.plan import normalize_plan
from fencepost.workflows.progress_audit import audit_progress

STEPS = 2
# ADR-0224 decision 2.5: Run, workflow.admitted, then per step a StepRun, a step.created event and a
# mutation, the admission, per step an admission step, and the receipt.
INSERTS = 2 + 3 * STEPS + 1 + STEPS + 1
PRE_COMMIT = [f"workflow.admit:after-insert-{n}" for n in range(1, INSERTS + 1)] + ["workflow.admit:before-commit"]
POST_COMMIT = ["workflow.admit:after-commit"]
WINDOWS = PRE_COMMIT + POST_COMMIT

BACKENDS = backend_params(["sqlite-wal"], soak=["sqlite-delete", "sqlite-wal", "postgres"])


def _prepared(world: World, tmp_path: Path) -> tuple[Path, dict[str, object]]:
    world.ready()
    plan = world.plan("crash-plan")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    return plan_file, plan


def _clean(world: World) -> None:
    findings = audit(world.store) + audit_admissions(world.store) + audit_progress(world.store)
    assert findings == [], findings


@pytest.mark.slow
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("backend_name", BACKENDS)
def test_sigkill_at_every_admission_window(backend_name: str, window: str, tmp_path: Path) -> None:
    with opened_backend(backend_name, tmp_path) as backend:
        world = World(backend, backend.migrated(), tmp_path / "packages")
        plan_file, plan = _prepared(world, tmp_path)
        before = world.counts()
        assert {t: before[t] for t in ADMISSION_TABLES} == dict.fromkeys(ADMISSION_TABLES, 0)

        killed = cli(world.cli_url, "workflow", "admit", str(plan_file), "--json", crashpoint=window)
        assert killed.returncode == -9, killed.describe()
        assert killed.stdout == "", killed.describe()

        committed = window in POST_COMMIT
        after = table_counts(backend.open())            # a fresh connection sees only durable facts
        if committed:
            assert after == {**before, **expected_admission_counts(STEPS)}
        else:
            assert after == before
        _clean(world)

        readmit = cli(world.cli_url, "workflow", "admit", str(plan_file), "--json")
        assert readmit.returncode == 0, readmit.describe()
        answer = readmit.json()
        assert answer["outcome"] == ("existing" if committed else "created")
        assert answer["run_id"] == derive_bundle(normalize_plan(plan)).run_id
        stored = json.loads(world.workflows.show("crash-plan")["rows"]["workflow_admission_receipts"][0]["receipt"])
        assert answer["receipt"] == stored
        assert world.counts() == {**before, **expected_admission_counts(STEPS)}

        sound = cli(world.cli_url, "audit", "--json")
        assert sound.returncode == 0, sound.describe()
        assert sound.json()["sound"] is True and sound.json()["findings"] == []


@pytest.mark.slow
def test_the_windows_are_all_the_inserts(tmp_path: Path) -> None:
    """Arming the crash point one past the last insert kills nothing: the matrix misses no insert."""
    with opened_backend("sqlite-wal", tmp_path) as backend:
        world = World(backend, backend.migrated(), tmp_path / "packages")
        plan_file, _ = _prepared(world, tmp_path)
        done = cli(world.cli_url, "workflow", "admit", str(plan_file), "--json",
                   crashpoint=f"workflow.admit:after-insert-{INSERTS + 1}")
        assert done.returncode == 0, done.describe()
        assert done.json()["outcome"] == "created"
        assert world.counts(ADMISSION_TABLES) == expected_admission_counts(STEPS)
