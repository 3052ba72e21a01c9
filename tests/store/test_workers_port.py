"""Store contract, the worker registry (``tx.workers``, ADR 0019): runs unchanged against sqlite-wal,
sqlite-delete and postgres.

Time passes with ``backend.advance`` (a ManualClock step on SQLite, a short sleep on PostgreSQL, whose server
clock decides). Heartbeat intervals are a third of ``backend.short_lease``, so a registration renewed before
``backend.expire()`` is expired after it, on every backend.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fencepost.core.errors import Conflict
from fencepost.store import Store
from fencepost.store.records import LIVENESS_INTERVALS, WorkerRecord
from helpers.store_backends import StoreBackend


def register(store: Store, worker_id: str, *, heartbeat_seconds: float = 10.0, **extra: Any) -> WorkerRecord:
    fields: dict[str, Any] = {"host": "host-a", "pid": 4242, "kinds": ["rehearsal.attempt"], "concurrency": 1,
                              "version": "0.1.0"}
    fields.update(extra)
    return store.transact(lambda tx: tx.workers.register(worker_id=worker_id, heartbeat_seconds=heartbeat_seconds,
                                                         **fields))


def listed(store: Store) -> list[WorkerRecord]:
    return store.read(lambda tx: tx.workers.list_workers())


def test_register_stores_the_row_at_the_stores_now(store: Store) -> None:
    before = store.read(lambda tx: tx.now())
    row = register(store, "host-a:4242:ab12", kinds=["b.kind", "a.kind", "b.kind"], concurrency=4, in_flight=2,
                   heartbeat_seconds=2.5, version="9.9.9")
    after = store.read(lambda tx: tx.now())
    assert row == WorkerRecord(id="host-a:4242:ab12", host="host-a", pid=4242, kinds=("a.kind", "b.kind"),
                               concurrency=4, in_flight=2, heartbeat_seconds=2.5, version="9.9.9",
                               started_at=row.started_at, last_seen_at=row.started_at)
    assert before <= row.started_at <= after
    assert row.started_at.utcoffset() == timedelta(0)
    assert listed(store) == [row]


def test_registering_the_same_id_again_starts_the_registration_over(store: Store, backend: StoreBackend) -> None:
    first = register(store, "w", pid=10, kinds=["a"], concurrency=1)
    backend.advance(0.05)
    second = register(store, "w", pid=11, kinds=["b"], concurrency=3, host="host-b")
    assert (second.pid, second.kinds, second.concurrency, second.host) == (11, ("b",), 3, "host-b")
    assert second.started_at > first.started_at and second.last_seen_at == second.started_at
    assert listed(store) == [second]


def test_beat_renews_last_seen_and_in_flight_only(store: Store, backend: StoreBackend) -> None:
    registered = register(store, "w", in_flight=0)
    other = register(store, "other")
    backend.advance(0.05)
    renewed = store.transact(lambda tx: tx.workers.beat("w", in_flight=3))
    assert renewed is not None
    assert renewed.last_seen_at > registered.last_seen_at
    assert renewed.in_flight == 3
    assert renewed.started_at == registered.started_at
    assert (renewed.id, renewed.host, renewed.pid, renewed.kinds, renewed.concurrency, renewed.heartbeat_seconds,
            renewed.version) == (registered.id, registered.host, registered.pid, registered.kinds,
                                 registered.concurrency, registered.heartbeat_seconds, registered.version)
    assert {w.id: w for w in listed(store)} == {"w": renewed, "other": other}


def test_beat_of_an_unknown_worker_returns_none_and_writes_nothing(store: Store) -> None:
    assert store.transact(lambda tx: tx.workers.beat("nobody", in_flight=0)) is None
    assert listed(store) == []


def test_deregister_deletes_the_row(store: Store) -> None:
    register(store, "w")
    kept = register(store, "other")
    assert store.transact(lambda tx: tx.workers.deregister("w")) is True
    assert listed(store) == [kept]
    assert store.transact(lambda tx: tx.workers.deregister("w")) is False
    assert store.transact(lambda tx: tx.workers.beat("w", in_flight=0)) is None
    assert listed(store) == [kept]


def test_beat_and_deregister_of_one_process_leave_another_processs_row(store: Store) -> None:
    """With ``host`` and ``pid``, a beat or a deregistration touches that process's row only: a second process
    under the same id (a shared --worker-id) never renews or removes the first one's registration."""
    row = register(store, "w")
    assert store.transact(lambda tx: tx.workers.beat("w", in_flight=1, host=row.host, pid=row.pid + 1)) is None
    assert store.transact(lambda tx: tx.workers.deregister("w", host="elsewhere", pid=row.pid)) is False
    assert listed(store) == [row]
    renewed = store.transact(lambda tx: tx.workers.beat("w", in_flight=2, host=row.host, pid=row.pid))
    assert renewed is not None and renewed.in_flight == 2
    assert store.transact(lambda tx: tx.workers.deregister("w", host=row.host, pid=row.pid)) is True
    assert listed(store) == []


