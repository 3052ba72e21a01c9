"""Acceptance: SIGKILL of a real process exactly before or after a COMMIT (``FENCEPOST_CRASHPOINT``).

DESIGN.md, testing shape: crash points at every commit boundary let a test kill a real subprocess there and
check that recovery leaves no partial fact and converges. Seed, "Failure Boundaries": a failed enqueue
creates no partial Attempt or command; a crash before the terminal commit leaves PROCESSING state for
automatic takeover; a scenario failure fails its Receipt, aborts later Receipts, and fails Attempt and Outbox
together.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from acceptance_support import Env, parse_instant, small_package, write_package

S, R, P = "SUCCEEDED", "RUNNING", "PENDING"

# crash point -> (Attempt status, Receipt statuses) that the killed worker leaves committed
WORKER_WINDOWS = {
    "outbox.claim:after-commit": ("PENDING", [P, P, P, P, P, P]),
    "rehearsal.start:before-commit": ("PENDING", [P, P, P, P, P, P]),
    "rehearsal.start:after-commit": ("RUNNING", [R, P, P, P, P, P]),
    "rehearsal.receipt:before-commit@3": ("RUNNING", [S, S, R, P, P, P]),
    "rehearsal.receipt:after-commit@3": ("RUNNING", [S, S, S, R, P, P]),
    "rehearsal.succeed:before-commit": ("RUNNING", [S, S, S, S, S, R]),
}


@pytest.mark.slow
@pytest.mark.parametrize("crashpoint", sorted(WORKER_WINDOWS))
def test_worker_killed_at_a_commit_boundary_is_taken_over(migrated: Env, tmp_path: Path, crashpoint: str) -> None:
    run = migrated.service.create_run(small_package(tmp_path / "tiny"))
    attempt = migrated.service.enqueue_attempt(run.id)

    victim = migrated.start_worker("a", lease_seconds=1, worker_id="worker-a",
                                   env={"FENCEPOST_CRASHPOINT": crashpoint})
    assert victim.wait_exit() == -signal.SIGKILL, victim.stderr
    status, receipts = WORKER_WINDOWS[crashpoint]
    left = migrated.db.attempt(attempt.id)
    assert left["status"] == status
    assert [r["status"] for r in migrated.db.receipts(attempt.id)] == receipts
    assert left["command_status"] == "PROCESSING" and left["lease_owner"] == "worker-a"
    assert left["delivery_count"] == 1

    taker = migrated.start_worker("b", lease_seconds=1, worker_id="worker-b")
    final = migrated.wait_attempt(attempt.id)
    assert final["status"] == "SUCCEEDED" and final["command_status"] == "DELIVERED", final
    assert final["delivery_count"] == 2 and final["delivery"] == 2
    for receipt in migrated.db.receipts(attempt.id):
        assert receipt["status"] == "SUCCEEDED" and receipt["delivery"] == 2
        assert receipt["evidence_json"]["execution"]["worker"] == "worker-b"
    (takeover,) = [e for e in migrated.db.lease_events(attempt.command_id) if e["event"] == "takeover"]
    assert parse_instant(takeover["at"]) >= parse_instant(left["lease_until"])
    assert migrated.cli("rehearsal", "gate", run.id).returncode == 0
    assert taker.stop() == 0


@pytest.mark.slow
def test_worker_killed_after_the_terminal_commit_leaves_a_finished_attempt(migrated: Env, tmp_path: Path) -> None:
    run = migrated.service.create_run(small_package(tmp_path / "tiny"))
    attempt = migrated.service.enqueue_attempt(run.id)
    victim = migrated.start_worker("a", lease_seconds=1, worker_id="worker-a",
                                   env={"FENCEPOST_CRASHPOINT": "rehearsal.succeed:after-commit"})
    assert victim.wait_exit() == -signal.SIGKILL, victim.stderr
    final = migrated.db.attempt(attempt.id)
    assert final["status"] == "SUCCEEDED" and final["command_status"] == "DELIVERED"
    assert final["delivery_count"] == 1 and final["lease_token"] is None
    assert [r["delivery"] for r in migrated.db.receipts(attempt.id)] == [1] * 6
    assert migrated.cli("rehearsal", "gate", run.id).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before-commit", "after-commit"])
def test_enqueue_killed_at_its_commit_is_all_or_nothing(migrated: Env, tmp_path: Path, when: str) -> None:
    run = migrated.service.create_run(small_package(tmp_path / "tiny"))
    result = migrated.cli("rehearsal", "attempt", run.id, env={"FENCEPOST_CRASHPOINT": f"rehearsal.enqueue:{when}"})
    assert result.returncode == -signal.SIGKILL, result.describe()
    counts = migrated.db.counts()
    if when == "before-commit":
        assert (counts["rehearsal_attempts"], counts["rehearsal_receipts"], counts["commands"]) == (0, 0, 0)
        return
    assert (counts["rehearsal_attempts"], counts["rehearsal_receipts"], counts["commands"]) == (1, 6, 1)
    (attempt,) = migrated.service.attempts(run.id)
    worker = migrated.start_worker("w", lease_seconds=5)
    final = migrated.wait_attempt(attempt.id)
    assert final["status"] == "SUCCEEDED" and final["delivery_count"] == 1
    assert worker.stop() == 0


@pytest.mark.slow
def test_create_killed_before_commit_leaves_no_run(migrated: Env, tmp_path: Path) -> None:
    result = migrated.cli("rehearsal", "create", str(small_package(tmp_path / "tiny")),
                          env={"FENCEPOST_CRASHPOINT": "rehearsal.create_run:before-commit"})
    assert result.returncode == -signal.SIGKILL, result.describe()
    counts = migrated.db.counts()
    assert (counts["rehearsal_runs"], counts["rehearsal_run_files"]) == (0, 0)


def _failing_package(root: Path) -> Path:
    return write_package(root, "broken-seed", seed_sql="INSERT INTO tally (label, n) VALUES (NULL, 1);\n")


@pytest.mark.slow
def test_failing_scenario_fails_receipt_attempt_and_command_together(migrated: Env, tmp_path: Path) -> None:
    result = migrated.cli("rehearse", str(_failing_package(tmp_path / "broken")), "--work-dir",
                          str(migrated.work_dir), "--attempts", "1")
    assert result.returncode == 1, result.describe()
    assert "seed_and_verify" in result.stdout and "FAILED" in result.stdout and "BLOCKED" in result.stdout
    assert "NOT NULL constraint failed" in result.stdout

    (run,) = migrated.service.list_runs()
    (attempt,) = migrated.service.attempts(run.id)
    row = migrated.db.attempt(attempt.id)
    assert row["status"] == "FAILED" and row["command_status"] == "FAILED" and row["lease_token"] is None
    assert "seed_and_verify" in row["error"]
    receipts = migrated.db.receipts(attempt.id)
    assert [r["status"] for r in receipts] == ["SUCCEEDED", "SUCCEEDED", "FAILED", "ABORTED", "ABORTED", "ABORTED"]
    assert "NOT NULL constraint failed" in receipts[2]["evidence_json"]["error"]["message"]
    assert [e["event"] for e in migrated.db.lease_events(attempt.command_id)][-1] == "fail"
    gate = migrated.cli("rehearsal", "gate", run.id, "--json")
    assert gate.returncode == 1 and gate.json()["passed"] is False
    assert migrated.cli("audit").returncode == 0


@pytest.mark.slow
def test_worker_killed_before_the_failure_commit_fails_again_on_takeover(migrated: Env, tmp_path: Path) -> None:
    run = migrated.service.create_run(_failing_package(tmp_path / "broken"))
    attempt = migrated.service.enqueue_attempt(run.id)
    victim = migrated.start_worker("a", lease_seconds=1, worker_id="worker-a",
                                   env={"FENCEPOST_CRASHPOINT": "rehearsal.fail:before-commit"})
    assert victim.wait_exit() == -signal.SIGKILL, victim.stderr
    left = migrated.db.attempt(attempt.id)
    assert left["status"] == "RUNNING" and left["command_status"] == "PROCESSING"
    assert [r["status"] for r in migrated.db.receipts(attempt.id)] == [S, S, R, P, P, P]

    taker = migrated.start_worker("b", lease_seconds=1, worker_id="worker-b")
    final = migrated.wait_attempt(attempt.id)
    assert final["status"] == "FAILED" and final["command_status"] == "FAILED" and final["delivery_count"] == 2
    receipts = migrated.db.receipts(attempt.id)
    assert [r["status"] for r in receipts] == [S, S, "FAILED", "ABORTED", "ABORTED", "ABORTED"]
    assert [r["delivery"] for r in receipts[:3]] == [2, 2, 2]
    assert migrated.cli("rehearsal", "gate", run.id).returncode == 1
    assert taker.stop() == 0
