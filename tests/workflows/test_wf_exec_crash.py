"""SIGKILL crash windows of workflow execution (issue 18 "Proof"; ADRs 0072-0074).

A real ``fencepost worker`` subprocess (or, for cancel, a ``python -c`` calling ``request_cancel``) runs a
diamond Run (``a``; ``b`` and ``c`` after ``a``; ``d`` after both) with ``FENCEPOST_CRASHPOINT`` armed and
SIGKILLs itself at the window: before and after each COMMIT of ``workflow.advance`` (the frontier, the start
barrier and the settlement), after the n-th barrier of a round, before and after ``workflow.cancel``, before and
after the task's own target COMMIT (``workflow.task:<step>:...``), and the host's transactions around the task
invocation (claim, handler, step row, checkpoint, finalize). Then:

1. right after the crash, the durable state is the window's: the transaction's writes all there (after COMMIT)
   or none (before COMMIT), as the start rows, the cancel intent and the target's task ledger show;
2. a fresh worker (short leases, so it takes the dead worker's over quickly) converges the Run;
3. the Run has the expected verdict (``succeeded``; ``cancelled`` once a cancel intent committed before any start),
   every task ran exactly once on the target (its ``log`` rows and its ``fencepost_workflow_tasks`` ledger),
   each StepRun has one start and one invocation, and the store's audit, the admissions' cross-check and the
   progress audit are all clean, in-process and through ``fencepost audit``.

The default run is a representative subset on SQLite WAL/FULL; ``-m soak`` runs every window on SQLite WAL/FULL,
SQLite DELETE/FULL and PostgreSQL. Each backend's control database and target are prepared once per module (a
package released, installed and delivered); each test admits its own Run.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from exec_kit import Installed, Steps, install, log_task
from wf_support import backend_params, cli, cli_url, opened_backend

from fencepost.core.statuses import WorkflowRunStatus
from fencepost.rehearsal.audit import audit
from fencepost.store.base import Store
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.progress_audit import audit_progress
from fencepost.workflows.task import TASK_ACTION_ID, TASK_LEDGER
from helpers.processes import KILLED, Process, start, subprocess_env, worker_args
from helpers.waiting import wait_until

DIAMOND = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",)), "c": ("tc", ("a",)), "d": ("td", ("b", "c"))},
                tasks={"ta": log_task("a"), "tb": log_task("b"), "tc": log_task("c"), "td": log_task("d")})
LEASE_SECONDS = 2.0       # the crashed worker's leases expire quickly, so the fresh one takes over
POLL_SECONDS = 0.05
CONVERGE_SECONDS = 90.0   # two busy cores, lease expiry and a retry back-off included

#: Every window. The ``@n`` suffix counts hits in the crashed process: ``workflow.advance`` round 1 starts
#: ``a``, round 2 settles ``a`` and starts ``b`` and ``c``; later rounds settle the rest (their order varies).
ADVANCE = ["workflow.advance:before-commit", "workflow.advance:after-commit", "workflow.advance:after-start-1",
           "workflow.advance:before-commit@2", "workflow.advance:after-commit@2", "workflow.advance:after-start-2",
           "workflow.advance:before-commit@3", "workflow.advance:after-commit@3", "workflow.advance:after-commit@4"]
#: ``running/``: the cancel comes once ``a`` passed its barrier (a worker killed right after that COMMIT, so
#: ``a``'s task is submitted and not yet run); otherwise it comes right after admission.
CANCEL = ["workflow.cancel:before-commit", "workflow.cancel:after-commit", "running/workflow.cancel:before-commit",
          "running/workflow.cancel:after-commit"]
TASK = [f"workflow.task:{step}:{side}-commit" for step in ("a", "d") for side in ("before", "after")]
HOST = ["host.claim:after-commit", "host.handler:before-commit", "host.handler:after-commit",
        "host.step.row:after-commit", "host.step.checkpoint:before-commit", "host.step.checkpoint:after-commit",
        "host.finalize:before-commit", "host.finalize:after-commit", "host.finalize:after-commit@3"]
WINDOWS = ADVANCE + CANCEL + TASK + HOST
#: The default run: one window of each kind on each side of a COMMIT (SQLite WAL/FULL).
DEFAULT = ["workflow.advance:before-commit", "workflow.advance:after-commit@2", "running/workflow.cancel:after-commit",
           "workflow.task:a:after-commit", "workflow.task:d:before-commit", "host.step.checkpoint:before-commit"]
#: Default windows after which ``fencepost audit`` (the real CLI) must also exit 0 (every soak window does).
CLI_AUDITED = frozenset({"workflow.advance:after-commit@2"})


@dataclass
class Site:
    """One backend's control database with the diamond package delivered to target ``t1``."""

    kit: Installed
    url: str
    root: Path

    @property
    def store(self) -> Store:
        return self.kit.store


