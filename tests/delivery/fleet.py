"""The fleet scenario of issue 17: N labelled SQLite targets delivered by real ``fencepost worker`` processes
while one target is held by another process's ``BEGIN EXCLUSIVE`` and another target's file is deleted after
the submission and before any worker starts (so which delivery meets the missing file is deterministic).

The package writes a row into its own table ``seen`` in every migration, so a migration applied twice would
show as two rows: "exactly once" is read from the target's data, not only from its ledger (whose primary key
would hide a second run).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delivery.kit import ledger, release, target_file, write_package
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.targets import TargetService
from fencepost.host import InvocationView
from fencepost.store import open_store
from fencepost.store.base import Store
from helpers.processes import Process, kill_all, run_cli, start, subprocess_env, worker_args

#: Three migrations; each records itself in ``seen`` (a second run would add a second row).
FLEET = {"0001_accounts": "CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n"
                          "CREATE TABLE seen (migration TEXT NOT NULL);\n"
                          "INSERT INTO seen VALUES ('0001_accounts');\n",
         "0002_orders": "CREATE TABLE orders (id INTEGER PRIMARY KEY, account_id INTEGER REFERENCES accounts (id));\n"
                        "CREATE INDEX orders_by_account ON orders (account_id);\n"
                        "INSERT INTO seen VALUES ('0002_orders');\n",
         "0003_notes": "ALTER TABLE accounts ADD COLUMN note TEXT;\n"
                       "INSERT INTO seen VALUES ('0003_notes');\n"}
LOCKED, DELETED = "t-000", "t-001"   # the first targets by name, so workers meet them first
LOCK_SECONDS = 10.0

_HOLDER = """\
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute('BEGIN EXCLUSIVE')
print('locked', flush=True)
sys.stdin.readline()  # held until the test says so
conn.execute('ROLLBACK')
print('released', flush=True)
"""


@dataclass
class FleetResult:
    """What the scenario observed: every delivery settled, the lock's release time, the workers' processes."""

    store: Store
    url: str
    paths: dict[str, Path]
    views: dict[str, InvocationView]
    released_at: float
    settled_at: dict[str, float]
    settled_while_locked: int
    wait_output: str
    wait_code: int


def run_fleet(url: str, tmp_path: Path, *, targets: int = 50, workers: int = 4,
              lock_seconds: float = LOCK_SECONDS, timeout: float = 120.0) -> FleetResult:
    """Release the ``FLEET`` package on the control store ``url``, add ``targets`` targets labelled
    ``fleet=f1``, submit the fleet with the real CLI, delete ``DELETED``'s file, lock ``LOCKED`` from another
    process for ``lock_seconds``, start ``workers`` real workers and a real ``install --wait`` that watches,
    and return once every delivery has a verdict (``timeout`` seconds at most)."""
    store = open_store(url, create=True)
    store.migrate()
    release(store, write_package(tmp_path, "fleet", "1.0.0", FLEET), tmp_path / "work")
    root = tmp_path / "targets"
    root.mkdir()
    paths: dict[str, Path] = {}
    service = TargetService(store)
    for i in range(targets):
        name = f"t-{i:03d}"
        paths[name] = target_file(root, name)
        service.add(name, f"sqlite://{paths[name]}", {"fleet": "f1", "shard": str(i % 2)})
    elsewhere = target_file(root, "elsewhere")
    service.add("elsewhere", f"sqlite://{elsewhere}", {"fleet": "f2"})
    env = subprocess_env()
    submitted = run_cli(["package", "install", "fleet", "--targets", "fleet=f1", "-d", url, "--json"], env=env)
    assert submitted.returncode == 0, submitted.describe()
    ids = {d["target"]: d["invocation_id"] for d in submitted.json()["deliveries"]}
    assert sorted(ids) == sorted(paths), "the selector chose other targets than the labelled fleet"
    paths["elsewhere"] = elsewhere
    paths[DELETED].unlink()  # after the submission, before any worker exists: its delivery meets no file
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(paths[LOCKED])], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    running: list[Process] = []
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"
        for n in range(workers):
            running.append(start(worker_args(url, tmp_path / f"w{n}", lease_seconds=6, poll_interval=0.05,
                                             worker_id=f"fleet-w{n}"), name=f"worker-{n}",
                                 stdout_path=tmp_path / f"w{n}.log", cwd=tmp_path, env=env))
        watcher = subprocess.Popen([sys.executable, "-m", "fencepost.cli", "package", "install", "fleet", "--targets",
                                    "fleet=f1", "--wait", "--wait-timeout", f"{timeout:g}", "-d", url], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        settled_at: dict[str, float] = {}
        contact: float | None = None   # when a worker first tried the locked target (its first step row)
        released_at: float | None = None
        settled_while_locked = 0
        deadline = time.monotonic() + timeout
        while len(settled_at) < len(ids):
            assert time.monotonic() < deadline, f"only {len(settled_at)} of {len(ids)} deliveries settled"
            records = store.read(lambda tx: {t: tx.host.get_invocation(i) for t, i in ids.items()})
            now = time.monotonic()
            for target, record in records.items():
                if target not in settled_at and record is not None and record.status.terminal:
                    settled_at[target] = now
            if contact is None and store.read(lambda tx: tx.host.list_adapter_invocations(ids[LOCKED])):
                contact = now  # the lock is held for lock_seconds from here: a worker is waiting on it
            if released_at is None and contact is not None and now >= contact + lock_seconds:
                assert LOCKED not in settled_at, "the locked target settled while it was locked"
                settled_while_locked = len(settled_at)
                holder.stdin.write("release\n")
                holder.stdin.flush()
                assert holder.stdout.readline().strip() == "released"
                released_at = time.monotonic()
            time.sleep(0.25)
        assert released_at is not None, "the fleet settled before the lock was released"
        wait_output, _ = watcher.communicate(timeout=60)
        views = {t: _host(store).get(i) for t, i in ids.items()}
    finally:
        holder.kill()
        holder.wait(timeout=30)
        kill_all(running)
    return FleetResult(store, url, paths, views, released_at, settled_at, settled_while_locked, wait_output,
                       watcher.returncode)


def _host(store: Store) -> Any:
    from fencepost.delivery.service import delivery_host

    return delivery_host(store)


def seen(path: Path) -> list[str]:
    """The target's ``seen`` rows: one per migration that ran there."""
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT migration FROM seen ORDER BY rowid")]


def columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def check_fleet(result: FleetResult) -> None:
    """The issue's proof, every part able to fail: 48 of 50 succeed at once, the locked one after its lock
    was released, the deleted one fails naming it, each migration exactly once per target (ledger, schema and
    the ``seen`` rows agree, each ledger row written by the step that applied it), the audit clean."""
    views = result.views
    failed = {t: v for t, v in views.items() if v.status is not InvocationStatus.SUCCEEDED}
    assert "elsewhere" not in views and len(views) == len(result.paths) - 1
    assert list(failed) == [DELETED], {t: (str(v.status), v.error) for t, v in failed.items()}
    gone = views[DELETED]
    path = result.paths[DELETED]
    assert gone.status is InvocationStatus.FAILED
    assert f"target {DELETED}: database file {path} does not exist" in (gone.error or ""), gone.error
    assert not path.exists(), "a delivery created the deleted target's file"
    locked = views[LOCKED]
    assert result.settled_at[LOCKED] >= result.released_at, "the locked target settled before its lock ended"
    assert result.settled_while_locked >= 10, "the other targets waited for the locked one"
    assert max(s.attempts for s in locked.steps) >= 2, "the locked target was never refused and retried"
    for target, view in views.items():
        if target == DELETED:
            continue
        assert seen(result.paths[target]) == list(FLEET), (target, seen(result.paths[target]))
        assert [(r[2], r[4]) for r in ledger(result.paths[target])] == [(m, "applied") for m in FLEET], target
        assert columns(result.paths[target], "accounts") == ["id", "name", "note"], target
        steps = {s.name: s.adapter_invocation_id for s in view.steps}
        with sqlite3.connect(result.paths[target]) as conn:
            written = dict(conn.execute("SELECT migration, adapter_invocation_id FROM fencepost_delivery"))
        assert written == {m: steps[f"migrate-{i:03d}"] for i, m in enumerate(FLEET, 1)}, target
        assert view.result["steps"]["verify"]["comparison"] == "matches rehearsal", target
    assert ledger(result.paths["elsewhere"]) == [], "a target outside the selector was delivered"
    # the watching `install --wait` (no TTY): a line per target, exit 1 since one delivery failed
    assert result.wait_code == 1, result.wait_output
    lines = [ln for ln in result.wait_output.splitlines() if ln.strip().startswith("t-")]
    assert sorted(ln.split()[0] for ln in lines) == sorted(views), result.wait_output
    assert sum(" succeeded " in ln for ln in lines) == len(views) - 1, result.wait_output
    assert "\x1b[" not in result.wait_output, "progress bars drawn on a non-terminal"
    audit = run_cli(["audit", "-d", result.url, "--json"])
    assert audit.returncode == 0 and json.loads(audit.stdout)["sound"] is True, audit.describe()
