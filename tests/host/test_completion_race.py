"""A provider's callback racing the deadline sweep (host-spec N8, N14, N19; ADR 0035), on every backend: 200
iterations, each a parked, overdue invocation whose completion and sweep are released together.

The 200 invocations park first (inline runs, one handoff each), then the deadline passes once for all of them
(SQLite: the store's manual clock; PostgreSQL: one sleep past the one-second deadline). For each one, two threads
on two stores (two connections, as two processes would have) meet at a ``threading.Barrier``: one sends the
``completed`` callback through ``Host.complete``, the other runs ``sweep_one`` on the candidate the sweep listed
before the race (stale by the time it writes; the row lock and its re-check are all that keeps it honest).

Whichever commits first, exactly one outcome may follow: the callback settles the invocation ``succeeded``
(directly, or as a late callback after the sweep, since it had parked, N19), its completion is recorded once
(``external_completion``, one ``ExternalOperationCompleted``), the sweep left at most one ``completion_overdue``
record and only when it reported settling, and no settled invocation carries ``overdue_at`` without ``parked_at``
(checked directly and by the audit's ``audit_invocation_handoffs``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from datetime import timedelta
from typing import Any

import pytest

from fencepost.core.statuses import CompletionDisposition, InvocationStatus, ReconciliationKind
from fencepost.host import Accepted, Action, AdapterCall, AdapterStep, Host, HostConfig, Inline, RetryPolicy
from fencepost.host.completion import COMPLETED_EVENT, CompletionReceipt
from fencepost.host.lifecycle import VERDICT_EVENTS, adapter_invocation_id
from fencepost.host.sweep import sweep_one
from fencepost.store.audit import audit_store
from fencepost.store.base import Store
from fencepost.store.host_records import InvocationRecord
from helpers.store_backends import StoreBackend
from host.kit import Params, Spy

ITERATIONS = 200
VENDOR = "race-pay"
DEADLINE = timedelta(seconds=1)  # the least an action may declare
#: How long one thread waits for the other at the barrier, and for the race to end (seconds).
JOIN_SECONDS = 30.0


class AcceptEverything:
    """A payout provider that accepts every payout for a later callback: ``Accepted(po-<step id>)``."""

    type, vendor = "pay", VENDOR

    def execute(self, call: AdapterCall) -> object:
        return Accepted(f"po-{call.adapter_invocation_id}", {"status": "pending"})


def _host(store: Store) -> Host:
    action = Action(id="shop.payout", version=1, params=Params, handler=Spy(), completion_deadline=DEADLINE,
                    steps=(AdapterStep(name="payout", adapter="pay", operation="payout",
                                       retry=RetryPolicy(max_attempts=1, initial=timedelta(0))),))
    return Host(store, actions=[action], adapters=[AcceptEverything()], config=HostConfig(lease_seconds=30.0))


def _park_all(host: Host) -> list[InvocationRecord]:
    """``ITERATIONS`` invocations, each run inline to its parking; their records."""
    for n in range(ITERATIONS):
        view = host.submit("shop.payout", {"order_id": f"o-{n}", "amount_cents": 100 + n}, actor="u1",
                           idempotency_key=f"race-{n}", mode=Inline())
        assert view.status is InvocationStatus.RUNNING, view
    parked = host.store.read(lambda tx: tx.host.list_invocations(limit=ITERATIONS))
    assert len(parked) == ITERATIONS and all(p.parked_at is not None and p.handoff_reference for p in parked)
    return parked


def _race(host: Host, sweeper: Store, candidate: InvocationRecord) -> tuple[CompletionReceipt, bool]:
    """The callback and the sweep of ``candidate``, released together; (the callback's receipt, swept)."""
    barrier = threading.Barrier(2, timeout=JOIN_SECONDS)
    answers: dict[str, Any] = {}
    raised: list[BaseException] = []
    reference = candidate.handoff_reference
    assert reference is not None

    def callback() -> None:
        try:
            barrier.wait()
            answers["receipt"] = host.complete(VENDOR, reference, "completed", result={"payout_id": reference})
        except BaseException as error:  # reported below: a callback must never raise here
            raised.append(error)

    def sweep() -> None:
        try:
            barrier.wait()
            answers["swept"] = sweeper.transact(lambda tx: sweep_one(tx, candidate), name="host.sweep")
        except BaseException as error:
            raised.append(error)

    threads = [threading.Thread(target=callback), threading.Thread(target=sweep)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), f"{candidate.id}: the race did not end"
    assert not raised, f"{candidate.id}: {raised!r}"
    return answers["receipt"], answers["swept"]


@pytest.mark.default_backends("sqlite-wal", "postgres")  # DELETE journal: the same writer lock as WAL
def test_callback_and_sweep_race(backend: StoreBackend) -> None:
    """N8: 200 iterations of a callback racing the sweep: exactly one outcome each time, and never a settled
    invocation that carries ``overdue_at`` without ``parked_at``."""
    started = time.monotonic()
    store = backend.migrated()
    sweeper = backend.open()
    host = _host(store)
    parked = _park_all(host)
    backend.advance(DEADLINE.total_seconds() + 0.5)  # one deadline for all of them
    candidates = {c.id: c for c in store.read(lambda tx: tx.host.list_overdue_handoffs(limit=ITERATIONS))}
    assert set(candidates) == {p.id for p in parked}, "every parked handoff is an overdue candidate"
    swept: dict[str, bool] = {}
    receipts: dict[str, CompletionReceipt] = {}
    for invocation_id, candidate in candidates.items():
        receipts[invocation_id], swept[invocation_id] = _race(host, sweeper, candidate)

    final = {i.id: i for i in store.read(lambda tx: tx.host.list_invocations(limit=ITERATIONS))}
    events = store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
    by_subject: dict[str, Counter[str]] = defaultdict(Counter)
    for event in events:
        by_subject[event.subject.subject_id][event.type] += 1
    records = Counter(r.invocation_id for r in store.read(
        lambda tx: [r for i in candidates for r in tx.host.list_reconciliations(i)])
        if r.kind is ReconciliationKind.COMPLETION_OVERDUE)
    assert audit_store(store) == []  # audit_invocation_handoffs among its checks
    for invocation_id, receipt in receipts.items():
        where = f"{invocation_id} (swept first: {swept[invocation_id]})"
        invocation = final[invocation_id]
        # one outcome: the callback settled it, whether before the sweep or late after it (it had parked, N19)
        assert receipt.disposition is CompletionDisposition.SETTLED, (where, receipt)
        assert invocation.status is InvocationStatus.SUCCEEDED, (where, invocation.status, invocation.error)
        assert invocation.result["payout_id"] == invocation.handoff_reference, where
        assert invocation.external_completion is not None, where
        assert invocation.external_completion["disposition"] == "settled", (where, invocation.external_completion)
        # the completion event is about the handoff's step row, the verdict events about the invocation
        counts = by_subject[invocation_id] + by_subject[adapter_invocation_id(invocation_id, 0, "payout")]
        assert counts[COMPLETED_EVENT] == 1, (where, counts)
        assert counts[VERDICT_EVENTS[InvocationStatus.SUCCEEDED]] == 1, (where, counts)
        # the sweep settled at most once, and only when it said so: its record, its event and overdue_at together
        sweeps = int(swept[invocation_id])
        assert records[invocation_id] == sweeps, (where, records[invocation_id])
        assert counts[VERDICT_EVENTS[InvocationStatus.RECONCILIATION_REQUIRED]] == sweeps, (where, counts)
        assert (invocation.overdue_at is not None) == swept[invocation_id], (where, invocation.overdue_at)
        assert invocation.parked_at is not None, f"{where}: settled with overdue_at but without parked_at"
    print(f"\n{backend.name}: {ITERATIONS} races, the sweep first in {sum(swept.values())}, "
          f"{time.monotonic() - started:.1f} s")
