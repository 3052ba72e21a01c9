"""``WorkerRegistration`` (ADR 0019): start, beat and stop write the worker's row, each in its own named
transaction, and never raise; the liveness rule and the purge of old expired rows at start."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from fencepost import __version__
from fencepost.core.clock import ManualClock
from fencepost.core.errors import InvalidInput, StoreUnavailable
from fencepost.outbox.registry import (
    BEAT,
    DEREGISTER,
    MIN_RETAIN_EXPIRED_SECONDS,
    REGISTER,
    WorkerIdInUse,
    WorkerRegistration,
    read_census,
)
from fencepost.store import Store, open_store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.records import WorkerRecord
from helpers.store_backends import StoreBackend

KIND = "rehearsal.attempt"


def registration(store: Store, worker_id: str = "w-1", **extra: Any) -> WorkerRegistration:
    extra.setdefault("heartbeat_seconds", 10.0)
    return WorkerRegistration(store, worker_id, [KIND, "other.kind", KIND], host="host-a", pid=4242, **extra)


def rows(store: Store) -> list[WorkerRecord]:
    return store.read(lambda tx: tx.workers.list_workers())


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [str(getattr(r, "event", "")) for r in caplog.records if r.name == "fencepost.registry"]


def test_start_beat_stop_write_register_renew_and_delete_the_row(store: Store, backend: StoreBackend,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fencepost.registry")
    reg = registration(store, concurrency=3)
    assert reg.start() is True
    [row] = rows(store)
    assert (row.id, row.host, row.pid, row.kinds, row.concurrency, row.in_flight, row.heartbeat_seconds,
            row.version) == ("w-1", "host-a", 4242, ("other.kind", KIND), 3, 0, 10.0, __version__)
    assert reg.record == row
    backend.advance(0.05)
    assert reg.beat(in_flight=2) is True
    [renewed] = rows(store)
    assert renewed.in_flight == 2 and renewed.last_seen_at > row.last_seen_at
    assert renewed.started_at == row.started_at
    assert reg.stop() is True
    assert rows(store) == []
    assert events(caplog) == ["worker_registered", "worker_deregistered"]


def test_after_stop_nothing_writes_the_row_again(store: Store) -> None:
    reg = registration(store)
    reg.start()
    reg.stop()
    assert reg.beat(in_flight=1) is False
    assert reg.start() is False
    assert reg.stop() is False
    assert rows(store) == []
    assert reg.record is None


def test_a_beat_without_a_row_registers_again(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fencepost.registry")
    reg = registration(store)
    reg.start()
    store.transact(lambda tx: tx.workers.deregister("w-1"))  # as a purge by age would
    assert reg.beat(in_flight=1) is True
    [row] = rows(store)
    assert (row.id, row.in_flight) == ("w-1", 1)
    assert "worker_reregistered" in events(caplog)


def test_registry_writes_are_the_named_transactions(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    names: list[str | None] = []
    inner = store.transaction

    def recording(*, write: bool = True, name: str | None = None) -> Any:
        names.append(name)
        return inner(write=write, name=name)

    monkeypatch.setattr(store, "transaction", recording)
    reg = registration(store)
    reg.start()
    reg.beat(in_flight=0)
    reg.stop()
    assert names == [REGISTER, BEAT, DEREGISTER] == ["workers.register", "workers.beat", "workers.deregister"]


def test_a_failing_store_is_logged_and_never_raised(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fencepost.registry")
    faulty = FaultInjectingStore(store, query="register_worker")
    reg = registration(faulty)
    assert reg.start() is False                        # the store failed: no row, no exception
    assert rows(store) == [] and reg.record is None
    assert reg.beat(in_flight=1) is True               # the next beat registers
    assert [w.id for w in rows(store)] == ["w-1"]
    faulty.arm(nth=1, query="beat_worker", times=2)
    assert reg.beat(in_flight=2) is False
    assert reg.beat(in_flight=3) is False
    assert reg.beat(in_flight=4) is True               # retried at the next beat
    assert rows(store)[0].in_flight == 4
    faulty.arm(nth=1, query="deregister_worker")
    assert reg.stop() is False                         # the row stays and expires by age
    assert [w.id for w in rows(store)] == ["w-1"]
    assert events(caplog) == ["worker_register_failed", "worker_reregistered", "worker_beat_failed",
                              "worker_beat_failed", "worker_deregister_failed"]
    assert not any(r.exc_info for r in caplog.records if r.name == "fencepost.registry")  # one line each


def test_an_unexpected_error_in_a_beat_is_logged_with_its_traceback_not_raised(
        store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    reg = registration(store)
    reg.start()

    def broken(*, write: bool = True, name: str | None = None) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(store, "transaction", broken)
    assert reg.beat(in_flight=0) is False
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "worker_beat_failed"]
    assert record.exc_info and record.levelno == logging.WARNING


def test_a_beat_makes_one_attempt_without_the_busy_retry(store: Store) -> None:
    faulty = FaultInjectingStore(store, query="beat_worker", error=StoreUnavailable)
    reg = registration(faulty)
    reg.start()
    assert reg.beat(in_flight=0) is False
    assert faulty.fired == 1 and faulty.executed.count("beat_worker") == 1


@pytest.mark.parametrize("bad", [
    {"worker_id": ""}, {"worker_id": "w" * 201}, {"heartbeat_seconds": 0}, {"heartbeat_seconds": 1200.5},
    {"concurrency": 0}, {"pid": 0}, {"retain_expired_seconds": MIN_RETAIN_EXPIRED_SECONDS - 1},
])
def test_arguments_out_of_range_are_refused_before_any_write(store: Store, bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {"worker_id": "w-1", "heartbeat_seconds": 10.0, "pid": 1, **bad}
    with pytest.raises(InvalidInput):
        WorkerRegistration(store, args.pop("worker_id"), [KIND], **args)
    assert rows(store) == []


def test_start_deletes_only_registrations_expired_for_longer_than_the_retention(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fencepost.registry")
    clock = ManualClock()
    store = open_store(f"sqlite:///{tmp_path / 'registry.db'}", clock=clock)
    try:
        store.migrate()
        retain = MIN_RETAIN_EXPIRED_SECONDS
        registration(store, "crashed-long-ago").start()
        clock.advance(retain - 60)
        registration(store, "crashed-recently").start()
        live = registration(store, "live")
        live.start()
        clock.advance(120)  # the first is now expired for longer than the retention, the second is not
        live.beat(in_flight=0)
        census = read_census(store)
        assert [w.id for w in census.live] == ["live"]
        assert [w.id for w in census.expired] == ["crashed-long-ago", "crashed-recently"]
        registration(store, "newcomer", retain_expired_seconds=retain).start()
        assert [w.id for w in rows(store)] == ["crashed-recently", "live", "newcomer"]
        removed = [getattr(r, "removed", None) for r in caplog.records
                   if getattr(r, "event", None) == "worker_registration_removed"]
        assert removed == ["crashed-long-ago"]
    finally:
        store.close()


def test_the_census_splits_live_from_expired_by_the_stores_clock(store: Store, backend: StoreBackend) -> None:
    heartbeat = backend.short_lease / 3
    beating = registration(store, "beating", heartbeat_seconds=heartbeat)
    silent = registration(store, "silent", heartbeat_seconds=heartbeat)
    beating.start()
    silent.start()
    census = read_census(store)
    assert [w.id for w in census.live] == ["beating", "silent"] and census.expired == []
    assert [w.id for w in census.serving(KIND)] == ["beating", "silent"]
    assert census.serving("nobody.serves.this") == []
    backend.expire()
    beating.beat(in_flight=1)
    census = read_census(store)
    assert [w.id for w in census.live] == ["beating"]
    assert [w.id for w in census.expired] == ["silent"]
    assert [w.id for w in census.serving(KIND)] == ["beating"]


def test_a_beat_while_start_is_writing_is_skipped_not_waited_for(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    reg = registration(store)
    inside, release = threading.Event(), threading.Event()
    real = store.transact

    def slow_transact(fn: Any, **kwargs: Any) -> Any:
        inside.set()
        assert release.wait(30)
        return real(fn, **kwargs)

    monkeypatch.setattr(store, "transact", slow_transact)
    starting = threading.Thread(target=reg.start)
    beats: list[bool] = []
    beating = threading.Thread(target=lambda: beats.append(reg.beat(in_flight=1)))
    starting.start()
    try:
        assert inside.wait(30)
        beating.start()
        beating.join(10)
        assert beats == [False]                    # at once: the heartbeat thread never waits for start
        assert real(lambda tx: tx.workers.list_workers(), write=False) == []
    finally:
        release.set()
        starting.join(30)
        if beating.is_alive():
            beating.join(30)
    assert [w.in_flight for w in rows(store)] == [0]
    assert reg.beat(in_flight=1) is True


def test_a_second_live_process_under_one_worker_id_is_refused_and_never_touches_the_first(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """A shared --worker-id (a new-user trial): the second start is refused naming the first worker, writes
    nothing, and neither its beat nor its stop renews or removes the first one's row."""
    first = registration(store, "machine-a")
    assert first.start()
    second = WorkerRegistration(store, "machine-a", [KIND], heartbeat_seconds=10.0, host="host-b", pid=7)
    with pytest.raises(WorkerIdInUse, match="in use by a live worker on host host-a, pid 4242"):
        second.start()
    [row] = rows(store)
    assert (row.host, row.pid) == ("host-a", 4242)
    with caplog.at_level(logging.WARNING, logger="fencepost.registry"):
        assert second.beat(in_flight=3) is False
    assert "worker_id_in_use" in events(caplog)
    assert second.stop() is True  # its own row was never there: nothing deleted
    assert [(r.host, r.pid, r.in_flight) for r in rows(store)] == [("host-a", 4242, 0)]
    assert first.beat(in_flight=1) and rows(store)[0].in_flight == 1


