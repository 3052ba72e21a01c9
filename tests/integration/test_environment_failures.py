"""A failure of the worker's machine is not the package's verdict: the worker records nothing and leaves
the lease to expire, and the next delivery (on a healthy machine) produces the real outcome."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from fencepost.core.clock import ManualClock
from fencepost.core.statuses import AttemptStatus, CommandStatus
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.worker import IDLE_STOP_WAIT_SECONDS
from fencepost.rehearsal import scenarios
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.sandbox import is_environment_error
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import open_store
from helpers.processes import run_cli, start, worker_args
from helpers.store_backends import admin_connect, postgres_url
from helpers.waiting import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory"


def _worker(store: object, work_dir: Path) -> Worker:
    registry = HandlerRegistry()
    registry.register(KIND, AttemptHandler(work_dir))
    return Worker(store, registry, WorkerConfig(poll_interval=0.01, lease_seconds=10))  # type: ignore[arg-type]


def test_sqlite_io_errors_are_environment_errors_and_sql_errors_are_not() -> None:
    io_error = sqlite3.OperationalError("disk I/O error")
    io_error.sqlite_errorcode = 10 | (13 << 8)  # SQLITE_IOERR_FSYNC
    sql_error = sqlite3.OperationalError("no such table: t")
    sql_error.sqlite_errorcode = 1
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # a package can provoke SQLITE_FULL itself (max_page_count)
    assert is_environment_error(io_error)
    assert not is_environment_error(sql_error) and not is_environment_error(full)


def test_storage_failure_mid_scenario_abandons_the_delivery_instead_of_failing_the_attempt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    store = open_store(f"sqlite:///{tmp_path}/c.db", clock=clock)
    store.migrate()
    package = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, package)
    service = RehearsalService(store)
    attempt = service.enqueue_attempt(service.create_run(package).id)

    def broken_disk(env: scenarios.ScenarioEnv) -> dict[str, object]:
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = 10
        raise error

    with monkeypatch.context() as patch:
        patch.setattr(scenarios, "SCENARIOS", (*scenarios.SCENARIOS[:2], ("seed_and_verify", broken_disk),
                                               *scenarios.SCENARIOS[3:]))
        patch.setattr("fencepost.rehearsal.handler.SCENARIOS", scenarios.SCENARIOS)
        assert _worker(store, tmp_path / "work").run_once() == 1

    abandoned = service.attempt(attempt.id)
    assert abandoned.status is AttemptStatus.RUNNING and abandoned.command_status is CommandStatus.PROCESSING
    events = [e.event for e in store.read(lambda tx: tx.outbox.lease_events(attempt.command_id))]
    assert "fail" not in events and abandoned.error is None

    clock.advance(11)  # the abandoned lease expires; a healthy worker takes over and replays from scratch
    assert _worker(store, tmp_path / "work2").run_once() == 1
    final = service.attempt(attempt.id)
    assert final.status is AttemptStatus.SUCCEEDED and final.delivery_count == 2
    assert service.gate(final.run_id).passed


@pytest.mark.postgres
def test_sigterm_with_nothing_in_flight_exits_soon_when_the_database_is_gone(pg_backend: object,
                                                                             tmp_path: Path) -> None:
    """A worker whose database was dropped under it, stopped with SIGTERM while it runs nothing, exits within
    about ``IDLE_STOP_WAIT_SECONDS`` (its leases would expire), not after the whole grace period and the
    interrupt wait (40 s before: a break-it trial)."""
    name = f"fp_gone_{uuid.uuid4().hex[:12]}"
    with admin_connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(postgres_url())._replace(path=f"/{name}"))
    worker = None
    try:
        assert run_cli(["migrate", "-d", url]).returncode == 0
        worker = start(worker_args(url, tmp_path / "work", lease_seconds=30, poll_interval=0.05,
                                   extra=["--grace-period", "30"]),
                       name="worker", stdout_path=tmp_path / "worker.log", started_event="worker_started")
        wait_until(lambda: worker.events("worker_started"), 30, "the worker to start")
        with admin_connect() as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        time.sleep(1.0)
        stopped_at = time.monotonic()
        worker.send(signal.SIGTERM)
        worker.wait_exit(timeout=IDLE_STOP_WAIT_SECONDS + 8, what="exit after SIGTERM on a dropped database")
        assert time.monotonic() - stopped_at < IDLE_STOP_WAIT_SECONDS + 8
        assert worker.events("worker_abandoned") or worker.events("worker_stopped"), worker.describe()
    finally:
        if worker is not None:
            worker.kill()
        with admin_connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
