"""LISTEN/NOTIFY with real ``fencepost worker`` processes on PostgreSQL (ADR 0014).

- A listening worker with a 30 s poll interval, idle, runs an Attempt enqueued by another process within
  seconds, well before its next poll.
- With ``--no-listen`` (here through ``FENCEPOST_LISTEN=0``) the same worker sleeps out its poll interval,
  which is the control that makes the first test mean something, and polling alone still delivers.
- Terminating the worker's LISTEN connection (``pg_terminate_backend``) does not stop the worker: it
  reconnects and is woken again.

The one fixed sleep (``SETTLE``) only gives the worker time to enter its long idle wait after its startup
claims. If the worker had not entered it, the listening tests could pass for the wrong reason, but they could
never fail wrongly. The ``--no-listen`` control shows the wait is real.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from scale_support import Fleet, ScaleDB, tiny_package

from helpers.processes import Process, subprocess_env
from helpers.store_backends import postgres_url
from helpers.waiting import wait_until

pytestmark = pytest.mark.postgres

LONG_POLL = 30.0
SETTLE = 1.0
PICKUP = 10.0  # "well before the poll interval"


def connections(worker: Process) -> list[tuple[int, str]]:
    """``(pid, last query)`` of the worker's listening connection(s) in ``pg_stat_activity``."""
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        rows = conn.execute("SELECT pid, query FROM pg_stat_activity WHERE application_name = %s",
                            (f"fencepost-listen {worker.worker_id}",)).fetchall()
    return [(int(pid), str(query)) for pid, query in rows]


def listeners(worker: Process) -> list[int]:
    """Pids of the worker's connections that have run ``LISTEN fencepost_commands`` (their last statement)."""
    return [pid for pid, query in connections(worker) if query == "LISTEN fencepost_commands"]


def idle(worker: Process) -> dict[str, object]:
    """The worker's first ``worker_idle`` log event, once it has logged one (fails if it died)."""
    assert worker.alive, worker.describe()
    events = worker.events("worker_idle")
    return events[0] if events else {}


def attempt_status(db: ScaleDB, attempt_id: str) -> str:
    return str(db.scalar("SELECT status FROM rehearsal_attempts WHERE id = %s", (attempt_id,)))


def test_an_idle_listening_worker_runs_a_new_attempt_well_before_its_poll_interval(db: ScaleDB, fleet: Fleet) -> None:
    run = db.service.create_run(tiny_package(db.root / "pkg"))
    worker = fleet.start("listener", poll_interval=LONG_POLL)
    assert wait_until(lambda: idle(worker), timeout=60, what="the worker to go idle")["waiting"] == "notify"
    wait_until(lambda: listeners(worker), timeout=30, what="the worker's LISTEN connection")
    time.sleep(SETTLE)
    for _ in range(2):  # twice: a wake-up leaves the worker listening for the next one
        attempt = db.service.enqueue_attempt(run.id)
        started = time.monotonic()
        wait_until(lambda a=attempt.id: attempt_status(db, a) == "SUCCEEDED", timeout=PICKUP,
                   what=f"the idle listening worker to run the new Attempt well before its {LONG_POLL:g} s poll")
        assert time.monotonic() - started < LONG_POLL / 2
        time.sleep(SETTLE)
    worker.stop_cleanly()


def test_without_listen_the_worker_sleeps_out_its_poll_interval_and_polling_delivers(
        db: ScaleDB, fleet: Fleet) -> None:
    run = db.service.create_run(tiny_package(db.root / "pkg"))
    sleeper = fleet.start("sleeper", poll_interval=LONG_POLL, env=subprocess_env(FENCEPOST_LISTEN="0"))
    assert wait_until(lambda: idle(sleeper), timeout=60, what="the worker to go idle")["waiting"] == "poll"
    time.sleep(SETTLE)
    attempt = db.service.enqueue_attempt(run.id)
    time.sleep(3.0)
    assert attempt_status(db, attempt.id) == "PENDING", "a --no-listen worker claimed before its poll interval"
    assert connections(sleeper) == [], "a --no-listen worker opened a LISTEN connection"
    sleeper.stop_cleanly()  # a stop request ends the idle wait at once
    poller = fleet.start("poller", poll_interval=0.5, extra_args=("--no-listen",))
    wait_until(lambda: attempt_status(db, attempt.id) == "SUCCEEDED", timeout=60, what="polling to deliver")
    assert connections(poller) == []
    poller.stop_cleanly()


def test_a_terminated_listen_connection_does_not_stop_the_worker(db: ScaleDB, fleet: Fleet) -> None:
    run = db.service.create_run(tiny_package(db.root / "pkg"))
    worker = fleet.start("survivor", poll_interval=LONG_POLL)
    wait_until(lambda: idle(worker), timeout=60, what="the worker to go idle")
    [pid] = wait_until(lambda: listeners(worker), timeout=30, what="the worker's LISTEN connection")
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    wait_until(lambda: worker.events("listen_lost"), timeout=30, what="the worker to notice the lost connection")
    wait_until(lambda: [p for p in listeners(worker) if p != pid], timeout=30,
               what="the worker to listen again on a new connection")
    assert [p for p, _ in connections(worker)] != [pid]
    assert worker.alive, worker.describe()
    time.sleep(SETTLE)
    attempt = db.service.enqueue_attempt(run.id)
    wait_until(lambda: attempt_status(db, attempt.id) == "SUCCEEDED", timeout=PICKUP,
               what="the worker to be woken on its new LISTEN connection")
    worker.stop_cleanly()
    assert "Traceback" not in worker.log
