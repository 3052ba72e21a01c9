"""Crash windows and the flows that run them.

A *flow* is one piece of operator-visible work driven through the real CLI and worker: freeze a package as a
Run, enqueue an Attempt, let a worker run it (or reconcile it, or abort it). A *window* is one crash point of
one flow: the subject process (CLI command or worker) is started with ``FENCEPOST_CRASHPOINT`` armed, must die
of SIGKILL there, and is then restarted. ``run_flow(db, flow, None)`` is the crash-free reference;
``run_flow(db, flow, window)`` crashes at ``window`` and returns what the flow converged to, after checking:

1. the subject died of SIGKILL (returncode -9) and printed no answer;
2. right after the crash: ``fencepost audit``'s checks are clean and no transition is half-applied
   (``check_structure``), and the durable state is exactly the one the window predicts: everything of the
   transaction (after COMMIT) or nothing of it (before COMMIT);
3. recovery replays the durable winner instead of duplicating it (each window states how: a takeover with the
   next delivery number, a re-run CLI command answering "already done", or a worker that finds nothing to do);
4. after convergence: one claim or takeover per delivery, exactly one terminal lease event per command, the
   expected delivery count, and ``fencepost audit`` (the real CLI) exits 0.

The caller compares the returned ``Summary`` with the crash-free reference of the same flow and backend.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import signal
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from crash_harness import (
    BACKENDS,
    LEASE_SECONDS,
    POLL_SECONDS,
    CrashDB,
    Summary,
    Workers,
    assert_cli_audit_clean,
    assert_sound,
    claim_count,
    cli,
    crash_db,
    failing_package,
    lease_expired,
    receipt_codes,
    slow_package,
    summarize,
    terminal_events,
    wait_until,
)

from fencepost.core.statuses import AttemptStatus
from fencepost.rehearsal.handler import KIND
from helpers.store_backends import BackendUnreachable, StoreBackend, selected_backends, store_backend

W = TypeVar("W")
EXAMPLE_PACKAGE = Path(__file__).resolve().parents[2] / "examples" / "inventory"

# The crash that leaves a RUNNING Attempt behind for the reconcile and abort flows (a setup step, checked too).
SETUP_CRASH = "rehearsal.receipt:after-commit@2"
SETUP_STATE = "RUNNING PROCESSING SSRPPP 1"

FLOWS = ("inventory", "slow", "failing", "budget", "reconcile", "abort-pending", "abort-running")
BUDGET = 5  # fencepost.cli.worker_cmd.REHEARSAL_MAX_DELIVERIES
WORKER_TRANSACTIONS = frozenset({"outbox.claim", "outbox.heartbeat", "outbox.release", "outbox.fail",
                                 "rehearsal.start", "rehearsal.receipt", "rehearsal.succeed", "rehearsal.fail"})


@dataclass(frozen=True)
class Window:
    """One crash point of one flow.

    Attributes:
        flow: one of ``FLOWS``.
        point: the ``FENCEPOST_CRASHPOINT`` value, ``<transaction>:<before|after>-commit[@n]``.
        state: the durable state right after the crash, ``"<Attempt> <command> <receipts> <delivery_count>"``
            (receipts as letters, ``*`` for "any whole-transition sequence"); None for the create/enqueue
            windows, which predict row counts instead.
        deliveries: the command's delivery_count once the flow has converged.
    """

    flow: str
    point: str
    state: str | None
    deliveries: int

    @property
    def transaction(self) -> str:
        return self.point.split(":")[0]

    @property
    def after_commit(self) -> bool:
        return ":after-commit" in self.point

    @property
    def id(self) -> str:
        return self.point if self.flow == "inventory" else f"{self.flow}-{self.point}"


def _receipt_windows() -> list[Window]:
    found = []
    for k in range(1, 6):
        found.append(Window("inventory", f"rehearsal.receipt:before-commit@{k}",
                            f"RUNNING PROCESSING {'S' * (k - 1)}R{'P' * (6 - k)} 1", 2))
        found.append(Window("inventory", f"rehearsal.receipt:after-commit@{k}",
                            f"RUNNING PROCESSING {'S' * k}R{'P' * (5 - k)} 1", 2))
    return found


WINDOWS: tuple[Window, ...] = (
    # Freeze the package (`fencepost rehearsal create`).
    Window("inventory", "rehearsal.create_run:before-commit", None, 1),
    Window("inventory", "rehearsal.create_run:after-commit", None, 1),
    # Enqueue: the Attempt, its six Receipts and its PENDING command in one transaction (`rehearsal attempt`).
    Window("inventory", "rehearsal.enqueue:before-commit", None, 1),
    Window("inventory", "rehearsal.enqueue:after-commit", None, 1),
    # Claim (worker).
    Window("inventory", "outbox.claim:before-commit", "PENDING PENDING PPPPPP 0", 1),
    Window("inventory", "outbox.claim:after-commit", "PENDING PROCESSING PPPPPP 1", 2),
    # Start: Attempt RUNNING under this delivery, provisional Receipts reset, Receipt 1 RUNNING.
    Window("inventory", "rehearsal.start:before-commit", "PENDING PROCESSING PPPPPP 1", 2),
    Window("inventory", "rehearsal.start:after-commit", "RUNNING PROCESSING RPPPPP 1", 2),
    # Each Receipt transition: Receipt k SUCCEEDED and k+1 RUNNING.
    *_receipt_windows(),
    # Last Receipt, Attempt SUCCEEDED and command DELIVERED together.
    Window("inventory", "rehearsal.succeed:before-commit", "RUNNING PROCESSING SSSSSR 1", 2),
    Window("inventory", "rehearsal.succeed:after-commit", "SUCCEEDED DELIVERED SSSSSS 1", 1),
    # Heartbeat (its own transaction, from the heartbeat thread) while Receipt 3 runs for a second.
    Window("slow", "outbox.heartbeat:before-commit", "RUNNING PROCESSING * 1", 2),
    Window("slow", "outbox.heartbeat:after-commit", "RUNNING PROCESSING * 1", 2),
    # Graceful stop (SIGTERM) mid-Attempt: the lease is released, the command is PENDING again.
    Window("slow", "outbox.release:before-commit", "RUNNING PROCESSING * 1", 2),
    Window("slow", "outbox.release:after-commit", "RUNNING PENDING * 1", 2),
    # Scenario 3 fails: its Receipt FAILED, later ones ABORTED, Attempt and command FAILED together.
    Window("failing", "rehearsal.fail:before-commit", "RUNNING PROCESSING SSRPPP 1", 2),
    Window("failing", "rehearsal.fail:after-commit", "FAILED FAILED SSFAAA 1", 1),
    # The worker's own verdict (outbox.fail): the claim after the delivery budget fails the Attempt with its
    # lease history sealed in Receipt 1, instead of running it a sixth time. Before COMMIT nothing changed but
    # the claim; the next claim is the verdict again.
    Window("budget", "outbox.fail:before-commit", f"PENDING PROCESSING PPPPPP {BUDGET + 1}", BUDGET + 2),
    Window("budget", "outbox.fail:after-commit", f"FAILED FAILED FAAAAA {BUDGET + 1}", BUDGET + 1),
    # Operator reconcile of an expired lease left by a crashed worker (`rehearsal reconcile`).
    Window("reconcile", "rehearsal.reconcile:before-commit", "RUNNING PROCESSING SSRPPP 1", 2),
    Window("reconcile", "rehearsal.reconcile:after-commit", "RUNNING PENDING SSRPPP 1", 2),
    # Operator abort (`rehearsal abort`) of a PENDING Attempt, and of a RUNNING one whose worker crashed.
    Window("abort-pending", "rehearsal.abort:before-commit", "PENDING PENDING PPPPPP 0", 0),
    Window("abort-pending", "rehearsal.abort:after-commit", "ABORTED ABORTED AAAAAA 0", 0),
    Window("abort-running", "rehearsal.abort:before-commit", "RUNNING PROCESSING SSRPPP 1", 1),
    Window("abort-running", "rehearsal.abort:after-commit", "ABORTED ABORTED SSAAAA 1", 1),
)

# Named transactions that no crash window covers, and why (checked by a test over every named transaction of
# src/fencepost, so that a new one fails the suite until it gets windows or a reason here). Every application
# transaction has windows: the outbox and rehearsal ones here, the package ones in package_flows.py,
# outbox.deliver in deliver_flow.py and workflow.admit in tests/workflows/test_wf_crash.py.
#: The conformance checks' probe units (src/fencepost/events/fencepost_subject.py): each writes only probe rows in
#: its own probe space of the checked tenant; a crash mid-check leaves probe rows that the next run's cleanup
#: dead-letters (host-spec U), and no application state depends on them.
_CHECK_STORE = "a `fencepost check-store` probe unit: probe rows only, cleaned up by the next run (ADR 0040)"

NOT_COVERED: dict[str, str] = {
    "contract.fenced": "the store contract suite's own fenced unit (src/fencepost/testing/rehearsal.py): test "
                       "data written under pytest, no application transaction",
    **{f"check-store.{unit}": _CHECK_STORE for unit in ("append", "claim", "dead-letter", "fail",
                                                          "isolation-parent", "isolation-retire", "publish", "tx",
                                                          "write")},
}


# ── helpers ──
def assert_state(db: CrashDB, attempt_id: str, expected: str, when: str) -> None:
    """``expected`` is ``"<Attempt> <command> <receipts> <delivery_count>"`` (``*`` receipts: any)."""
    attempt = db.attempt(attempt_id)
    codes = receipt_codes(db, attempt_id)
    want_attempt, want_command, want_receipts, want_count = expected.split()
    seen = f"{attempt.status} {attempt.command_status} {codes} {attempt.delivery_count}"
    ok = (str(attempt.status) == want_attempt and str(attempt.command_status) == want_command
          and (want_receipts == "*" or codes == want_receipts) and attempt.delivery_count == int(want_count))
    assert ok, f"{when}: expected {expected!r}, found {seen!r}"


def exhaust_budget(db: CrashDB, command_id: str) -> None:
    """``BUDGET`` deliveries that each die at once: claimed with a tiny lease that lapses, never run."""
    for _ in range(BUDGET):
        (claimed,) = db.store.transact(lambda tx: tx.outbox.claim(owner="doomed", kinds=[KIND], limit=1,
                                                                  lease_seconds=0.05))
        assert claimed.id == command_id
        time.sleep(0.06)


def package_for(flow: str, root: Path) -> Path:
    if flow == "slow":
        return slow_package(root / "pkg-slow")
    if flow == "failing":
        return failing_package(root / "pkg-failing")
    return EXAMPLE_PACKAGE


def drain(db: CrashDB, workers: Workers, attempt_id: str, name: str, work_dir: Path | None = None) -> None:
    """A fresh worker runs until the Attempt is terminal, then stops gracefully."""
    worker = workers.start(name, work_dir=work_dir)
    try:
        wait_until(lambda: db.attempt(attempt_id).status.terminal, what=f"attempt {attempt_id} to finish "
                   f"(worker log: {worker.log_path})")
    finally:
        worker.stop_cleanly()


def idle_worker(db: CrashDB, workers: Workers, attempt_id: str, work_dir: Path | None = None) -> None:
    """A fresh worker gets more than a lease duration to find work; a finished Attempt must give it none."""
    before = (db.attempt(attempt_id), db.events(db.attempt(attempt_id).command_id))
    worker = workers.start("idle", work_dir=work_dir)
    try:
        wait_until(lambda: worker.events("worker_started"), what="the idle worker to start")
        time.sleep(LEASE_SECONDS + 4 * POLL_SECONDS)
    finally:
        worker.stop_cleanly()
    after = (db.attempt(attempt_id), db.events(before[0].command_id))
    assert after == before, "a finished Attempt was touched again by a new worker"
    assert not worker.events("claimed") and not worker.events("takeover"), worker.describe()


# ── the flow runner ──
def run_flow(db: CrashDB, flow: str, window: Window | None) -> tuple[str, Summary]:
    """Run ``flow`` (crashing at ``window`` when given); return the Run id and the converged ``Summary``."""
    assert window is None or window.flow == flow
    workers = Workers(db)
    try:
        return _run_flow(db, flow, window, workers)
    finally:
        workers.kill_all()


def _run_flow(db: CrashDB, flow: str, window: Window | None, workers: Workers) -> tuple[str, Summary]:
    tx = window.transaction if window else None
    crash = window.point if window else None
    package = package_for(flow, db.root)
    work_dir: Path | None = None

    # 1. Freeze the package as a Run.
    if tx == "rehearsal.create_run":
        assert window is not None
        cli(db, "rehearsal", "create", str(package), "--json", crash=crash)
        assert_sound(db, f"after the crash at {crash}")
        assert len(db.run_ids()) == (1 if window.after_commit else 0), db.run_ids()
        if window.after_commit:
            # The Run is durable though the command never answered: `rehearsal list` finds it. (Running
            # `create` again would freeze a second Run: each call asks for a new one.)
            listed = cli(db, "rehearsal", "list", "--json")
            assert listed.returncode == 0, listed.describe()
            run_id = str(listed.json()[0]["id"])
        else:
            created = cli(db, "rehearsal", "create", str(package), "--json")
            assert created.returncode == 0, created.describe()
            run_id = str(created.json()["id"])
        assert db.run_ids() == [run_id]
    else:
        run_id = db.service.create_run(package).id

    # 2. Enqueue one Attempt.
    if tx == "rehearsal.enqueue":
        assert window is not None
        cli(db, "rehearsal", "attempt", run_id, "--json", crash=crash)
        assert_sound(db, f"after the crash at {crash}")
        found = db.service.attempts(run_id)
        assert len(found) == (1 if window.after_commit else 0), found
        assert db.command_count() == len(found), "an Attempt without its command, or a command without one"
        if window.after_commit:
            # Durable but unanswered: `rehearsal status` shows it PENDING with six PENDING Receipts; the
            # operator does not enqueue again (that would ask for a second Attempt, see the test).
            status = cli(db, "rehearsal", "status", run_id, "--json")
            assert status.returncode == 0, status.describe()
            attempts = status.json()["attempts"]
            assert len(attempts) == 1 and attempts[0]["status"] == "PENDING", status.describe()
            attempt_id = str(attempts[0]["id"])
            assert_state(db, attempt_id, "PENDING PENDING PPPPPP 0", "after the crash")
        else:
            enqueued = cli(db, "rehearsal", "attempt", run_id, "--json")
            assert enqueued.returncode == 0, enqueued.describe()
            attempt_id = str(enqueued.json()["id"])
    else:
        attempt_id = db.service.enqueue_attempt(run_id).id
    command_id = db.attempt(attempt_id).command_id

    if flow == "budget":
        exhaust_budget(db, command_id)

    # 3. Flows that start from a RUNNING Attempt whose worker died mid-way.
    if flow in ("reconcile", "abort-running"):
        workers.start("setup", crash=SETUP_CRASH).wait_killed()
        assert_state(db, attempt_id, SETUP_STATE, f"after the setup crash at {SETUP_CRASH}")
        assert_sound(db, f"after the setup crash at {SETUP_CRASH}")

    if flow == "reconcile":
        wait_until(lambda: lease_expired(db, attempt_id), what="the crashed worker's lease to expire")
        _operator(db, "reconcile", attempt_id, window)
        drain(db, workers, attempt_id, "after-reconcile")
    elif flow in ("abort-pending", "abort-running"):
        _operator(db, "abort", attempt_id, window)
    elif tx in WORKER_TRANSACTIONS:
        assert window is not None and window.state is not None
        # A stop with no grace period interrupts the running scenario at once (the release windows).
        subject = workers.start("subject", crash=crash, work_dir=work_dir,
                                grace_seconds=0 if tx == "outbox.release" else None)
        if tx == "outbox.release":
            # SIGTERM while Receipt 3 runs: the worker interrupts that scenario, records nothing for it,
            # releases its lease, and dies at the armed point around that release.
            wait_until(lambda: receipt_codes(db, attempt_id)[2] == "R", interval=0.005,
                       what="Receipt 3 to run")
            subject.proc.send_signal(signal.SIGTERM)
        subject.wait_killed()
        assert_state(db, attempt_id, window.state, f"after the crash at {crash}")
        assert_sound(db, f"after the crash at {crash}")
        events = db.events(command_id)
        if tx == "outbox.release":
            assert ("release" in [e.event for e in events]) == window.after_commit, events
        if db.attempt(attempt_id).status.terminal:
            # The durable outcome is final: a new worker must not run anything again.
            idle_worker(db, workers, attempt_id, work_dir)
        else:
            drain(db, workers, attempt_id, "recovery", work_dir)
    else:
        drain(db, workers, attempt_id, "only", work_dir)

    # 4. Converged: one claim per delivery, one terminal event, the expected deliveries, a sound database.
    attempt = db.attempt(attempt_id)
    assert attempt.status.terminal, attempt
    events = db.events(command_id)
    assert claim_count(events) == attempt.delivery_count, [e.event for e in events]
    assert len(terminal_events(events)) == 1, [e.event for e in events]
    if window is not None:
        assert attempt.delivery_count == window.deliveries, (attempt.delivery_count, [e.event for e in events])
    assert_sound(db, "after convergence")
    assert_cli_audit_clean(db)
    summary = summarize(db, run_id)
    if attempt.status is AttemptStatus.SUCCEEDED:
        assert summary.gate_passed, summary
    return run_id, summary


def _operator(db: CrashDB, verb: str, attempt_id: str, window: Window | None) -> None:
    """``fencepost rehearsal <verb> ATTEMPT`` (reconcile or abort), crashing at ``window`` when given.

    After a crash the operator runs the command again. Before COMMIT nothing happened, so it succeeds now;
    after COMMIT the durable winner answers: the command is refused as a conflict (exit 3) because the state
    it asked for is already there, and no second reconcile or abort is recorded.
    """
    command_id = db.attempt(attempt_id).command_id
    if window is not None:
        cli(db, "rehearsal", verb, attempt_id, "--json", crash=window.point)
        assert window.state is not None
        assert_state(db, attempt_id, window.state, f"after the crash at {window.point}")
        assert_sound(db, f"after the crash at {window.point}")
    again = cli(db, "rehearsal", verb, attempt_id, "--json")
    if window is not None and window.after_commit:
        assert again.returncode == 3, again.describe()
        assert again.stdout == "" and len(again.stderr.strip().splitlines()) == 1, again.describe()
    else:
        assert again.returncode == 0, again.describe()
    event = "reconcile" if verb == "reconcile" else "abort"
    recorded = [e.event for e in db.events(command_id)]
    assert recorded.count(event) == 1, recorded


def window_matrix(windows: Sequence[W], window_id: Callable[[W], str] = str, *,
                  postgres_default: Collection[str] = ()) -> list[Any]:
    """``(backend, window)`` pytest params of every window on every backend: SQLite WAL/FULL in the default
    run, SQLite DELETE/FULL and PostgreSQL marked soak (PostgreSQL also ``postgres``), except the PostgreSQL
    windows whose id is in ``postgres_default``, which stay in the default run."""
    params: list[Any] = []
    for backend in BACKENDS:
        for w in windows:
            default = backend == "sqlite-wal" or (backend == "postgres" and window_id(w) in postgres_default)
            marks = [] if default else [pytest.mark.soak]
            if backend == "postgres":
                marks.append(pytest.mark.postgres)
            params.append(pytest.param(backend, w, id=f"{backend}-{window_id(w)}", marks=marks))
    return params


def require_backend(name: str) -> None:
    """Skip when ``FENCEPOST_TEST_BACKENDS`` excludes ``name`` (as the rest of the suite does)."""
    if name not in selected_backends():
        pytest.skip(f"{name} excluded by FENCEPOST_TEST_BACKENDS")


@contextmanager
def selected_backend(name: str, tmp_path: Path) -> Iterator[StoreBackend]:
    """The store backend ``name`` for one test: skipped when not selected, failed when it cannot be reached."""
    require_backend(name)
    try:
        with store_backend(name, tmp_path) as backend:
            yield backend
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


class References:
    """The crash-free outcome of each flow, computed once per backend and flow for the whole test run.

    Under pytest-xdist the worker processes share it: the first to need a reference computes it under a file
    lock and leaves it (pickled) in the run's shared temporary directory, and the others read it there instead of
    running the same crash-free flow again (a reference is a whole rehearsal flow, 20 s or more of subprocesses).
    The directory is named after the run's ``PYTEST_XDIST_TESTRUNUID``, so no run reads another's.
    """

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.done: dict[tuple[str, str], Summary] = {}
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        self.shared = None if run is None else factory.getbasetemp().parent / f"crash-references-{run}"

    def get(self, backend: str, flow: str) -> Summary:
        key = (backend, flow)
        if key not in self.done:
            if self.shared is None:
                self.done[key] = self._compute(backend, flow)
            else:
                self.done[key] = self._shared(backend, flow)
        return self.done[key]

    def _compute(self, backend: str, flow: str) -> Summary:
        root = self.factory.mktemp(f"reference-{backend}-{flow}")
        try:
            with crash_db(backend, root) as db:
                return run_flow(db, flow, None)[1]
        except BackendUnreachable as error:
            pytest.fail(str(error), pytrace=False)

    def _shared(self, backend: str, flow: str) -> Summary:
        assert self.shared is not None
        self.shared.mkdir(exist_ok=True)
        stored = self.shared / f"{backend}-{flow}.pickle"
        with open(self.shared / f"{backend}-{flow}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker computes; the others wait and then read its result
            if stored.exists():
                summary: Summary = pickle.loads(stored.read_bytes())
                return summary
            summary = self._compute(backend, flow)
            stored.write_bytes(pickle.dumps(summary))
            return summary
