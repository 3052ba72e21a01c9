"""A worker whose process clock is hours off changes nothing on PostgreSQL: the server's clock rules leases.

The skewed ``fencepost worker`` runs under libfaketime (``FAKETIME=+5h`` or ``-5h`` LD_PRELOADed), so its
``time.time()``, ``datetime.now()`` and libc wall clock are five hours off. Its JSON log timestamps prove
it (they are checked). Two libfaketime/CPython incompatibilities are worked around without touching the
wall clock (see ``scale_support.SKEW_SHIM``).

If a worker's own clock decided anything:
- at +5h it would see every other worker's lease as expired and steal it;
- at -5h its own leases would look long expired to everyone else, and it would never take over a dead
  worker's command.

Instead, from durable records:
- **Side by side.** A skewed and a normal worker drain slow Attempts together. Both complete Attempts,
  neither ever takes over (no worker died, so any takeover would be a stolen active lease), and every lease
  event, deadline and Receipt time the skewed worker wrote is the server's time:
  - ``at`` lies between two server readings taken before and after;
  - ``lease_until - at`` is exactly the lease duration.
- **Takeover.** Another worker holds an Attempt's lease with heartbeats while the skewed worker polls, then
  dies silently. The skewed worker takes the Attempt over once, and only once, the lease has expired by the
  server's clock: not before its ``lease_until``, and within seconds after it.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from scale_support import (
    SKEWED_ARGV,
    Fleet,
    ScaleDB,
    skewed_env,
    slow_package,
    tiny_package,
)

from fencepost.rehearsal.handler import KIND
from fencepost.store import Store
from fencepost.store.records import Lease
from helpers.processes import Process
from helpers.waiting import wait_until

pytestmark = pytest.mark.postgres

SKEWS = {"+5h": timedelta(hours=5), "-5h": timedelta(hours=-5)}
LEASE = 2.0
ATTEMPTS = 8
# Seed rows of the slow package: an Attempt then runs for about a second (several heartbeats at LEASE / 3).
SLOW_ROWS = int(os.environ.get("FENCEPOST_SKEW_SLOW_ROWS", "600000"))


def server_now(db: ScaleDB) -> datetime:
    value = db.scalar("SELECT clock_timestamp()")
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def start_skewed(fleet: Fleet, worker_id: str, skew: str) -> Process:
    return fleet.start(worker_id, lease_seconds=LEASE, poll_interval=0.1, batch_size=1, env=skewed_env(skew),
                       argv_prefix=SKEWED_ARGV)


def assert_process_clock_skewed(worker: Process, skew: timedelta, real: datetime) -> None:
    """The worker's own log timestamps are ``skew`` off the real time: libfaketime took effect."""
    started = wait_until(lambda: worker.events("worker_started"), timeout=60, what="the skewed worker to start")
    logged = datetime.fromisoformat(str(started[0]["ts"]))
    off = logged - real
    assert abs(off - skew) < timedelta(minutes=2), f"the worker's clock is {off} off, expected {skew}"


def events_by(db: ScaleDB, owner: str) -> list[dict[str, Any]]:
    rows = db.query("SELECT command_id, event, delivery, at, lease_until FROM lease_events WHERE owner = %s "
                    "ORDER BY seq", (owner,))
    return [{"command_id": c, "event": e, "delivery": d, "at": a, "lease_until": u} for c, e, d, a, u in rows]


def _held(events: list[dict[str, Any]]) -> list[tuple[datetime, datetime]]:
    """Server-time intervals during which the worker held a lease (claim to deliver, per command)."""
    claimed = {e["command_id"]: e["at"] for e in events if e["event"] == "claim"}
    return [(claimed[e["command_id"]], e["at"]) for e in events
            if e["event"] == "deliver" and e["command_id"] in claimed]


def _claims_during(claimer: list[dict[str, Any]], holder: list[dict[str, Any]]) -> int:
    """How many claims of ``claimer`` happened while ``holder`` held a lease: chances to steal it."""
    intervals = _held(holder)
    return sum(1 for e in claimer if e["event"] == "claim" and any(a < e["at"] < b for a, b in intervals))


