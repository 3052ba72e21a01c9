"""Package SQL may read fencepost's ledgers on a target but never change them (ADR 0102): a task that wipes the
task ledger, forges the delivery ledger or hides either behind a trigger is refused, rolled back and fails its
step; the ledgers stay as fencepost wrote them, so a recovered step still finds its row (a break-it trial ran
one step twice by deleting it). On every control-store backend; the target is a real SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from exec_kit import Steps, install, log_task

from fencepost.core.statuses import StepRunStatus, WorkflowRunStatus
from fencepost.store.base import Store
from fencepost.workflows.views import run_view

TAMPERING = {
    "wipe": "DELETE FROM fencepost_workflow_tasks;\n",
    "forge": "UPDATE fencepost_delivery SET checksum = 'sha256:' || hex(zeroblob(32));\n",
    "reserved": "CREATE TABLE Fencepost_Shadow (x INTEGER);\n",
    "hidden": ("CREATE TRIGGER log_wipe AFTER INSERT ON log BEGIN DELETE FROM fencepost_workflow_tasks; END;\n"
               "INSERT INTO log (step, at) VALUES ('hidden', 2);\n"),
    "schema": "PRAGMA writable_schema = ON;\n",
    # The authorizer is told only the old name of a rename: these are caught by comparing the reserved objects
    # before and after (a verification trial ran a step twice through the temp one).
    "rename": "CREATE TABLE y (a);\nALTER TABLE y RENAME TO FENCEPOST_zzz;\n",
    "shadow": ("CREATE TEMP TABLE x (adapter_invocation_id TEXT PRIMARY KEY, run_id TEXT, step_key TEXT, task TEXT, "
               "task_digest TEXT, result TEXT, applied_at TEXT);\n"
               "ALTER TABLE temp.x RENAME TO fencepost_workflow_tasks;\n"),
}


def _ledgers(path: Path) -> tuple[list[tuple[str, str]], list[str]]:
    with sqlite3.connect(path) as conn:
        delivery = conn.execute("SELECT migration, checksum FROM fencepost_delivery ORDER BY migration").fetchall()
        objects = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                                              "ORDER BY name")]
        tasks = [r[0] for r in conn.execute("SELECT step_key FROM fencepost_workflow_tasks ORDER BY step_key")] \
            if "fencepost_workflow_tasks" in objects else []
    return delivery, [*tasks, "|", *objects]


def test_tasks_that_would_change_a_ledger_are_refused_and_the_ledgers_hold(control: Store, tmp_path: Path) -> None:
    steps = {"ins": ("t_ins", ())} | {key: (f"t_{key}", ()) for key in TAMPERING}
    tasks = {"t_ins": log_task("ins")} | {f"t_{key}": sql for key, sql in TAMPERING.items()}
    kit = install(control, tmp_path, Steps(steps=steps, tasks=tasks))
    delivery_before, _ = _ledgers(kit.target_path)
    run_id = kit.admit()
    kit.drain(run_id)
    view = control.read(lambda tx: run_view(tx, run_id))
    by_key = {s["key"]: s for s in view["steps"]}
    assert by_key["ins"]["status"] == str(StepRunStatus.SUCCEEDED)
    for key in TAMPERING:
        assert by_key[key]["status"] == str(StepRunStatus.FAILED), (key, by_key[key])
        assert "reserved for fencepost's ledgers" in by_key[key]["reason"], (key, by_key[key]["reason"])
        assert "rolled back, nothing was applied" in by_key[key]["reason"]
    assert view["status"] == str(WorkflowRunStatus.FAILED)
    delivery_after, rest = _ledgers(kit.target_path)
    assert delivery_after == delivery_before  # not forged
    tasks_after, objects = rest[:rest.index("|")], rest[rest.index("|") + 1:]
    assert tasks_after == ["ins"]  # not wiped: the one step that ran is still recorded
    assert "log_wipe" not in objects and not any(o.lower() in ("fencepost_shadow", "fencepost_zzz", "y")
                                                 for o in objects)
    assert kit.log() == ["ins"]
