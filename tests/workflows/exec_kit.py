"""Helpers of the workflow execution tests: a package with tasks and one workflow, released, installed and
delivered to a real SQLite target through the real services; Runs driven by the real worker."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delivery.kit import add_target, deliver, drain, release
from fencepost.store.base import Store
from fencepost.workflows.service import WorkflowService

SCHEMA = {"0001_items": "CREATE TABLE items (id INTEGER PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL);\n",
          "0002_log": "CREATE TABLE log (step TEXT NOT NULL, at INTEGER NOT NULL);\n"}
#: A task that never ends (a recursive CTE counting forever): only its deadline stops it.
ENDLESS = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n;\n"


def log_task(step: str) -> str:
    """A task that records that it ran (a row in the target's ``log``) and reads the items back."""
    return f"INSERT INTO log (step, at) VALUES ('{step}', 1);\nSELECT sku, qty FROM items ORDER BY sku;\n"


@dataclass(frozen=True)
class Steps:
    """``key -> (task id, needs)``; tasks ``id -> sql`` and optional ``id -> timeout_seconds``."""

    steps: Mapping[str, tuple[str, Sequence[str]]]
    tasks: Mapping[str, str]
    timeouts: Mapping[str, int] | None = None


def fan(width: int, *, task: str | None = None) -> Steps:
    """A fan-out and fan-in: ``root`` -> ``p001`` .. ``p<width>`` in parallel -> ``join`` (``width + 2`` steps),
    each step with its own task that logs its key (``log_task``), or runs ``task`` (SQL) after logging."""
    middle = [f"p{i:03d}" for i in range(1, width + 1)]
    steps: dict[str, tuple[str, Sequence[str]]] = {"root": ("t_root", ())}
    steps.update({key: (f"t_{key}", ("root",)) for key in middle})
    steps["join"] = ("t_join", tuple(middle))
    tasks = {f"t_{key}": log_task(key) + (task or "") for key in steps}
    return Steps(steps=steps, tasks=tasks)


def write_workflow_package(root: Path, name: str, shape: Steps, *, version: str = "1.0.0") -> Path:
    package = root / f"{name}-{version}"
    (package / "migrations").mkdir(parents=True)
    (package / "tasks").mkdir()
    lines = [f'[package]\nname = "{name}"\nversion = "{version}"\n']
    for task, sql in shape.tasks.items():
        (package / "tasks" / f"{task}.sql").write_text(sql, encoding="utf-8")
        lines.append(f'[[tasks]]\nid = "{task}"\nsource = "tasks/{task}.sql"\n')
        if shape.timeouts and task in shape.timeouts:
            lines.append(f"timeout_seconds = {shape.timeouts[task]}\n")
    steps = ", ".join("{{ key = \"{}\", task = \"{}\", needs = [{}] }}".format(k, t, ", ".join(f'"{n}"' for n in needs))
                      for k, (t, needs) in shape.steps.items())
    lines.append(f'[[workflows]]\nid = "flow"\nsteps = [{steps}]\n')
    (package / "fencepost-package.toml").write_text("".join(lines), encoding="utf-8")
    for mid, sql in SCHEMA.items():
        (package / "migrations" / f"{mid}.up.sql").write_text(sql, encoding="utf-8")
    return package


@dataclass(frozen=True)
class Installed:
    store: Store
    package: str
    target: str
    target_path: Path
    work_dir: Path

    def plan(self, plan_id: str = "plan-1", **kwargs: Any) -> dict[str, Any]:
        return WorkflowService(self.store).plan(self.package, "flow", plan_id=plan_id, target=self.target, **kwargs)

    def admit(self, plan_id: str = "plan-1") -> str:
        return WorkflowService(self.store).admit(self.plan(plan_id)).run_id

    def drain(self, run_id: str, *, seconds: float = 60.0) -> None:
        """Run the real worker (its coordinator sweep included) until the Run is settled, or fail."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            drain(self.store, self.work_dir)
            run = self.store.read(lambda tx: tx.progress.get_run(run_id))
            if run is not None and run.status.terminal:
                return
            time.sleep(0.06)  # past the coordinator sweep's interval
        raise AssertionError(f"run {run_id} did not settle within {seconds} s")

    def log(self) -> list[str]:
        """The steps whose task ran on the target, in the order they ran."""
        with sqlite3.connect(self.target_path) as conn:
            return [r[0] for r in conn.execute("SELECT step FROM log ORDER BY rowid")]


def install(store: Store, root: Path, shape: Steps, *, name: str = "shop", target: str = "t1") -> Installed:
    """Release (two rehearsal Attempts), publish, install and deliver ``shape``'s package to ``target`` (a new
    SQLite file in ``root``; several packages in one store need one target each, as their schemas are alike)."""
    work = root / "work"
    work.mkdir(exist_ok=True)
    package = write_workflow_package(root, name, shape)
    release(store, package, work)
    _, path = add_target(store, root, target)
    delivered = deliver(store, name, target, work)
    assert str(delivered.status) == "succeeded", delivered.error
    return Installed(store, name, target, path, work)