def test_list_is_oldest_registration_first(store: Store, backend: StoreBackend) -> None:
    for worker_id in ("c", "a", "b"):
        register(store, worker_id)
        backend.advance(0.02)
    assert [w.id for w in listed(store)] == ["c", "a", "b"]


def test_a_registration_is_live_for_three_heartbeat_intervals_after_it_was_last_seen(store: Store) -> None:
    row = register(store, "w", heartbeat_seconds=2.0)
    assert LIVENESS_INTERVALS == 3
    assert row.live_until == row.last_seen_at + timedelta(seconds=6)
    assert row.is_live(row.last_seen_at)
    assert row.is_live(row.last_seen_at + timedelta(seconds=5.999))
    assert not row.is_live(row.live_until)
    assert not row.is_live(row.live_until + timedelta(seconds=1))
    assert row.serves("rehearsal.attempt") and not row.serves("other.kind")


def test_liveness_follows_the_stores_clock_and_a_beat_renews_it(store: Store, backend: StoreBackend) -> None:
    heartbeat = backend.short_lease / LIVENESS_INTERVALS

    def live_ids() -> list[str]:
        return store.read(lambda tx: [w.id for w in tx.workers.list_workers() if w.is_live(tx.now())])

    register(store, "beating", heartbeat_seconds=heartbeat)
    register(store, "silent", heartbeat_seconds=heartbeat)
    assert live_ids() == ["beating", "silent"]
    backend.expire()
    assert live_ids() == []
    store.transact(lambda tx: tx.workers.beat("beating", in_flight=1))
    assert live_ids() == ["beating"]
    # an expired registration is still listed until something removes it
    assert [w.id for w in listed(store)] == ["beating", "silent"]


def test_expire_deletes_and_returns_only_rows_not_seen_for_the_given_age(store: Store, backend: StoreBackend) -> None:
    # At least a second: "young" must stay younger than age / 2 between its registration and the expiry,
    # which PostgreSQL judges by its own clock, so 0.15 s failed on a machine running three test suites.
    age = max(backend.short_lease, 1.0)
    old = register(store, "old")
    register(store, "renewed")
    backend.advance(age)
    renewed = store.transact(lambda tx: tx.workers.beat("renewed", in_flight=0))
    assert renewed is not None
    young = register(store, "young")
    removed = store.transact(lambda tx: tx.workers.expire(age / 2))
    assert removed == [old]
    assert {w.id for w in listed(store)} == {"renewed", "young"}
    assert store.transact(lambda tx: tx.workers.expire(age / 2)) == []
    assert {w.id for w in listed(store)} == {renewed.id, young.id}


def test_expire_refuses_a_negative_age(store: Store) -> None:
    with pytest.raises(ValueError):
        store.transact(lambda tx: tx.workers.expire(-1))


@pytest.mark.parametrize("bad", [
    {"pid": 0}, {"concurrency": 0}, {"in_flight": -1}, {"host": ""}, {"heartbeat_seconds": 0.0},
    {"version": ""}, {"worker_id": ""}, {"worker_id": "w" * 201},
])
def test_values_outside_the_schema_are_a_conflict(store: Store, bad: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"worker_id": "w", "heartbeat_seconds": 1.0, **bad}
    worker_id = fields.pop("worker_id")
    with pytest.raises(Conflict):
        register(store, worker_id, **fields)
    assert listed(store) == []


def test_a_negative_in_flight_beat_is_a_conflict_and_keeps_the_row(store: Store) -> None:
    row = register(store, "w")
    with pytest.raises(Conflict):
        store.transact(lambda tx: tx.workers.beat("w", in_flight=-1))
    assert listed(store) == [row]
