"""Workers that are fair, bounded and stoppable (issue 10), with real ``fencepost`` subprocesses on SQLite.

- a second Ctrl-C exits 130 at once and writes no verdict; another worker then delivers the Attempt;
- a stuck command does not hold quick ones: a worker claims only what it can start now;
- endless SQL under a time limit ends the Attempt with the limit in its evidence, and nothing runs it again;
- a sandbox writing past its disk cap, or building a value past its memory cap, likewise, with the cap;
- a worker killed at the start of every delivery: after the budget, the budget verdict, no further claim;
- ``fencepost rehearse`` interrupted by Ctrl-C exits 130 promptly and leaves no lease held.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from acceptance_support import Env, assert_one_line_error, slow_package, small_package, wait_until, write_package

from fencepost.core.canonical import parse_json
from helpers.processes import start, subprocess_env

# A seed that never ends: the recursive CTE has no bound (the sandbox's progress handler can still stop it).
ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;\n"
REHEARSAL_BUDGET = 5  # fencepost.cli.worker_cmd.REHEARSAL_MAX_DELIVERIES


def endless_package(root: Path) -> Path:
    return write_package(root, "endless", seed_sql=ENDLESS)


def enqueue(env: Env, package: Path) -> tuple[str, str]:
    """Create a rehearsal of ``package`` and enqueue one Attempt: ``(run_id, attempt_id)``."""
    created = env.cli("rehearsal", "create", str(package), "--json")
    assert created.returncode == 0, created.describe()
    run_id = created.json()["id"]
    queued = env.cli("rehearsal", "attempt", run_id, "--json")
    assert queued.returncode == 0, queued.describe()
    return run_id, queued.json()["id"]


def no_verdict(env: Env, attempt_id: str) -> None:
    """Nothing was recorded for the interrupted delivery: no terminal Attempt, no sealed failure."""
    attempt = env.db.attempt(attempt_id)
    assert attempt["status"] in ("PENDING", "RUNNING"), attempt
    assert attempt["command_status"] in ("PENDING", "PROCESSING"), attempt
    for receipt in env.db.receipts(attempt_id):
        assert receipt["status"] in ("PENDING", "RUNNING", "SUCCEEDED"), receipt
        if receipt["status"] != "SUCCEEDED":
            assert receipt["evidence"] is None and receipt["evidence_fingerprint"] is None, receipt


def test_a_second_ctrl_c_exits_130_and_records_no_verdict(migrated: Env) -> None:
    run_id, attempt_id = enqueue(migrated, slow_package(migrated.root / "slow"))
    worker = migrated.start_worker("a", lease_seconds=30.0)
    migrated.wait_receipt(attempt_id, 3, "RUNNING")  # the slow seed scenario runs
    worker.send(signal.SIGINT)
    time.sleep(0.5)
    worker.send(signal.SIGINT)
    assert worker.wait_exit(timeout=15) == 130, worker.describe()
    no_verdict(migrated, attempt_id)
    assert not [e for e in worker.logs() if e.get("event") == "command_failed"], worker.stderr
    command = migrated.db.attempt(attempt_id)
    assert command["command_status"] == "PENDING", "the lease was released on the way out"
    assert [e["event"] for e in migrated.db.lease_events(command["command_id"])][-1] == "release"
    second = migrated.start_worker("b")
    assert migrated.wait_attempt(attempt_id)["status"] == "SUCCEEDED"
    second.stop_cleanly()
    gate = migrated.cli("rehearsal", "gate", run_id, "--json")
    assert gate.returncode == 0 and gate.json()["passed"], gate.describe()


def test_a_stuck_command_does_not_hold_quick_ones_and_sigterm_releases_it(migrated: Env) -> None:
    stuck_run, stuck = enqueue(migrated, endless_package(migrated.root / "endless"))
    quick = [enqueue(migrated, small_package(migrated.root / f"quick{i}"))[1] for i in range(3)]
    first = migrated.start_worker("a", extra=["--concurrency", "1", "--batch-size", "10", "--grace-period", "0"])
    migrated.wait_receipt(stuck, 3, "RUNNING")
    other = migrated.start_worker("b")
    for attempt_id in quick:
        done = migrated.wait_attempt(attempt_id)
        assert done["status"] == "SUCCEEDED" and done["lease_owner"] is None
    quick_commands = {migrated.db.attempt(a)["command_id"] for a in quick}
    assert {e["command_id"] for e in other.logs() if e.get("event") == "claimed"} == quick_commands
    assert migrated.db.attempt(stuck)["status"] == "RUNNING", "the stuck one still runs on the first worker"
    claimed_by_first = [e["command_id"] for e in first.logs() if e.get("event") in ("claimed", "takeover")]
    assert claimed_by_first == [migrated.db.attempt(stuck)["command_id"]], "the first worker hoarded nothing"
    other.stop_cleanly()
    first.send(signal.SIGTERM)
    assert first.wait_exit(timeout=20) == 0, first.describe()
    no_verdict(migrated, stuck)
    command = migrated.db.attempt(stuck)
    assert command["command_status"] == "PENDING" and command["lease_owner"] is None
    events = [e["event"] for e in migrated.db.lease_events(command["command_id"])]
    assert [e for e in events if e != "heartbeat"] == ["claim", "release"], events
    # Released: nothing runs it, so no scenario shows RUNNING; it is interrupted and will be replayed.
    shown = migrated.cli("rehearsal", "status", stuck_run, "--json")
    attempt = shown.json()["attempts"][0]
    assert attempt["status"] == "RUNNING" and attempt["state"] == "INTERRUPTED", attempt
    assert [r["state"] for r in attempt["receipts"]] == ["SUCCEEDED", "SUCCEEDED", "INTERRUPTED"] + ["PENDING"] * 3
    text = migrated.cli("rehearsal", "status", stuck_run)
    assert "interrupted, will be replayed" in text.stdout and "RUNNING" not in text.stdout, text.describe()


def test_endless_sql_under_a_time_limit_fails_with_the_limit_and_never_runs_again(migrated: Env) -> None:
    _, attempt_id = enqueue(migrated, endless_package(migrated.root / "endless"))
    worker = migrated.start_worker("a", extra=["--time-limit", "rehearsal.attempt=2"])
    failed = migrated.wait_attempt(attempt_id)
    assert failed["status"] == "FAILED" and failed["command_status"] == "FAILED", failed
    assert "time limit exceeded (2 s)" in failed["error"]
    receipt = migrated.db.receipts(attempt_id)[2]
    assert receipt["status"] == "FAILED"
    evidence = parse_json(receipt["evidence"])
    assert isinstance(evidence, dict) and evidence["limit"] == {"time_seconds": 2.0}
    assert evidence["error"]["message"] == "time limit exceeded (2 s)"
    time.sleep(1.0)
    worker.stop_cleanly()
    assert failed["delivery_count"] == migrated.db.attempt(attempt_id)["delivery_count"] == 1
    assert migrated.cli("audit").returncode == 0


MIB = 1024 * 1024
# Four MiB of 64 KiB blobs: past a 1 MiB disk cap. One 3 MiB value: past the 2 MiB value limit of 16 MiB.
BIG_BLOBS = ("CREATE TABLE blobs (b BLOB);\n"
             "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 64)\n"
             "INSERT INTO blobs SELECT randomblob(65536) FROM n;\n")
BIG_VALUE = "INSERT INTO tally (label, n) VALUES (CAST(zeroblob(3 * 1024 * 1024) AS TEXT), 1);\n"


@pytest.mark.parametrize(("flag", "size", "seed", "limit", "message"), [
    ("--sandbox-max-bytes", "1MiB", BIG_BLOBS, {"disk_bytes": MIB}, "sandbox disk cap exceeded (1048576 bytes)"),
    ("--sandbox-max-memory", "16MiB", BIG_VALUE, {"memory_bytes": 16 * MIB, "value_bytes": 2 * MIB},
     "sandbox memory cap exceeded (16777216 bytes)"),
], ids=["disk", "memory"])
def test_a_sandbox_past_its_cap_fails_with_the_cap_and_never_runs_again(
        migrated: Env, flag: str, size: str, seed: str, limit: dict[str, int], message: str) -> None:
    _, attempt_id = enqueue(migrated, write_package(migrated.root / "big", "big", seed_sql=seed))
    worker = migrated.start_worker("a", extra=[flag, size])
    failed = migrated.wait_attempt(attempt_id)
    assert failed["status"] == "FAILED" and failed["command_status"] == "FAILED", failed
    assert failed["error"].startswith("scenario seed_and_verify failed: seed seed/seed.sql failed: " + message)
    receipts = migrated.db.receipts(attempt_id)
    assert [r["status"] for r in receipts] == ["SUCCEEDED", "SUCCEEDED", "FAILED", "ABORTED", "ABORTED", "ABORTED"]
    evidence = parse_json(receipts[2]["evidence"])
    assert isinstance(evidence, dict) and evidence["limit"] == limit
    assert evidence["error"]["message"].startswith("seed seed/seed.sql failed: " + message)
    time.sleep(1.0)
    worker.stop_cleanly()
    assert failed["delivery_count"] == migrated.db.attempt(attempt_id)["delivery_count"] == 1
    caps = [e for e in worker.logs() if e.get("event") == "sandbox_caps"]
    memory = limit.get("memory_bytes", 256 * MIB)
    assert [c["process_heap_limit_bytes"] for c in caps] == [128 * MIB + memory + 8 * MIB], caps
    assert migrated.cli("audit").returncode == 0


def test_sandbox_caps_out_of_range_or_malformed_are_refused(migrated: Env) -> None:
    for flag, value, needle in [("--sandbox-max-bytes", "12 parsecs", "takes a size such as"),
                                ("--sandbox-max-bytes", "1000", "between 1 MiB and 1 TiB"),
                                ("--sandbox-max-memory", "1MiB", "between 16 MiB and 64 GiB")]:
        assert_one_line_error(migrated.cli("worker", flag, value), 2, needle)


def test_a_worker_killed_at_every_delivery_ends_with_the_budget_verdict(migrated: Env) -> None:
    run_id, attempt_id = enqueue(migrated, small_package(migrated.root / "tiny"))
    command_id = migrated.db.attempt(attempt_id)["command_id"]
    killed = 0
    while migrated.db.attempt(attempt_id)["status"] not in ("SUCCEEDED", "FAILED", "ABORTED"):
        assert killed <= REHEARSAL_BUDGET, "the worker ran the command past its budget"
        worker = migrated.start_worker(f"k{killed}", lease_seconds=1.0,
                                       env={"FENCEPOST_CRASHPOINT": "rehearsal.start:before-commit"})
        wait_until(lambda w=worker: not w.alive or migrated.db.attempt(attempt_id)["status"] == "FAILED",
                   what="the worker to die at the start of its delivery, or the budget verdict")
        if worker.alive:
            worker.stop_cleanly()
        else:
            killed += 1
    attempt = migrated.db.attempt(attempt_id)
    assert killed == REHEARSAL_BUDGET
    assert attempt["status"] == "FAILED" and attempt["command_status"] == "FAILED"
    assert attempt["error"] == f"delivery budget exhausted ({REHEARSAL_BUDGET}/{REHEARSAL_BUDGET})"
    assert attempt["delivery_count"] == REHEARSAL_BUDGET + 1
    events = [e["event"] for e in migrated.db.lease_events(command_id)]
    assert events.count("claim") + events.count("takeover") == REHEARSAL_BUDGET + 1
    assert events[-1] == "fail"
    # The verdict's evidence: the budget and the lease history, sealed on Receipt 1 by the last delivery.
    receipts = migrated.db.receipts(attempt_id)
    assert [r["status"] for r in receipts] == ["FAILED"] + ["ABORTED"] * 5
    evidence = parse_json(receipts[0]["evidence"])
    assert isinstance(evidence, dict)
    assert evidence["budget"] == {"deliveries": REHEARSAL_BUDGET, "max": REHEARSAL_BUDGET}
    assert evidence["error"]["message"] == "delivery budget exhausted"
    assert attempt["error"].startswith(evidence["error"]["message"])
    history = evidence["lease_history"]
    assert [h["delivery"] for h in history] == list(range(1, REHEARSAL_BUDGET + 2))
    assert [h["ended"] for h in history] == ["expired"] * REHEARSAL_BUDGET + ["failed"]
    owners = {e["delivery"]: e["owner"] for e in migrated.db.lease_events(command_id)
              if e["event"] in ("claim", "takeover")}
    assert [h["owner"] for h in history] == [owners[d] for d in range(1, REHEARSAL_BUDGET + 2)]
    assert evidence["last_progress"] is None, "every delivery died before its start committed"
    audited = migrated.cli("audit", "--json")
    assert audited.returncode == 0, audited.describe()
    status = migrated.cli("rehearsal", "status", run_id, "--json", "--evidence")
    assert status.json()["attempts"][0]["receipts"][0]["evidence"]["lease_history"] == history
    last = migrated.start_worker("after")
    time.sleep(1.0)
    last.stop_cleanly()
    assert migrated.db.attempt(attempt_id)["delivery_count"] == REHEARSAL_BUDGET + 1, "claimed again"


def test_rehearse_interrupted_by_ctrl_c_exits_130_and_leaves_no_lease(migrated: Env) -> None:
    package = slow_package(migrated.root / "slow")
    proc = start(["rehearse", str(package), "-d", migrated.url, "--work-dir", str(migrated.work_dir)],
                 name="rehearse", stdout_path=migrated.root / "rehearse.out",
                 stderr_path=migrated.root / "rehearse.err", cwd=migrated.root, env=subprocess_env())
    migrated.workers.append(proc)
    attempt_id = wait_until(
        lambda: next((r["id"] for r in migrated.db.rows("SELECT id FROM rehearsal_attempts")), None),
        what="an Attempt")
    migrated.wait_receipt(attempt_id, 3, "RUNNING")
    sent = time.monotonic()
    proc.send(signal.SIGINT)
    assert proc.wait_exit(timeout=15) == 130, proc.describe()
    took = time.monotonic() - sent
    no_verdict(migrated, attempt_id)
    attempt = migrated.db.attempt(attempt_id)
    assert attempt["command_status"] == "PENDING" and attempt["lease_owner"] is None, attempt
    assert "interrupted" in proc.stderr
    (migrated.root / "rehearse-interrupt.json").write_text(json.dumps({"seconds_to_exit": took}))


def test_fencepost_workers_shows_two_live_workers_then_one_after_a_sigkill(migrated: Env) -> None:
    first = migrated.start_worker("a", lease_seconds=1.5, worker_id="worker-a")
    second = migrated.start_worker("b", lease_seconds=1.5, worker_id="worker-b")

    def live() -> set[str]:
        listed = migrated.cli("workers", "--json")
        assert listed.returncode == 0, listed.describe()
        return {w["id"] for w in listed.json()["live"]}

    assert wait_until(lambda: live() == {"worker-a", "worker-b"} or None, what="both workers to register")
    second.kill()
    # Its row stays until it is three heartbeats (one lease) old; then it is listed as expired.
    assert wait_until(lambda: live() == {"worker-a"} or None, what="the killed worker's registration to expire")
    listed = migrated.cli("workers", "--json").json()
    assert [w["id"] for w in listed["expired"]] == ["worker-b"]
    first.stop_cleanly()
    assert migrated.cli("workers", "--json").json()["live"] == [], "a stopped worker removes its row"


def test_a_burst_of_sigterms_stops_the_worker_and_never_hangs_it(migrated: Env) -> None:
    """From the break-it trial: eight SIGTERMs back to back once deadlocked a worker for good (a signal handler
    re-entered the lock an earlier handler held). It must end promptly every time: 0 when its graceful stop
    (nothing in flight) finished before it saw the second signal, 130 when the second signal cut it short."""
    for attempt in range(6):
        worker = migrated.start_worker(f"burst-{attempt}")
        wait_until(lambda w=worker: w.events("worker_started"), 30, what="the worker to start")
        for _ in range(8):
            worker.send(signal.SIGTERM)
        assert worker.wait_exit(timeout=15) in (0, 130), worker.describe()


def test_rehearse_on_a_broken_work_directory_records_no_verdict_and_says_why(migrated: Env) -> None:
    """A failure of the machine (here the work directory's ``sandboxes`` is a file, as good as a full disk) is
    not the package's verdict: nothing is recorded, the Attempt stays queued, and rehearse says why it did not
    run (a trial's full disk sealed the Attempt FAILED and blocked the gate)."""
    migrated.work_dir.mkdir(parents=True, exist_ok=True)
    (migrated.work_dir / "sandboxes").write_text("not a directory")
    package = small_package(migrated.root / "small")
    result = migrated.cli("rehearse", str(package), "--work-dir", str(migrated.work_dir), "--timeout", "4",
                          "--lease-seconds", "2", "--attempts", "1")
    assert result.returncode == 1, result.describe()
    assert "not run: the worker could not create a sandbox" in result.stdout, result.describe()
    assert "its last delivery was not run: the worker could not create a sandbox" in result.stderr, result.describe()
    attempt_id = next(r["id"] for r in migrated.db.rows("SELECT id FROM rehearsal_attempts"))
    no_verdict(migrated, attempt_id)


def _catches_sigint(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGINT now (``SigCgt`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def test_a_sigint_during_start_up_of_a_background_worker_stops_it_once_it_runs(migrated: Env) -> None:
    """A shell script's background job starts with SIGINT ignored. The worker takes SIGINT over once it runs,
    so one that came while it started was lost, and the worker ran on for good (two trials, with the issue's own
    `fencepost worker & ... kill -INT`). It is now counted from the first moment and acted on when the worker
    runs: a graceful stop, exit 0. The start is made long by an application module that takes 2 s to import."""
    import subprocess

    from helpers.processes import FENCEPOST

    (migrated.root / "slowstart.py").write_text(
        "import time\n\nfrom fencepost.host import Host\n\ntime.sleep(2)\n\n\n"
        "def make(store):\n    return Host(store)\n")
    log = migrated.root / "background-worker.log"
    args = ["worker", "-d", migrated.url, "--work-dir", str(migrated.work_dir), "--log-format", "json",
            "--app", "slowstart:make"]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*FENCEPOST, *args], cwd=migrated.root, env=subprocess_env(), stdout=out,
                                stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 1.0  # the signal comes while the application module still imports
        while time.monotonic() < deadline and not _catches_sigint(proc.pid):
            time.sleep(0.005)
        time.sleep(0.1)
        assert "worker_started" not in log.read_text()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the SIGINT that came during start-up was lost: {log.read_text()}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 0, text
    assert "worker_started" in text and "worker_stopped" in text, text
