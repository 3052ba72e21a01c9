"""A PostgreSQL restart while a worker drains Attempts (soak: it stops the local cluster).

A ``fencepost worker`` subprocess is draining a queue of Attempts when the local cluster is stopped (fast
shutdown: every session is terminated, in-flight transactions roll back) and started again: after three
seconds (the store's bounded busy retry rides it out), and after forty (past that 30 s bound: units of work
fail with StoreUnavailable, the worker abandons its command to the lease and takes it over once the server
is back). The worker must survive it (reconnect through its pool and go on), lose no command, and record no
outcome twice: every Attempt ends SUCCEEDED with exactly one ``deliver`` lease event, one claim or takeover
per delivery, the gate passes and ``fencepost audit`` exits 0.

The cluster is started again in a ``finally`` and by the fixture's teardown, whatever happens. This disrupts
every other user of the local cluster for up to a minute: run it alone (docs/crash-testing.md).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from crash_flows import require_backend
from crash_harness import (
    CrashDB,
    Workers,
    assert_cli_audit_clean,
    claim_count,
    crash_db,
    slow_package,
    terminal_events,
    unsound,
    wait_until,
)

from fencepost.core.statuses import AttemptStatus
from helpers.store_backends import postgres_url

ATTEMPTS = 8
# Short: the store's busy retry (``busy_wait_seconds``, 30 s) rides it out. Long: past that bound, so the
# worker's units of work fail with StoreUnavailable, the command is abandoned to its lease and taken over.
DOWNTIMES = {"short": 3.0, "long": 40.0}
CLUSTER = "main"


def _version() -> str:
    versions = sorted(p.name for p in Path("/etc/postgresql").iterdir() if p.is_dir())
    assert versions, "no PostgreSQL cluster configured under /etc/postgresql"
    return versions[-1]


def pg_ctl(action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", _version(), CLUSTER, action],
                          capture_output=True, text=True, timeout=120, check=False)


def server_up() -> bool:
    try:
        with psycopg.connect(postgres_url(), connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def ensure_running() -> None:
    if not server_up():
        pg_ctl("start")
        wait_until(server_up, timeout=120, what="the PostgreSQL cluster to accept connections", interval=0.2)


@pytest.fixture
def cluster() -> Iterator[None]:
    """Whatever the test does, the cluster runs again afterwards."""
    if not Path("/etc/postgresql").is_dir():
        pytest.skip("no local PostgreSQL cluster to restart (pg_ctlcluster)")
    ensure_running()
    try:
        yield
    finally:
        ensure_running()


def _finished(db: CrashDB, ids: list[str]) -> int:
    return sum(1 for i in ids if db.attempt(i).status.terminal)


@pytest.mark.soak
@pytest.mark.postgres
@pytest.mark.parametrize("downtime", list(DOWNTIMES))
def test_worker_survives_a_postgres_restart(cluster: None, tmp_path: Path, downtime: str) -> None:
    require_backend("postgres")
    with crash_db("postgres", tmp_path) as db:
        service = db.service
        run = service.create_run(slow_package(tmp_path / "pkg", rows=300_000))
        ids = [service.enqueue_attempt(run.id).id for _ in range(ATTEMPTS)]
        workers = Workers(db)
        try:
            worker = workers.start("drainer", lease_seconds=2.0)
            wait_until(lambda: _finished(db, ids) >= 2, what="the worker to finish two Attempts")
            assert _finished(db, ids) < ATTEMPTS, "the queue drained before the restart: make it longer"
            db.close()  # the test's own pool would only hold dead connections
            try:
                stopped = pg_ctl("stop")
                assert stopped.returncode == 0, stopped.stdout + stopped.stderr
                assert not server_up()
                time.sleep(DOWNTIMES[downtime])
                assert worker.proc.poll() is None, f"the worker died while the server was down\n{worker.describe()}"
            finally:
                started = pg_ctl("start")
            assert started.returncode == 0, started.stdout + started.stderr
            wait_until(server_up, timeout=120, what="the cluster to accept connections again", interval=0.2)
            wait_until(lambda: _finished(db, ids) == ATTEMPTS, timeout=180,
                       what=f"every Attempt to finish after the restart (worker log: {worker.log_path})")
            assert worker.proc.poll() is None, f"the worker exited\n{worker.describe()}"
            worker.stop_cleanly()
        finally:
            workers.kill_all()

        for attempt_id in ids:
            attempt = db.attempt(attempt_id)
            events = db.events(attempt.command_id)
            kinds = [e.event for e in events]
            assert attempt.status is AttemptStatus.SUCCEEDED, (attempt, kinds)
            assert terminal_events(events) == ["deliver"], kinds
            assert claim_count(events) == attempt.delivery_count, kinds
        gate = db.service.gate(run.id)
        assert gate.passed, gate.blocking
        assert not unsound(db.store), unsound(db.store)
        assert_cli_audit_clean(db)