@pytest.mark.parametrize("skew", list(SKEWS))
def test_a_skewed_worker_beside_a_normal_one_steals_nothing_and_writes_server_time(
        db: ScaleDB, fleet: Fleet, skew: str) -> None:
    run = db.service.create_run(slow_package(db.root / "pkg", SLOW_ROWS))
    before = server_now(db)
    skewed = start_skewed(fleet, "skewed", skew)
    assert_process_clock_skewed(skewed, SKEWS[skew], datetime.now(UTC))
    normal = fleet.start("normal", lease_seconds=LEASE, poll_interval=0.1, batch_size=1)
    wait_until(lambda: normal.events("worker_started"), timeout=60, what="the normal worker to start")
    ids = db.enqueue(run.id, ATTEMPTS)
    wait_until(lambda: db.open_commands() == 0, timeout=300, what="both workers to drain the queue")
    skewed.stop_cleanly()
    normal.stop_cleanly()
    after = server_now(db)

    statuses = db.query("SELECT status, count(*) FROM rehearsal_attempts GROUP BY status")
    assert statuses == [("SUCCEEDED", ATTEMPTS)], statuses
    assert db.scalar("SELECT count(*) FROM lease_events WHERE event = 'takeover'") == 0, \
        "a takeover while both workers were alive: an active lease was stolen"
    assert db.scalar("SELECT max(delivery_count) FROM commands") == 1
    mine = events_by(db, "skewed")
    theirs = events_by(db, "normal")
    assert {e["event"] for e in mine} >= {"claim", "deliver"}, f"the skewed worker completed nothing: {mine}"
    assert {e["event"] for e in theirs} >= {"claim", "deliver"}, f"the normal worker completed nothing: {theirs}"
    assert any(e["event"] == "heartbeat" for e in mine), "no heartbeat from the skewed worker: make Attempts slower"
    assert _claims_during(mine, theirs), "the skewed worker never claimed while the normal one held a lease"
    assert _claims_during(theirs, mine), "the normal worker never claimed while the skewed one held a lease"
    for event in mine + theirs:
        assert before <= event["at"] <= after, f"an event time outside the server's clock: {event}"
        if event["lease_until"] is not None:
            assert event["lease_until"] - event["at"] == timedelta(seconds=LEASE), event
    skewed_commands = sorted({e["command_id"] for e in mine})
    for started_at, finished_at in db.query(
            "SELECT r.started_at, r.finished_at FROM rehearsal_receipts r JOIN rehearsal_attempts a "
            "ON a.id = r.attempt_id WHERE a.command_id = ANY(%s)", (skewed_commands,)):
        assert before <= started_at <= finished_at <= after, "a Receipt time outside the server's clock"
    assert len(ids) == ATTEMPTS


class Holder:
    """Another worker, in this process: holds a claimed lease with heartbeats every LEASE / 4 until it dies."""

    def __init__(self, store: Store, lease: Lease) -> None:
        self.store = store
        self.lease = lease
        self.beats = 0
        self.error: BaseException | None = None
        self._dead = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        try:
            while not self._dead.wait(LEASE / 4):
                self.lease = self.store.transact(
                    lambda tx: tx.outbox.renew(self.lease, lease_seconds=LEASE))  # LeaseLost if stolen
                self.beats += 1
        except BaseException as error:
            self.error = error

    def die(self) -> None:
        """Stop heartbeating, silently: the lease lapses as if this worker's machine had died."""
        self._dead.set()
        self._thread.join(timeout=30)
        assert self.error is None, f"the holder lost its active lease: {self.error!r}"


@pytest.mark.parametrize("skew", list(SKEWS))
def test_a_skewed_worker_takes_over_a_lapsed_lease_only_when_the_server_says_it_expired(
        db: ScaleDB, fleet: Fleet, skew: str) -> None:
    run = db.service.create_run(tiny_package(db.root / "pkg"))
    attempt = db.service.enqueue_attempt(run.id)
    # Another worker (this process, on the server's clock) claims the Attempt's command through the store, as
    # ``fencepost worker`` does, and keeps its 2 s lease alive while the skewed worker starts and polls every
    # 0.1 s: a +5h clock would steal it at once. Then the holder dies silently.
    [claimed] = db.store.transact(lambda tx: tx.outbox.claim(owner="holder", kinds=[KIND], limit=1,
                                                             lease_seconds=LEASE))
    assert claimed.id == attempt.command_id
    holder = Holder(db.store, claimed.lease)
    skewed = start_skewed(fleet, "skewed", skew)
    try:
        assert_process_clock_skewed(skewed, SKEWS[skew], datetime.now(UTC))
        wait_until(lambda: skewed.events("worker_idle"), timeout=60, what="the skewed worker to poll")
        time.sleep(2 * LEASE)  # forty polls of the skewed worker against an active lease
    finally:
        holder.die()
    assert db.scalar("SELECT lease_owner FROM commands WHERE id = %s", (attempt.command_id,)) == "holder"
    wait_until(lambda: db.scalar("SELECT status FROM rehearsal_attempts WHERE id = %s", (attempt.id,)) == "SUCCEEDED",
               timeout=120, what="the skewed worker to take over and finish the Attempt")
    skewed.stop_cleanly()

    events = db.query("SELECT event, owner, delivery, at, lease_until FROM lease_events WHERE command_id = %s "
                      "ORDER BY seq", (attempt.command_id,))
    first = [e for e in events if e[2] == 1]
    second = [e for e in events if e[2] == 2]
    assert [e[0] for e in first] == ["claim"] + ["heartbeat"] * holder.beats and {e[1] for e in first} == {"holder"}
    assert holder.beats >= 8
    assert [e[0] for e in second if e[0] != "heartbeat"] == ["takeover", "deliver"]
    assert {e[1] for e in second} == {"skewed"}
    expired_at = first[-1][4]  # the holder's last deadline
    taken_at = second[0][3]
    assert taken_at >= expired_at, f"taken over at {taken_at}, before the lease expired at {expired_at}"
    assert taken_at - expired_at < timedelta(seconds=15), \
        f"taken over {taken_at - expired_at} after expiry: the skewed worker waited on its own clock"
    for event in second:
        if event[4] is not None:
            assert event[4] - event[3] == timedelta(seconds=LEASE), event
    receipts = db.query("SELECT delivery, (evidence::json -> 'execution' ->> 'delivery')::int FROM "
                        "rehearsal_receipts WHERE attempt_id = %s", (attempt.id,))
    assert receipts == [(2, 2)] * 6
