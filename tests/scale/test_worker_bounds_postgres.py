"""Workers that are bounded and stoppable (issue 10) on PostgreSQL, with real ``fencepost worker`` processes.

The SQLite side of the same proofs is ``tests/acceptance/test_worker_bounds.py``; here the server's clock decides
every lease, and the workers listen for notifications.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from scale_support import Fleet, ScaleDB, slow_package, tiny_package

from helpers.processes import subprocess_env
from helpers.waiting import wait_until

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;\n"
REHEARSAL_BUDGET = 5


def endless_package(root: Path) -> Path:
    tiny_package(root)
    (root / "seed").mkdir(exist_ok=True)
    (root / "seed" / "seed.sql").write_text(ENDLESS, encoding="utf-8")
    (root / "fencepost-package.toml").write_text(
        '[package]\nname = "endless"\nversion = "1.0.0"\nseed = ["seed/seed.sql"]\n', encoding="utf-8")
    return root


def attempt_row(db: ScaleDB, attempt_id: str) -> dict[str, object]:
    row = db.query("SELECT a.status, c.status, c.lease_owner, c.delivery_count, a.error, c.id "
                   "FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id WHERE a.id = %s", (attempt_id,))[0]
    return dict(zip(("status", "command_status", "lease_owner", "delivery_count", "error", "command_id"), row,
                    strict=True))


def receipt_status(db: ScaleDB, attempt_id: str, position: int) -> str:
    return str(db.scalar("SELECT status FROM rehearsal_receipts WHERE attempt_id = %s AND position = %s",
                         (attempt_id, position)))


def no_verdict(db: ScaleDB, attempt_id: str) -> None:
    row = attempt_row(db, attempt_id)
    assert row["status"] in ("PENDING", "RUNNING") and row["command_status"] in ("PENDING", "PROCESSING"), row
    unsealed = db.query("SELECT position FROM rehearsal_receipts WHERE attempt_id = %s AND status <> 'SUCCEEDED' "
                        "AND (evidence IS NOT NULL OR status IN ('FAILED', 'ABORTED'))", (attempt_id,))
    assert unsealed == [], unsealed


def events(db: ScaleDB, command_id: object) -> list[str]:
    return [str(r[0]) for r in db.query("SELECT event FROM lease_events WHERE command_id = %s ORDER BY seq",
                                        (command_id,))]


def test_a_second_signal_exits_130_records_nothing_and_releases(db: ScaleDB, fleet: Fleet) -> None:
    run = db.service.create_run(slow_package(db.root / "slow", rows=3_000_000))
    attempt = db.service.enqueue_attempt(run.id)
    worker = fleet.start("a", batch_size=1)
    wait_until(lambda: receipt_status(db, attempt.id, 3) == "RUNNING", interval=0.005, what="the slow scenario")
    worker.send(signal.SIGINT)
    time.sleep(0.5)
    worker.send(signal.SIGINT)
    assert worker.wait_exit(timeout=15) == 130, worker.describe()
    no_verdict(db, attempt.id)
    row = attempt_row(db, attempt.id)
    assert row["command_status"] == "PENDING" and events(db, row["command_id"])[-1] == "release"
    other = fleet.start("b", batch_size=1)
    wait_until(lambda: attempt_row(db, attempt.id)["status"] == "SUCCEEDED", timeout=120, what="the replay")
    other.stop_cleanly()
    assert db.audit_findings() == []


def test_a_stuck_command_holds_no_quick_one(db: ScaleDB, fleet: Fleet) -> None:
    stuck = db.service.enqueue_attempt(db.service.create_run(endless_package(db.root / "endless")).id)
    quick_run = db.service.create_run(tiny_package(db.root / "quick"))
    quick = db.enqueue(quick_run.id, 3)
    first = fleet.start("a", batch_size=10, extra_args=("--concurrency", "1", "--grace-period", "0"))
    wait_until(lambda: receipt_status(db, stuck.id, 3) == "RUNNING", what="the stuck scenario")
    other = fleet.start("b", batch_size=10)
    for attempt_id in quick:
        wait_until(lambda a=attempt_id: attempt_row(db, a)["status"] == "SUCCEEDED", timeout=120,
                   what="the quick Attempts on the other worker")
        assert attempt_row(db, attempt_id)["delivery_count"] == 1
    assert attempt_row(db, stuck.id)["status"] == "RUNNING"
    other.stop_cleanly()
    first.send(signal.SIGTERM)
    assert first.wait_exit(timeout=20) == 0, first.describe()
    no_verdict(db, stuck.id)
    row = attempt_row(db, stuck.id)
    assert row["command_status"] == "PENDING" and [e for e in events(db, row["command_id"]) if e != "heartbeat"] == [
        "claim", "release"]


def test_endless_sql_under_a_time_limit_fails_with_the_limit(db: ScaleDB, fleet: Fleet) -> None:
    attempt = db.service.enqueue_attempt(db.service.create_run(endless_package(db.root / "endless")).id)
    worker = fleet.start("a", batch_size=1, extra_args=("--time-limit", "rehearsal.attempt=2"))
    wait_until(lambda: attempt_row(db, attempt.id)["status"] == "FAILED", timeout=60, what="the time limit")
    row = attempt_row(db, attempt.id)
    assert row["command_status"] == "FAILED" and "time limit exceeded (2 s)" in str(row["error"])
    limit = db.scalar("SELECT evidence::json -> 'limit' ->> 'time_seconds' FROM rehearsal_receipts "
                      "WHERE attempt_id = %s AND position = 3", (attempt.id,))
    assert float(limit) == 2.0
    worker.stop_cleanly()
    assert attempt_row(db, attempt.id)["delivery_count"] == 1
    assert db.audit_findings() == []


def test_a_worker_killed_at_every_delivery_ends_with_the_budget_verdict(db: ScaleDB, fleet: Fleet) -> None:
    attempt = db.service.enqueue_attempt(db.service.create_run(tiny_package(db.root / "tiny")).id)
    killed = 0
    while attempt_row(db, attempt.id)["status"] not in ("SUCCEEDED", "FAILED", "ABORTED"):
        assert killed <= REHEARSAL_BUDGET, "the worker ran the command past its budget"
        worker = fleet.start(f"k{killed}", batch_size=1, lease_seconds=1.0,
                             env=subprocess_env(crashpoint="rehearsal.start:before-commit"))
        wait_until(lambda w=worker: not w.alive or attempt_row(db, attempt.id)["status"] == "FAILED", timeout=60,
                   what="the worker to die at the start of its delivery, or the budget verdict")
        if worker.alive:
            worker.stop_cleanly()
        else:
            killed += 1
    row = attempt_row(db, attempt.id)
    assert killed == REHEARSAL_BUDGET
    assert row["status"] == "FAILED" and row["command_status"] == "FAILED"
    assert str(row["error"]).startswith(f"delivery budget exhausted ({REHEARSAL_BUDGET}/{REHEARSAL_BUDGET})")
    assert row["delivery_count"] == REHEARSAL_BUDGET + 1
    history = events(db, row["command_id"])
    assert history.count("claim") + history.count("takeover") == REHEARSAL_BUDGET + 1 and history[-1] == "fail"
    assert db.audit_findings() == []
