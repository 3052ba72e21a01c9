"""The concurrency contract: what must never interleave. Each thread opens its own store on the same database,
as separate worker processes would.

Every command goes to exactly one claimer; concurrent takeovers never double-claim; concurrent enqueues of
one Run get distinct Attempt numbers (seed: "Heartbeat And Takeover"; ``RehearsalPort.next_attempt_seq``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from fencepost.core.fingerprint import sha256_bytes
from fencepost.core.statuses import CommandStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.testing.backend import ContractHarness, StoreContract

THREADS = 4


def run_threads(target: Callable[[int], Any], count: int = THREADS) -> list[Any]:
    """Run ``target(index)`` in ``count`` threads released together; their results, by index.

    Fails the test when a thread raised or is still running after 120 s.
    """
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait()
            results[index] = target(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == [], errors
    return results


class ConcurrencyContract(StoreContract):
    """Concurrent claims, takeovers and Attempt numbering on one backend (subclass as ``TestConcurrency``)."""

    def test_concurrent_claims_hand_every_command_to_exactly_one_worker(
            self, store: Store, backend: ContractHarness) -> None:
        total = 500

        def seed(tx: UnitOfWork) -> None:
            for i in range(total):
                tx.outbox.insert(command_id=f"c{i:03d}", kind="k", payload={"i": i})

        store.transact(seed)
        stores = [backend.open() for _ in range(THREADS)]

        def worker(index: int) -> list[str]:
            mine: list[str] = []
            own = stores[index]
            while True:
                got = own.transact(lambda tx: tx.outbox.claim(owner=f"w{index}", kinds=["k"], limit=7,
                                                              lease_seconds=backend.long_lease))
                mine.extend(c.id for c in got)
                if not got and own.read(lambda tx: tx.outbox.count_by_status()).get(CommandStatus.PENDING, 0) == 0:
                    return mine

        claimed = run_threads(worker)
        every = Counter(cid for ids in claimed for cid in ids)
        assert len(every) == total and set(every.values()) == {1}
        if store.backend == "postgres":
            # PostgreSQL's SKIP LOCKED lets claimers proceed side by side. (SQLite serializes writers and its
            # busy handler backs off, so there one worker may legitimately win every round.)
            assert sum(1 for ids in claimed if ids) >= 2, "the claims did not interleave at all"
        events = store.read(lambda tx: [tx.outbox.lease_events(f"c{i:03d}") for i in range(total)])
        assert all([(e.event, e.delivery) for e in ev] == [("claim", 1)] for ev in events)
        assert store.read(lambda tx: tx.outbox.count_by_status()) == {CommandStatus.PROCESSING: total}

    def test_concurrent_takeovers_of_expired_leases_never_double_claim(
            self, store: Store, backend: ContractHarness) -> None:
        total = 120

        def seed(tx: UnitOfWork) -> None:
            for i in range(total):
                tx.outbox.insert(command_id=f"c{i:03d}", kind="k", payload={})

        store.transact(seed)
        store.transact(lambda tx: tx.outbox.claim(owner="dead", kinds=["k"], limit=total,
                                                  lease_seconds=backend.short_lease))
        backend.expire()
        stores = [backend.open() for _ in range(THREADS)]

        def worker(index: int) -> list[tuple[str, int]]:
            mine: list[tuple[str, int]] = []
            while True:
                got = stores[index].transact(lambda tx: tx.outbox.claim(
                    owner=f"w{index}", kinds=["k"], limit=5, lease_seconds=backend.long_lease))
                if not got:
                    return mine
                mine.extend((c.id, c.delivery) for c in got)

        taken = [pair for pairs in run_threads(worker) for pair in pairs]
        assert sorted(taken) == [(f"c{i:03d}", 2) for i in range(total)]

    def test_concurrent_enqueues_for_one_run_get_distinct_attempt_numbers(
            self, store: Store, backend: ContractHarness) -> None:
        store.transact(lambda tx: tx.rehearsal.insert_run(run_id="run1", package_name="p", package_version="1",
                                                          previous_version=None, content_digest=sha256_bytes(b"p"),
                                                          manifest={}, files=[]))
        stores = [backend.open() for _ in range(THREADS)]
        per_thread = 8

        def enqueue(index: int) -> list[int]:
            seqs = []
            for n in range(per_thread):
                attempt_id = f"a{index}-{n}"

                def fn(tx: UnitOfWork, attempt_id: str = attempt_id) -> int:
                    seq = tx.rehearsal.next_attempt_seq("run1")
                    tx.outbox.insert(command_id=f"cmd-{attempt_id}", kind="rehearsal", payload={})
                    tx.rehearsal.insert_attempt(attempt_id=attempt_id, run_id="run1", seq=seq,
                                                command_id=f"cmd-{attempt_id}",
                                                receipts=[(f"{attempt_id}-r1", 1, "install")])
                    return seq

                seqs.append(stores[index].transact(fn))
            return seqs

        seqs = sorted(s for chunk in run_threads(enqueue) for s in chunk)
        assert seqs == list(range(1, THREADS * per_thread + 1))
