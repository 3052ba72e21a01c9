"""A version that adds no migration (a patch of task SQL only) runs its workflows on a target that already held the
previous version: the target's ledger names the version that *applied* each migration, so the task's start check
compares migrations and checksums, not version strings (found by the new-user trial: every step of 1.0.1 failed
with "holds shop at 1.0.0, not 1.0.1; deliver 1.0.1 to it first", and redelivering changed nothing)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from delivery.kit import deliver, release
from fencepost.store import open_store
from workflows.exec_kit import fan, install, log_task, write_workflow_package


def test_a_patch_version_without_migrations_runs_on_the_target_of_the_previous_one(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'control.db'}")
    store.migrate()
    try:
        shape = fan(1)
        kit = install(store, tmp_path, shape)  # 1.0.0, delivered to t1
        patched = replace(shape, tasks={**shape.tasks, "t_root": log_task("root-patched")})
        release(store, write_workflow_package(tmp_path, "shop", patched, version="1.0.1"), kit.work_dir)
        delivered = deliver(store, "shop", "t1", kit.work_dir)
        assert str(delivered.status) == "succeeded", delivered.error
        run_id = kit.admit("patched-1")
        kit.drain(run_id)
        run = store.read(lambda tx: tx.progress.get_run(run_id))
        assert run is not None and str(run.status) == "succeeded", run
        assert kit.log() == ["root-patched", "p001", "join"]  # 1.0.1's task ran, on the target 1.0.0 migrated
        with sqlite3.connect(kit.target_path) as conn:
            versions = {r[0] for r in conn.execute("SELECT version FROM fencepost_delivery")}
        assert versions == {"1.0.0"}  # the ledger still names the version that applied the migrations
    finally:
        store.close()