class Sites:
    """The module's sites, one per backend, made on first use and closed at the module's end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._open: dict[str, Site] = {}
        self._stack = ExitStack()

    def get(self, name: str) -> Site:
        if name not in self._open:
            root = self.root / name
            root.mkdir()
            backend = self._stack.enter_context(opened_backend(name, root))
            self._open[name] = Site(install(backend.migrated(), root, DIAMOND), cli_url(backend), root)
        return self._open[name]

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sites]:
    made = Sites(tmp_path_factory.mktemp("wf-exec-crash"))
    try:
        yield made
    finally:
        made.close()


def _worker(site: Site, name: str, crash: str | None = None) -> Process:
    args = worker_args(site.url, site.kit.work_dir, lease_seconds=LEASE_SECONDS, poll_interval=POLL_SECONDS,
                       worker_id=name)
    return start(args, name=name, stdout_path=site.root / f"{name}.log", cwd=site.root,
                 env=subprocess_env(), crash=crash, worker_id=name)


def _cancel(site: Site, run_id: str, crash: str) -> subprocess.CompletedProcess[str]:
    code = ("import sys\nfrom fencepost.store import open_store\n"
            "from fencepost.workflows.cancel import request_cancel\n"
            "store = open_store(sys.argv[1], create=False)\n"
            "print(request_cancel(store, sys.argv[2], reason='crash test', actor='test').outcome)\n")
    return subprocess.run([sys.executable, "-c", code, site.url, run_id], env=subprocess_env(crashpoint=crash),
                          cwd=site.root, capture_output=True, text=True, timeout=120)


def _target(site: Site, query: str, *args: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(site.kit.target_path) as conn:
        return conn.execute(query, args).fetchall()


def _ledger_steps(site: Site, run_id: str) -> list[str]:
    if not _target(site, "SELECT 1 FROM sqlite_master WHERE name = ?", TASK_LEDGER):
        return []
    return [str(r[0]) for r in _target(site, f'SELECT step_key FROM "{TASK_LEDGER}" WHERE run_id = ?', run_id)]


def _log(site: Site) -> list[str]:
    return [str(r[0]) for r in _target(site, "SELECT step FROM log ORDER BY rowid")]


def _starts(site: Site, run_id: str) -> int:
    return len(site.store.read(lambda tx: tx.progress.starts(run_id)))


def _crash(site: Site, run_id: str, window: str) -> None:
    """Run the window's subject to its SIGKILL and check the durable state it left (module docstring, 1)."""
    if "workflow.cancel" in window:
        if window.startswith("running/"):
            _crash(site, run_id, "workflow.advance:after-commit")
        killed = _cancel(site, run_id, window.removeprefix("running/"))
        assert killed.returncode == KILLED, f"{window}: exit {killed.returncode}\n{killed.stderr}"
        assert killed.stdout == ""
        run = site.store.read(lambda tx: tx.progress.get_run(run_id))
        assert run is not None
        assert (run.cancel_requested_at is not None) == window.endswith("after-commit")
        return
    worker = _worker(site, f"crashed-{run_id[-8:]}", crash=window)
    try:
        worker.wait_killed(timeout=CONVERGE_SECONDS)
    finally:
        worker.kill()
    if window == "workflow.advance:before-commit" or window == "workflow.advance:after-start-1":
        assert _starts(site, run_id) == 0, "a barrier of a transaction that never committed is visible"
    if window == "workflow.advance:after-commit":
        assert _starts(site, run_id) == 1
    if window.startswith("workflow.task:"):
        step = window.split(":")[1]
        assert _ledger_steps(site, run_id).count(step) == (1 if window.endswith("after-commit") else 0)


def _converge(site: Site, run_id: str) -> WorkflowRunStatus:
    worker = _worker(site, f"fresh-{run_id[-8:]}")
    try:
        def settled() -> WorkflowRunStatus | None:
            run = site.store.read(lambda tx: tx.progress.get_run(run_id))
            return run.status if run is not None and run.status.terminal else None

        status = wait_until(settled, CONVERGE_SECONDS, what=f"run {run_id} to settle\n{worker.describe()}")
        worker.stop_cleanly()
        return status
    finally:
        worker.kill()


