"""A step's verdict must not deny what its target holds: the zombie-worker window (issue 18, found by breaking it).

Worker A runs a long step task inside its one target transaction (``BEGIN IMMEDIATE`` held) and is frozen
(SIGSTOP) past its lease. Worker B takes the invocation over; its calls find the target locked (by A) for the
whole retry budget. B must not settle the step ``failed`` with "nothing was applied": A's transaction is still
open and commits, ledger row included, as soon as A is continued. The honest verdicts are ``succeeded`` (B
waited and replayed A's ledger row) or ``lost`` (unknown, an operator decides); ``failed`` is only honest when
the target holds no ledger row of the step.

Real parts: two ``fencepost worker`` subprocesses, a real SQLite target, SIGSTOP/SIGCONT. About 90 s (B's retry
budget against the locked target is about a minute), so ``@pytest.mark.soak``.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from exec_kit import Steps, install, log_task
from wf_support import backend_params, cli_url, opened_backend

from fencepost.core.statuses import StepRunStatus
from fencepost.store.base import Store
from fencepost.workflows.task import TASK_LEDGER
from helpers.processes import FENCEPOST, subprocess_env, worker_args

#: About 8 s of work on the target, inside the task's one transaction.
LONG = log_task("s") + ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 20000000) "
                        "SELECT count(*) FROM n;\n")
SHAPE = Steps(steps={"s": ("t_s", ())}, tasks={"t_s": LONG})
LEASE_SECONDS = 2.0


@pytest.fixture(params=backend_params(["sqlite-wal", "postgres"]))
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, str]]:
    with opened_backend(str(request.param), tmp_path) as backend:
        yield backend.migrated(), cli_url(backend)


def _worker(url: str, work: Path, name: str, log: Path) -> subprocess.Popen[bytes]:
    args = worker_args(url, work, lease_seconds=LEASE_SECONDS, poll_interval=0.05, worker_id=name)
    with open(log, "wb") as out:
        return subprocess.Popen([*FENCEPOST, *args], env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT)


def _write_locked(path: Path) -> bool:
    """Whether another connection holds the target's write lock (probe with BEGIN IMMEDIATE, no wait)."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def _ledger_rows(path: Path, run_id: str) -> int:
    with sqlite3.connect(path) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TASK_LEDGER,)).fetchone() is None:
            return 0
        return int(conn.execute(f'SELECT count(*) FROM "{TASK_LEDGER}" WHERE run_id = ?', (run_id,)).fetchone()[0])


def _wait(what: str, check: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not within {seconds} s")


@pytest.mark.soak
def test_a_takeover_that_finds_the_target_locked_by_a_frozen_worker_does_not_deny_its_commit(
        site: tuple[Store, str], tmp_path: Path) -> None:
    store, url = site
    kit = install(store, tmp_path, SHAPE)
    run_id = kit.admit()
    a = _worker(url, kit.work_dir, "A", tmp_path / "A.log")
    b: subprocess.Popen[bytes] | None = None
    try:
        _wait("A's task holding the target's write lock", lambda: _write_locked(kit.target_path), 60)
        time.sleep(0.5)
        a.send_signal(signal.SIGSTOP)
        b = _worker(url, kit.work_dir, "B", tmp_path / "B.log")

        def settled() -> bool:  # a verdict under B: terminal, or lost (awaiting an operator)
            steps = store.read(lambda tx: tx.progress.step_runs(run_id))
            return all(s.status.terminal or s.status is StepRunStatus.LOST for s in steps)

        _wait("step s reaching a verdict under B", settled, 150)
        a.send_signal(signal.SIGCONT)
        _wait("A's target transaction ending", lambda: not _write_locked(kit.target_path), 60)
    finally:
        a.send_signal(signal.SIGCONT)
        for proc in (a, b):
            if proc is not None:
                proc.kill()
                proc.wait()
    steps = store.read(lambda tx: tx.progress.step_runs(run_id))
    status = {s.step_key: s.status for s in steps}["s"]
    applied = _ledger_rows(kit.target_path, run_id)
    assert applied <= 1
    if applied:
        assert status in (StepRunStatus.SUCCEEDED, StepRunStatus.LOST), (
            f"step s is {status} but the target holds its ledger row (its task was applied)")
    else:
        assert status is not StepRunStatus.SUCCEEDED
