"""Four ``fencepost worker`` processes against one PostgreSQL drain a queue of rehearsal Attempts (400 by default).

Every Attempt must end SUCCEEDED and every command DELIVERED exactly once: one claim, no takeover, one
``deliver`` lease event. Nothing is left non-terminal, all four workers take part (``FOR UPDATE SKIP
LOCKED`` spreads the queue instead of serializing it), and ``fencepost audit``'s checks are clean.

The soak variant (``-m soak``) drains ten thousand. ``FENCEPOST_SCALE_ATTEMPTS`` overrides the default count.
"""

from __future__ import annotations

import os
import time

import pytest
from scale_checks import (
    claims_by_owner,
    delivered_exactly_once,
    deliveries_match_claims,
    every_attempt_succeeded,
    no_stale_write_persisted,
    status_counts,
    takeovers,
)
from scale_support import Fleet, ScaleDB, tiny_package

from helpers.waiting import wait_until

pytestmark = pytest.mark.postgres

WORKERS = 4
ATTEMPTS = int(os.environ.get("FENCEPOST_SCALE_ATTEMPTS", "400"))  # 10,000 under soak
SOAK_ATTEMPTS = int(os.environ.get("FENCEPOST_SCALE_SOAK_ATTEMPTS", "10000"))


def drain(db: ScaleDB, fleet: Fleet, attempts: int, timeout: float) -> dict[str, float]:
    run = db.service.create_run(tiny_package(db.root / "pkg"))
    started = time.monotonic()
    db.enqueue(run.id, attempts)
    enqueued = time.monotonic()
    workers = [fleet.start(f"drain-{i}", lease_seconds=30, poll_interval=0.2) for i in range(WORKERS)]

    def drained() -> bool:
        dead = [w for w in workers if not w.alive]
        assert not dead, "a worker exited while draining\n" + "\n".join(w.describe() for w in dead)
        return db.open_commands() == 0

    wait_until(drained, timeout=timeout, what=f"{attempts} Attempts to drain ({status_counts(db)})", interval=0.25)
    done = time.monotonic()
    for worker in workers:
        worker.stop_cleanly()
    return {"enqueue_s": enqueued - started, "drain_s": done - enqueued}


def check_drained_once(db: ScaleDB, attempts: int) -> None:
    problems = (every_attempt_succeeded(db, attempts) + delivered_exactly_once(db) + deliveries_match_claims(db)
                + no_stale_write_persisted(db))
    assert not problems, "\n".join(problems)
    assert takeovers(db) == 0, "a takeover happened although no worker died"
    owners = claims_by_owner(db)
    assert sorted(owners) == [f"drain-{i}" for i in range(WORKERS)], f"not every worker took part: {owners}"
    assert sum(owners.values()) == attempts
    findings = db.audit_findings()
    assert not findings, "\n".join(findings)


def test_four_workers_drain_every_attempt_each_delivered_exactly_once(db: ScaleDB, fleet: Fleet) -> None:
    timings = drain(db, fleet, ATTEMPTS, timeout=600)
    check_drained_once(db, ATTEMPTS)
    print(f"\n{ATTEMPTS} attempts, {WORKERS} workers: {timings}")


@pytest.mark.soak
def test_soak_four_workers_drain_ten_thousand_attempts(db: ScaleDB, fleet: Fleet) -> None:
    timings = drain(db, fleet, SOAK_ATTEMPTS, timeout=3600)
    check_drained_once(db, SOAK_ATTEMPTS)
    print(f"\n{SOAK_ATTEMPTS} attempts, {WORKERS} workers: {timings}")
