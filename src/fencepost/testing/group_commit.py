"""The group-commit contract (``Store.group_commit``, ``Store.fenced(..., group=True)``; ADR 0079).

Units that threads submit while a group is being written share the next transaction, each in a savepoint: every
unit keeps its own all-or-nothing outcome (one that raises leaves nothing and only its caller sees the error), a
unit fenced out by a takeover persists nothing while the others commit, contention retries the whole group, and
a unit runs in its caller's ``contextvars`` context. Each test forces a group: the first unit (written alone)
waits inside its transaction until the others are queued behind it.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from fencepost.core.errors import FencepostError, LeaseLost, StoreUnavailable, TransactionAborted
from fencepost.store.base import Store, StoreBusy
from fencepost.store.ports import FencedUnit, UnitOfWork
from fencepost.testing.backend import ContractHarness, StoreContract

FOLLOWERS = 5
#: The fenced units' transaction name: the contract suite's own (excused from crash windows, as test data).
UNIT = "contract.fenced"
_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("fencepost_contract_caller", default="none")


def _mark(tx: UnitOfWork | FencedUnit, name: str) -> None:
    tx.outbox.insert(command_id=name, kind="marker", payload={})


def _marked(store: Store, *names: str) -> list[str]:
    def present(tx: UnitOfWork) -> list[str]:
        return [n for n in names if tx.outbox.get(n) is not None]

    return store.read(present)


def _marker(name: str, result: Any = None) -> Callable[[Any], Any]:
    """A unit (plain or fenced) that writes the marker ``name`` and returns ``result``."""

    def unit(tx: UnitOfWork | FencedUnit) -> Any:
        _mark(tx, name)
        return result

    return unit


def _markers() -> list[Callable[[Any], Any]]:
    return [_marker(f"m{i}", i) for i in range(FOLLOWERS)]


def _group_of(store: Store, units: list[Callable[[UnitOfWork], Any]]) -> list[tuple[str, Any]]:
    """Run ``units`` through ``store.group_commit`` so that all of them share one transaction (``_submitted``)."""
    committer = store.group_commit
    return _submitted(store, [functools.partial(committer.run, fn) for fn in units])


def _submitted(store: Store, submits: list[Callable[[], Any]]) -> list[tuple[str, Any]]:
    """Call each of ``submits`` (each submits one unit to ``store.group_commit``) in its own thread, while a
    first unit, written alone, holds its transaction open until all of them are queued behind it: they then
    share the next transaction. Returns ``("ok", result)`` or ``("error", exception)`` per submit, in order."""
    committer = store.group_commit
    outcomes: list[tuple[str, Any]] = [("missing", None)] * len(submits)
    writing = threading.Event()

    def first(tx: UnitOfWork) -> None:
        writing.set()
        deadline = time.monotonic() + 60
        while committer.waiting < len(submits):
            if time.monotonic() > deadline:
                raise AssertionError("the other units never queued")
            time.sleep(0.005)

    def submit(index: int) -> None:
        _CALLER.set(f"caller-{index}")
        try:
            outcomes[index] = ("ok", submits[index]())
        except BaseException as error:  # reported to the test
            outcomes[index] = ("error", error)

    leader = threading.Thread(target=committer.run, args=(first,))
    leader.start()
    assert writing.wait(60), "the first unit was never written"  # it is being written, alone
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(submits))]
    for thread in threads:
        thread.start()
    for thread in [leader, *threads]:
        thread.join(120)
    assert not any(t.is_alive() for t in [leader, *threads]), "a unit never returned"
    return outcomes


class GroupCommitContract(StoreContract):
    """Group commit on one backend (subclass as ``TestGroupCommit``)."""

    def test_queued_units_share_one_transaction_and_each_gets_its_own_result(self, store: Store) -> None:
        before = store.group_commit.groups
        outcomes = _group_of(store, _markers())
        assert outcomes == [("ok", i) for i in range(FOLLOWERS)]
        assert store.group_commit.groups - before == 2  # the first unit alone, then all the others together
        assert _marked(store, *(f"m{i}" for i in range(FOLLOWERS))) == [f"m{i}" for i in range(FOLLOWERS)]

    def test_a_unit_that_raises_leaves_nothing_and_the_others_commit(self, store: Store) -> None:
        def failing(tx: UnitOfWork) -> None:
            _mark(tx, "bad")
            raise ValueError("this unit gave up")

        units = _markers()
        units[2] = failing
        outcomes = _group_of(store, units)
        kind, error = outcomes[2]
        assert kind == "error" and isinstance(error, ValueError) and str(error) == "this unit gave up"
        assert [k for k, _ in outcomes[:2] + outcomes[3:]] == ["ok"] * (FOLLOWERS - 1)
        assert _marked(store, "bad", *(f"m{i}" for i in range(FOLLOWERS))) == ["m0", "m1", "m3", "m4"]

    def test_a_conflicting_unit_is_rolled_back_alone(self, store: Store) -> None:
        store.transact(lambda tx: _mark(tx, "taken"))
        def conflicting(tx: UnitOfWork) -> None:
            _mark(tx, "half")
            _mark(tx, "taken")  # a constraint refuses this second write

        with pytest.raises(FencepostError) as alone:  # written alone: the store's own error type
            store.transact(lambda tx: _mark(tx, "taken"))
        units = _markers()
        units[1] = conflicting
        outcomes = _group_of(store, units)
        # Inside a group the caller sees the same translated error as alone, never a driver's exception
        # (a raw sqlite3.IntegrityError escaped the shared transaction: found by the break-it trial of ADR 0079).
        assert outcomes[1][0] == "error" and type(outcomes[1][1]) is type(alone.value), outcomes[1]
        assert _marked(store, "half", *(f"m{i}" for i in range(FOLLOWERS))) == ["m0", "m2", "m3", "m4"]

    def test_a_fenced_out_unit_persists_nothing_while_the_others_commit(
            self, store: Store, backend: ContractHarness) -> None:
        def seed(tx: UnitOfWork) -> None:
            for i in range(FOLLOWERS):
                tx.outbox.insert(command_id=f"c{i}", kind="k", payload={})

        store.transact(seed)
        claimed = store.transact(lambda tx: tx.outbox.claim(owner="w1", kinds=["k"], limit=FOLLOWERS,
                                                              lease_seconds=backend.short_lease))
        leases = {c.id: c.lease for c in claimed}
        backend.expire()
        [taken] = store.transact(lambda tx: tx.outbox.claim(owner="w2", kinds=["k"], limit=1,
                                                              lease_seconds=backend.long_lease,
                                                              command_ids=["c3"]))
        assert taken.id == "c3"

        def fenced(i: int) -> Callable[[], Any]:
            return lambda: store.fenced(leases[f"c{i}"], _marker(f"m{i}", i), name=UNIT, renew=False, group=True,
                                        lease_seconds=backend.long_lease)[0]

        outcomes = _submitted(store, [fenced(i) for i in range(FOLLOWERS)])
        assert outcomes[3][0] == "error" and isinstance(outcomes[3][1], LeaseLost)
        assert [o for i, o in enumerate(outcomes) if i != 3] == [("ok", i) for i in range(FOLLOWERS) if i != 3]
        assert _marked(store, *(f"m{i}" for i in range(FOLLOWERS))) == ["m0", "m1", "m2", "m4"]

    def test_store_fenced_with_group_holds_the_lease_and_refuses_a_stale_one(
            self, store: Store, backend: ContractHarness) -> None:
        store.transact(lambda tx: tx.outbox.insert(command_id="c1", kind="k", payload={}))
        [claimed] = store.transact(lambda tx: tx.outbox.claim(owner="w1", kinds=["k"], limit=1,
                                                                lease_seconds=backend.long_lease))
        result, lease = store.fenced(claimed.lease, _marker("m1", "done"), name=UNIT,
                                     lease_seconds=backend.long_lease, renew=False, group=True)
        assert (result, lease) == ("done", claimed.lease)  # held, not renewed: the same lease comes back
        events = store.read(lambda tx: tx.outbox.lease_events("c1"))
        assert [e.event for e in events] == ["claim"]  # a hold writes no heartbeat history
        store.transact(lambda tx: tx.outbox.abort("c1"))
        with pytest.raises(LeaseLost):
            store.fenced(claimed.lease, _marker("m2"), name=UNIT,
                         lease_seconds=backend.long_lease, renew=False, group=True)
        assert _marked(store, "m1", "m2") == ["m1"]

    def test_contention_retries_the_whole_group(self, store: Store) -> None:
        runs = [0] * FOLLOWERS

        def unit(i: int) -> Callable[[UnitOfWork], Any]:
            def fn(tx: UnitOfWork) -> int:
                runs[i] += 1
                _mark(tx, f"m{i}")
                if i == FOLLOWERS - 1 and runs[i] == 1:
                    raise StoreBusy("contention in the last unit")
                return i
            return fn

        outcomes = _group_of(store, [unit(i) for i in range(FOLLOWERS)])
        assert outcomes == [("ok", i) for i in range(FOLLOWERS)]
        assert runs == [2] * FOLLOWERS  # every unit of the group ran again: its first writes were rolled back
        assert len(_marked(store, *(f"m{i}" for i in range(FOLLOWERS)))) == FOLLOWERS

    def test_a_lost_transaction_fails_every_unit_of_the_group(self, store: Store) -> None:
        units = _markers()

        def lost(tx: UnitOfWork) -> None:
            raise TransactionAborted("the database ended the transaction")

        units[3] = lost
        outcomes = _group_of(store, units)
        assert all(kind == "error" and isinstance(error, StoreUnavailable) for kind, error in outcomes), outcomes
        assert _marked(store, *(f"m{i}" for i in range(FOLLOWERS))) == []  # nothing of the group committed

    def test_each_unit_runs_in_its_callers_context(self, store: Store) -> None:
        def caller(tx: UnitOfWork) -> str:
            return _CALLER.get()

        outcomes = _group_of(store, [caller] * FOLLOWERS)
        assert outcomes == [("ok", f"caller-{i}") for i in range(FOLLOWERS)]
