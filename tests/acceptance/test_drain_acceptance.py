"""Acceptance: several ``fencepost worker`` processes drain one SQLite control database (issue 2, part 4).

Every Attempt must run exactly once (one claim, one delivery, no takeover) and no worker may ever report
SQLite contention: writes take the lock at ``BEGIN IMMEDIATE`` and wait there, within a bounded retry.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from acceptance_support import COMMAND_TERMINAL, SCENARIOS, Env, small_package, wait_until

WORKERS = 4
ATTEMPTS = 200
DRAIN_TIMEOUT = 45.0  # the whole test stays well under a minute on 2 cores
CONTENTION = re.compile(r"database is locked|database table is locked|\bbusy\b|SQLITE_BUSY", re.IGNORECASE)


@pytest.mark.slow
def test_four_workers_drain_two_hundred_attempts_exactly_once(migrated: Env, tmp_path: Path) -> None:
    service = migrated.service
    run = service.create_run(small_package(tmp_path / "tiny"))
    attempts = [service.enqueue_attempt(run.id) for _ in range(ATTEMPTS)]
    command_ids = {a.command_id for a in attempts}
    assert len(command_ids) == ATTEMPTS
    watch = migrated.watch_tokens()

    ids = [f"drainer-{n}" for n in range(WORKERS)]
    workers = [migrated.start_worker(worker_id, lease_seconds=30, worker_id=worker_id, extra=["--batch-size", "5"])
               for worker_id in ids]

    def open_commands() -> int:
        placeholders = ",".join("?" * len(COMMAND_TERMINAL))
        return int(migrated.db.scalar(f"SELECT count(*) FROM commands WHERE status NOT IN ({placeholders})",
                                      COMMAND_TERMINAL))

    def drained() -> bool:
        for worker in workers:  # fail fast, with the line, as soon as any worker reports contention
            found = CONTENTION.search(worker.stderr)
            assert not found, f"worker {worker.name} reported contention: {found.string[max(0, found.start() - 300):]}"
            assert worker.proc.poll() is None, f"worker {worker.name} exited early:\n{worker.stderr}"
        return open_commands() == 0

    wait_until(drained, DRAIN_TIMEOUT, what="every command to reach a terminal status", interval=0.1)
    for worker in workers:
        assert worker.stop() == 0, worker.stderr

    # Every Attempt SUCCEEDED, once.
    rows = migrated.db.rows(
        "SELECT a.id, a.status, a.delivery, c.id AS command_id, c.status AS command_status, c.delivery_count, "
        "c.lease_token FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id WHERE a.run_id = ?",
        (run.id,))
    assert len(rows) == ATTEMPTS
    assert Counter(r["status"] for r in rows) == {"SUCCEEDED": ATTEMPTS}
    assert Counter(r["command_status"] for r in rows) == {"DELIVERED": ATTEMPTS}
    assert {r["delivery_count"] for r in rows} == {1} and {r["delivery"] for r in rows} == {1}
    assert {r["lease_token"] for r in rows} == {None}
    assert migrated.db.scalar("SELECT count(*) FROM commands") == ATTEMPTS

    # Heartbeat history: exactly one claim and one deliver per command, no takeover or release.
    events = migrated.db.rows("SELECT command_id, event, owner, delivery FROM lease_events")
    per_kind = Counter((e["command_id"], e["event"]) for e in events)
    for command_id in command_ids:
        assert per_kind[(command_id, "claim")] == 1, command_id
        assert per_kind[(command_id, "deliver")] == 1, command_id
    assert {e["event"] for e in events} <= {"claim", "heartbeat", "deliver"}
    assert {e["delivery"] for e in events} == {1}
    claim_owner = {e["command_id"]: e["owner"] for e in events if e["event"] == "claim"}
    deliver_owner = {e["command_id"]: e["owner"] for e in events if e["event"] == "deliver"}
    assert claim_owner == deliver_owner, "a command was delivered by a worker that did not claim it"
    assert set(claim_owner.values()) <= set(ids)
    assert len(set(claim_owner.values())) >= 2, "the workers did not share the work"

    # Receipts: six SUCCEEDED per Attempt, all delivery 1.
    receipts = migrated.db.rows(
        "SELECT r.scenario, r.status, r.delivery FROM rehearsal_receipts r "
        "JOIN rehearsal_attempts a ON a.id = r.attempt_id WHERE a.run_id = ?", (run.id,))
    assert Counter((r["scenario"], r["status"], r["delivery"]) for r in receipts) == {
        (s, "SUCCEEDED", 1): ATTEMPTS for s in SCENARIOS}

    # Each worker logged JSON only, never contention, and its stop summary adds up.
    delivered = 0
    for worker in workers:
        assert not CONTENTION.search(worker.stderr), worker.stderr
        assert not [e for e in worker.logs() if e.get("level") in ("warning", "error")], worker.stderr
        (stopped,) = worker.events("worker_stopped")
        assert stopped["lost"] == 0 and stopped["failed"] == 0
        delivered += stopped["delivered"]
    assert delivered == ATTEMPTS

    migrated.assert_no_secrets(watch.stop())