def test_a_row_left_by_a_dead_process_of_this_machine_is_taken_over(store: Store) -> None:
    """A worker killed and restarted under its id at once: the old row is still live, but its process is gone
    from this machine, so the restart registers."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(gone.stdout)
    import socket

    old = WorkerRegistration(store, "w-fixed", [KIND], heartbeat_seconds=10.0, host=socket.gethostname(),
                             pid=dead_pid)
    assert old.start()
    restarted = WorkerRegistration(store, "w-fixed", [KIND], heartbeat_seconds=10.0)
    assert restarted.start()
    assert [(r.host, r.pid) for r in rows(store)] == [(restarted.host, restarted.pid)]


def test_concurrent_starts_under_one_worker_id_register_exactly_one(backend: StoreBackend) -> None:
    """Eight processes started at once under one id (a verification trial: on PostgreSQL two of them registered,
    5 ms apart, both checking before either wrote): exactly one registers, the others are refused."""
    stores = [backend.migrated() for _ in range(8)]
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []
    lock = threading.Lock()

    def start(i: int) -> None:
        registration = WorkerRegistration(stores[i], "shared-id", [KIND], heartbeat_seconds=10.0,
                                          host=f"host-{i}", pid=1000 + i)
        barrier.wait()
        try:
            registration.start()
            outcome = "registered"
        except WorkerIdInUse:
            outcome = "refused"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["refused"] * 7 + ["registered"], outcomes
    assert len(rows(stores[0])) == 1
