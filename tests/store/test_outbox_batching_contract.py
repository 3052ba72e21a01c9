"""Store contract, batched outbox statements (claim events and ``finish_commands`` in one statement each).

Runs against every backend: a batch completion changes exactly the rows whose own token is still current,
records one ``deliver`` event per delivered command, and claim events carry each lease's deadline.
"""

from __future__ import annotations

from fencepost.core.statuses import CommandStatus
from fencepost.store import Store
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import StoreBackend
from helpers.store_reads import read_command


def _insert(store: Store, *ids: str) -> None:
    def fn(tx: UnitOfWork) -> None:
        for command_id in ids:
            tx.outbox.insert(command_id=command_id, kind="k", payload={"id": command_id})

    store.transact(fn)


def test_batch_completion_skips_stale_and_foreign_leases(store: Store, backend: StoreBackend) -> None:
    _insert(store, "a", "b", "c")
    first = {c.id: c for c in store.transact(
        lambda tx: tx.outbox.claim(owner="w1", kinds=["k"], limit=3, lease_seconds=backend.short_lease))}
    assert sorted(first) == ["a", "b", "c"]
    claim_events = store.read(lambda tx: tx.outbox.lease_events("a"))
    assert [(e.event, e.owner, e.delivery, e.lease_until) for e in claim_events] == [
        ("claim", "w1", 1, first["a"].lease.until)]
    backend.expire()
    # "b" is taken over by w2; "c" is aborted; "a" stays w1's (expired but not yet taken over).
    taken = store.transact(lambda tx: tx.outbox.claim(owner="w2", kinds=["k"], limit=1,
                                                      lease_seconds=backend.long_lease))
    assert len(taken) == 1
    stolen = taken[0]
    assert store.transact(lambda tx: tx.outbox.abort("c" if stolen.id != "c" else "b")) is True
    leases = [first[i].lease for i in ("a", "b", "c")]
    outcome = store.transact(lambda tx: tx.outbox.finish_many([*leases, leases[0]]))
    current = [i for i in ("a", "b", "c") if i != stolen.id and read_command(store, i).status is not
               CommandStatus.ABORTED]
    assert outcome[:3] == [i in current for i in ("a", "b", "c")]
    assert outcome[3] is False, "a lease listed twice is delivered once"
    for i in current:
        assert read_command(store, i).status is CommandStatus.DELIVERED
        events = store.read(lambda tx, i=i: tx.outbox.lease_events(i))
        assert [(e.event, e.owner, e.delivery, e.lease_until) for e in events][-1] == ("deliver", "w1", 1, None)
        assert sum(e.event == "deliver" for e in events) == 1
    record = read_command(store, stolen.id)
    assert record.status is CommandStatus.PROCESSING and record.lease_owner == "w2"
    assert [e.event for e in store.read(lambda tx: tx.outbox.lease_events(stolen.id))] == ["claim", "takeover"]
    assert store.transact(lambda tx: tx.outbox.finish_many([stolen.lease])) == [True]
    assert store.transact(lambda tx: tx.outbox.finish_many([])) == []


def test_batched_completion_tells_the_current_lease_from_a_stale_one_of_the_same_command(
        store: Store, backend: StoreBackend) -> None:
    _insert(store, "a")
    (stale,) = store.transact(lambda tx: tx.outbox.claim(owner="w1", kinds=["k"], limit=1,
                                                          lease_seconds=backend.short_lease))
    backend.expire()
    (current,) = store.transact(lambda tx: tx.outbox.claim(owner="w2", kinds=["k"], limit=1,
                                                           lease_seconds=backend.long_lease))
    assert store.transact(lambda tx: tx.outbox.finish_many([stale.lease, current.lease])) == [False, True]
    (deliver,) = [e for e in store.read(lambda tx: tx.outbox.lease_events("a")) if e.event == "deliver"]
    assert (deliver.owner, deliver.delivery) == ("w2", 2)
