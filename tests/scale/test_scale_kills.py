"""Four workers drain a queue of Attempts (500 by default) on PostgreSQL while workers are SIGKILLed at random moments.

A seeded RNG picks when (0.4-2 s apart) and which worker dies; each killed worker is replaced at once by a
new process, exactly like a supervisor restarting a crashed worker machine. Leases are short (1.5 s), so
the commands a dead worker held are taken over quickly. Afterwards, from durable records only:

- **Nothing lost.** Every Attempt is SUCCEEDED and every command DELIVERED; none is left non-terminal.
- **Counts match.** Each command's ``delivery_count`` equals one claim plus one takeover per later delivery,
  and the claims carry deliveries 1..n in order.
- **Delivered once.** There is exactly one ``deliver`` event per command, by its final delivery.
- **No stale write persisted.** No heartbeat or deliver of delivery d follows the claim of a later delivery
  in the heartbeat history. Every Receipt of every Attempt, and its evidence's ``execution.delivery``,
  carry the final delivery.
- **The kills mattered.** Takeovers happened, and commands that killed workers held were finished by others.

The default run kills six workers; the soak variant (``-m soak``) runs ten thousand Attempts through 150 kills.
``FENCEPOST_SCALE_SEED`` replays a given sequence of kills; the seed is printed with every failure.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from scale_checks import (
    claims_by_owner,
    delivered_exactly_once,
    deliveries_match_claims,
    every_attempt_succeeded,
    no_stale_write_persisted,
    redeliveries,
    status_counts,
    takeovers,
)
from scale_support import Fleet, ScaleDB, tiny_package

from helpers.processes import Process

pytestmark = pytest.mark.postgres

WORKERS = 4
LEASE_SECONDS = 1.5
SEED = int(os.environ.get("FENCEPOST_SCALE_SEED", "4242"))
ATTEMPTS = int(os.environ.get("FENCEPOST_SCALE_ATTEMPTS", "500"))  # 10,000 under soak
KILLS = 6
SOAK_ATTEMPTS = int(os.environ.get("FENCEPOST_SCALE_SOAK_ATTEMPTS", "10000"))
SOAK_KILLS = 150


def holds_lease(db: ScaleDB, worker_id: str) -> bool:
    """True while ``worker_id`` holds the lease of at least one PROCESSING command, none of them past its second
    delivery: killing the holder of one command over and over would exhaust its delivery budget (ADR 0020), a
    correct verdict but not what this test is about."""
    held, most = db.query("SELECT count(*), coalesce(max(delivery_count), 0) FROM commands "
                          "WHERE status = 'PROCESSING' AND lease_owner = %s", (worker_id,))[0]
    return int(held) > 0 and int(most) <= 2


def drain_under_kills(db: ScaleDB, fleet: Fleet, attempts: int, kills: int, timeout: float) -> dict[str, object]:
    rng = random.Random(SEED)
    run = db.service.create_run(tiny_package(db.root / "pkg"))
    db.enqueue(run.id, attempts)
    generation = 0

    def start(slot: int) -> Process:
        nonlocal generation
        generation += 1
        return fleet.start(f"kill-{slot}-g{generation}", lease_seconds=LEASE_SECONDS, poll_interval=0.1,
                           batch_size=5)

    slots = [start(slot) for slot in range(WORKERS)]
    killed: list[str] = []
    started = time.monotonic()
    deadline = started + timeout
    while db.open_commands() > 0:
        assert time.monotonic() < deadline, f"seed {SEED}: not drained within {timeout:g} s ({status_counts(db)})"
        dead = [w for w in slots if not w.alive]
        assert not dead, f"seed {SEED}: a worker exited on its own\n" + "\n".join(w.describe() for w in dead)
        if len(killed) < kills:
            time.sleep(rng.uniform(0.4, 2.0))
            # The victim is a worker that holds a lease now: on a loaded machine a just-started worker may
            # still be importing, and killing it would test nothing (a bounded wait for one to claim).
            holders: list[int] = []
            holds_by = time.monotonic() + 15.0
            while db.open_commands() > 0 and time.monotonic() < holds_by:
                holders = [i for i in range(WORKERS) if holds_lease(db, slots[i].worker_id)]
                if holders:
                    break
                time.sleep(0.05)
            slot = rng.choice(holders) if holders else rng.randrange(WORKERS)
            victim = slots[slot]
            victim.kill()  # SIGKILL: no release, no final write; its leases must expire
            killed.append(victim.worker_id)
            slots[slot] = start(slot)
        else:
            time.sleep(0.25)
    drained = time.monotonic() - started
    for worker in slots:
        worker.stop_cleanly()
    return {"killed": killed, "drain_s": round(drained, 1)}


def check_after_kills(db: ScaleDB, attempts: int, killed: list[str]) -> None:
    problems = (every_attempt_succeeded(db, attempts) + delivered_exactly_once(db) + deliveries_match_claims(db)
                + no_stale_write_persisted(db))
    assert not problems, f"seed {SEED}:\n" + "\n".join(problems)
    assert takeovers(db) == redeliveries(db), f"seed {SEED}: takeover events and delivery counts disagree"
    assert takeovers(db) > 0, f"seed {SEED}: {len(killed)} kills but no takeover: the kills tested nothing"
    owners = claims_by_owner(db)
    assert any(owner in owners for owner in killed), f"seed {SEED}: no killed worker had claimed anything"
    delivered_by_killed = db.scalar(
        "SELECT count(*) FROM lease_events WHERE event = 'deliver' AND owner = ANY(%s)", (killed,))
    taken_from_killed = db.scalar(
        "SELECT count(DISTINCT t.command_id) FROM lease_events t JOIN lease_events c "
        "ON c.command_id = t.command_id AND c.delivery = t.delivery - 1 AND c.event IN ('claim', 'takeover') "
        "WHERE t.event = 'takeover' AND c.owner = ANY(%s)", (killed,))
    assert taken_from_killed > 0, f"seed {SEED}: no command of a killed worker was taken over"
    assert delivered_by_killed <= attempts
    findings = db.audit_findings()
    assert not findings, f"seed {SEED}:\n" + "\n".join(findings)


def test_random_sigkills_lose_nothing_and_persist_no_stale_write(db: ScaleDB, fleet: Fleet) -> None:
    outcome = drain_under_kills(db, fleet, ATTEMPTS, KILLS, timeout=600)
    killed = outcome["killed"]
    assert isinstance(killed, list) and len(killed) == KILLS, f"seed {SEED}: drained before every kill: {outcome}"
    check_after_kills(db, ATTEMPTS, killed)
    print(f"\nseed {SEED}: {ATTEMPTS} attempts, {KILLS} SIGKILLs, {takeovers(db)} takeovers, {outcome['drain_s']} s")


@pytest.mark.soak
def test_soak_many_kill_cycles(db: ScaleDB, fleet: Fleet) -> None:
    outcome = drain_under_kills(db, fleet, SOAK_ATTEMPTS, SOAK_KILLS, timeout=7200)
    killed = outcome["killed"]
    assert isinstance(killed, list)
    check_after_kills(db, SOAK_ATTEMPTS, killed)
    print(f"\nseed {SEED}: {SOAK_ATTEMPTS} attempts, {len(killed)} SIGKILLs, {takeovers(db)} takeovers, "
          f"{outcome['drain_s']} s")
