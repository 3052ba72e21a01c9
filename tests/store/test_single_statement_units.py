"""PostgreSQL runs a worker's claim and batch completion as single statements without a block (ADR 0090).

What must hold: each is exactly one statement on the wire (no BEGIN, clock read or COMMIT); its rows and
history rows carry one instant, the statement's own; a unit that needs a second statement opens a block first
and commits all of it together; a single-statement unit refuses a second statement and ``now()``; and the
crash points keep their meaning (before-commit: nothing committed; after-commit: all of it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fencepost.core.statuses import CommandStatus
from fencepost.store import Store
from fencepost.store.postgres import store as pg_store_module

pytestmark = pytest.mark.postgres


def _enqueue(store: Store, count: int, kind: str = "k.a") -> list[str]:
    ids = [f"cmd-{kind}-{i}" for i in range(count)]

    def unit(tx: Any) -> None:
        for command_id in ids:
            tx.outbox.insert(command_id=command_id, kind=kind, payload={"i": command_id})

    store.transact(unit)
    return ids


def _claim(store: Store, kinds: list[str], limit: int = 10) -> list[Any]:
    return store.transact(lambda tx: tx.outbox.claim(owner="w1", kinds=kinds, limit=limit, lease_seconds=30.0),
                          name="outbox.claim")


def _raw(store: Store, sql: str) -> list[tuple[Any, ...]]:
    def read(tx: Any) -> list[tuple[Any, ...]]:
        return list(tx.execute_raw(sql))

    return store.read(read)


def _history(store: Store) -> list[tuple[Any, ...]]:
    return _raw(store, "SELECT command_id, event, at, lease_until FROM lease_events ORDER BY seq")


def test_a_claim_of_one_kind_and_its_completion_are_one_statement_each(pg: Store, wire: list[tuple[str, bool]]) -> None:
    _enqueue(pg, 5)
    wire.clear()
    claimed = _claim(pg, ["k.a"])
    assert len(claimed) == 5
    sent = [text for text, _ in wire]
    assert len(sent) == 1 and "FOR UPDATE SKIP LOCKED" in sent[0], sent
    wire.clear()
    done = pg.transact(lambda tx: tx.outbox.finish_many([c.lease for c in claimed]), name="outbox.deliver")
    assert done == [True] * 5
    sent = [text for text, _ in wire]
    assert len(sent) == 1 and "DELIVERED" in sent[0], sent


def test_the_claim_and_its_history_carry_the_statements_own_instant(pg: Store) -> None:
    _enqueue(pg, 3)
    claimed = _claim(pg, ["k.a"])
    rows = _raw(pg, "SELECT id, updated_at, last_heartbeat_at, lease_until FROM commands ORDER BY id")
    instants = {r[1] for r in rows} | {r[2] for r in rows}
    assert len(instants) == 1
    (instant,) = instants
    assert {r[3] for r in rows} == {instant + timedelta(seconds=30)}
    assert {c.lease.until for c in claimed} == {instant + timedelta(seconds=30)}
    history = _history(pg)
    assert [(h[1], h[2]) for h in history] == [("claim", instant)] * 3
    pg.transact(lambda tx: tx.outbox.finish_many([c.lease for c in claimed]), name="outbox.deliver")
    finished = _raw(pg, "SELECT DISTINCT finished_at FROM commands")
    delivered = [h[2] for h in _history(pg) if h[1] == "deliver"]
    assert len(finished) == 1 and delivered == [finished[0][0]] * 3 and finished[0][0] > instant


def test_a_claim_over_two_kinds_opens_a_block_and_commits_it_whole(pg: Store, wire: list[tuple[str, bool]]) -> None:
    _enqueue(pg, 3, "k.a")
    _enqueue(pg, 3, "k.b")
    wire.clear()
    claimed = _claim(pg, ["k.a", "k.b"], limit=6)
    assert sorted(c.kind for c in claimed) == ["k.a"] * 3 + ["k.b"] * 3
    sent = [text for text, _ in wire]
    assert sent[0].startswith("BEGIN") and sent[-1] == "COMMIT", sent
    # One instant for both statements: the block's clock, not each statement's own.
    assert len({h[2] for h in _history(pg)}) == 1


def test_a_completion_listing_one_command_twice_runs_its_rounds_in_one_block(
    pg: Store, wire: list[tuple[str, bool]]
) -> None:
    _enqueue(pg, 2)
    claimed = _claim(pg, ["k.a"])
    wire.clear()
    leases = [c.lease for c in claimed]
    done = pg.transact(lambda tx: tx.outbox.finish_many([*leases, leases[0]]), name="outbox.deliver")
    assert done == [True, True, False]
    sent = [text for text, _ in wire]
    assert sent[0].startswith("BEGIN") and sent[-1] == "COMMIT" and len(sent) == 4, sent


def test_a_single_statement_unit_refuses_a_second_statement_and_the_clock(pg: Store) -> None:
    _enqueue(pg, 2)

    def two(tx: Any) -> None:
        tx.outbox.claim(owner="w1", kinds=["k.a"], limit=1, lease_seconds=30.0)
        tx.outbox.claim(owner="w1", kinds=["k.a"], limit=1, lease_seconds=30.0)

    with pytest.raises(RuntimeError, match="second statement"):
        pg.transact(two, name="outbox.claim")
    with pytest.raises(RuntimeError, match="own instant"):
        pg.transact(lambda tx: tx.now(), name="outbox.claim")


class _Crash(Exception):
    pass


@pytest.mark.parametrize(("point", "status"), [("outbox.claim:before-commit", CommandStatus.PENDING),
                                               ("outbox.claim:after-commit", CommandStatus.PROCESSING)])
def test_the_crash_points_sit_where_a_commit_would(pg: Store, monkeypatch: pytest.MonkeyPatch, point: str,
                                                   status: CommandStatus) -> None:
    ids = _enqueue(pg, 2)

    def crash(name: str) -> None:
        if name == point:
            raise _Crash(name)

    monkeypatch.setattr(pg_store_module, "crashpoint", crash)
    with pytest.raises(_Crash):
        _claim(pg, ["k.a"])
    found = pg.read(lambda tx: [tx.outbox.get(i) for i in ids])
    assert {c.status for c in found if c is not None} == {status}
    assert len(_history(pg)) == (2 if status is CommandStatus.PROCESSING else 0)