def _assert_converged(site: Site, run_id: str, window: str, status: WorkflowRunStatus, log_before: int) -> None:
    cancelled = window.endswith("workflow.cancel:after-commit")
    started = window.startswith("running/")
    assert status is (WorkflowRunStatus.CANCELLED if cancelled else WorkflowRunStatus.SUCCEEDED), window
    ran = Counter(_log(site)[log_before:])
    expected = Counter() if cancelled else Counter({"a": 1, "b": 1, "c": 1, "d": 1})
    if cancelled and started and ran:  # a's task may have been claimed before the kill: then it finished
        expected = Counter({"a": 1})
    assert ran == expected, f"{window}: tasks ran {dict(ran)} on the target"
    assert Counter(_ledger_steps(site, run_id)) == expected, f"{window}: the target's task ledger"
    starts = site.store.read(lambda tx: tx.progress.starts(run_id))
    assert len({s.step_run_id for s in starts}) == len(starts), f"{window}: a StepRun started twice"
    assert len(starts) == (4 if not cancelled else 1 if started else 0), f"{window}: {len(starts)} starts"
    invocations = [i for i in site.store.read(lambda tx: tx.host.list_invocations())
                   if i.action_id == TASK_ACTION_ID and i.idempotency_key.startswith(f"wf:{run_id}:")]
    assert len(invocations) == len(starts), window
    # A task refused by its start check (the cancel intent) fails; every other one succeeded.
    verdicts = sorted(str(i.status) for i in invocations)
    wanted = ["succeeded"] * 4 if not cancelled else ["succeeded" if ran else "failed"] if started else []
    assert verdicts == wanted, f"{window}: task verdicts {verdicts}"
    if cancelled and started:
        steps = {r.step_key: str(r.status) for r in site.store.read(lambda tx: tx.progress.step_runs(run_id))}
        assert steps["a"] == ("succeeded" if ran else "cancelled") and steps["d"] == "cancelled", steps
    findings = audit(site.store) + audit_admissions(site.store) + audit_progress(site.store)
    assert findings == [], f"{window}: {findings}"


def _window(sites: Sites, backend: str, window: str, kind: str) -> None:
    site = sites.get(backend)
    run_id = site.kit.admit(f"plan-{kind}-{WINDOWS.index(window)}")
    log_before = len(_log(site))
    _crash(site, run_id, window)
    status = _converge(site, run_id)
    _assert_converged(site, run_id, window, status, log_before)
    if kind == "soak" or window in CLI_AUDITED:  # the CLI's audit costs seconds: once in the default run
        sound = cli(site.url, "audit", "--json", cwd=site.root)
        assert sound.returncode == 0 and sound.json()["sound"] is True, sound.describe()


@pytest.mark.slow
@pytest.mark.parametrize("window", DEFAULT)
@pytest.mark.parametrize("backend", backend_params(["sqlite-wal"]))
def test_sigkill_window_converges_with_each_task_once(sites: Sites, backend: str, window: str) -> None:
    _window(sites, backend, window, "default")


@pytest.mark.soak
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("backend", backend_params(["sqlite-wal", "sqlite-delete", "postgres"]))
def test_sigkill_window_matrix(sites: Sites, backend: str, window: str) -> None:
    _window(sites, backend, window, "soak")


#: A step whose task may run 8 s from its barrier: long enough to reach its target on a busy machine.
SHORT = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",))}, tasks={"ta": log_task("a"), "tb": log_task("b")},
              timeouts={"ta": 8})


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params(["sqlite-wal"], soak=["sqlite-delete", "postgres"]))
def test_a_task_committed_on_its_target_is_replayed_not_timed_out_after_its_deadline(
        backend: str, tmp_path: Path) -> None:
    """Killed right after the task's target COMMIT, taken over only after the step's deadline: the target's
    ledger says the task ran, so the step succeeded (a replay), not ``timed_out`` "with nothing applied"."""
    with opened_backend(backend, tmp_path) as opened:
        kit = install(opened.migrated(), tmp_path, SHORT)
        site = Site(kit, cli_url(opened), tmp_path)
        run_id = kit.admit()
        _crash(site, run_id, "workflow.task:a:after-commit")
        start_row, = [s for s in site.store.read(lambda tx: tx.progress.starts(run_id))]
        # The barrier took the worker's (real) clock; the in-process SQLite store's is a ManualClock.
        wait_until(lambda: datetime.now(UTC) > start_row.deadline_at, 30.0, what="the step's deadline to pass")
        status = _converge(site, run_id)
        steps = {r.step_key: str(r.status) for r in site.store.read(lambda tx: tx.progress.step_runs(run_id))}
        assert steps == {"a": "succeeded", "b": "succeeded"}, steps
        assert status is WorkflowRunStatus.SUCCEEDED
        assert Counter(_log(site)) == Counter({"a": 1, "b": 1})
        assert audit_progress(site.store) == [] and audit_admissions(site.store) == []
