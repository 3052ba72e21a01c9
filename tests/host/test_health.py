"""The host's health counts (host-spec W2, §1.Y-15; ADR 0051) on every backend: each count is built from the
real state it names (a real worker's reconciliation and budget verdicts, an inline caller that died, a parked
handoff past its deadline, a relay's dead letter), and each is shown to stay zero for its look-alikes."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from fencepost.core.statuses import InvocationStatus
from fencepost.host import Ambiguous, Inline
from fencepost.host.health import read_host_health
from fencepost.host.sweep import sweep_overdue
from fencepost.host.telemetry import NullTelemetry
from fencepost.store.base import Store
from fencepost.store.host_records import HostHealthCounts, NewEvent, Subject
from fencepost.store.ports import UnitOfWork
from fencepost.testing import host as contract
from helpers.store_backends import StoreBackend, store_backend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, make_host, run_worker

ZERO = HostHealthCounts(open_reconciliations=0, overdue_handoffs=0, stuck_runs=0, budget_exhaustions=0,
                        dead_letters=0, probe_dead_letters=0)
PROBE_SPACE = "event-append-probe-0d6c4a1e"


def counts(store: Store, *, stuck_after: timedelta = timedelta(minutes=5),
           window: timedelta = timedelta(hours=1)) -> HostHealthCounts:
    result: HostHealthCounts = store.read(lambda tx: tx.host.host_health(stuck_after=stuck_after, window=window))
    return result


def test_an_empty_store_is_healthy_and_current(store: Store) -> None:
    health = read_host_health(store)
    assert health.counts == ZERO and health.schema_current and not health.attention
    body = health.as_json()
    assert body["schema_version"] == store.expected_version and body["stuck_after_seconds"] == 300.0
    assert body["open_reconciliations"] == 0 and body["attention"] is False
    with pytest.raises(ValueError):
        counts(store, window=timedelta(0))
    with pytest.raises(ValueError):
        read_host_health(store, stuck_after=timedelta(seconds=-1))


def test_an_unknown_outcome_is_an_open_reconciliation(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger, Ambiguous("reset after the request left")))
    for key in ("unknown", "fine"):
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=key)
        assert run_worker(host, backend) == 1
    statuses = sorted(str(v.status) for v in host.list())
    assert statuses == ["reconciliation_required", "succeeded"]
    assert counts(store) == replace(ZERO, open_reconciliations=1)
    health = read_host_health(store)
    assert health.attention and health.as_json()["open_reconciliations"] == 1


def test_an_overdue_handoff_counts_until_the_sweep_settles_it(store: Store) -> None:
    due = contract.running(store, "inv-due", 600)
    assert contract.hand_off(store, "inv-due", due, contract.handoff("po-due", due_at=contract.store_now(store)))
    assert counts(store, stuck_after=timedelta(0)) == ZERO  # still leased by its execution: not the sweep's yet
    assert contract.park(store, "inv-due", due)
    later = contract.running(store, "inv-later", 600)  # parked, deadline an hour away
    assert contract.hand_off(store, "inv-later", later, contract.handoff(
        "po-later", due_at=contract.store_now(store) + timedelta(hours=1)))
    assert contract.park(store, "inv-later", later)
    # Parked handoffs are never stuck, however long they wait (stuck_after 0: anything unleased would count).
    assert counts(store, stuck_after=timedelta(0)) == replace(ZERO, overdue_handoffs=1)
    assert sweep_overdue(store, NullTelemetry()) == 1
    assert counts(store) == replace(ZERO, open_reconciliations=1)  # swept: now an operator's reconciliation


def test_an_inline_run_whose_caller_died_is_stuck(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger, Crash()), lease=backend.short_lease)
    with pytest.raises(Crash):  # the caller's process "dies" in the provider call, its lease still held
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="dies", mode=Inline())
    contract.dispatched(store, "inv-pending")  # pending, never claimed: a queue, not a stuck run
    assert counts(store, stuck_after=timedelta(0)) == ZERO  # the lease is still live
    backend.expire()
    assert counts(store, stuck_after=timedelta(0)) == replace(ZERO, stuck_runs=1)
    assert counts(store, stuck_after=timedelta(hours=1)) == ZERO  # unleased, but not for that long yet
    assert [v.status for v in host.list(status=InvocationStatus.RUNNING)] == [InvocationStatus.RUNNING]


def test_a_stuck_run_is_counted_after_the_default_threshold(tmp_path: Path) -> None:
    with store_backend("sqlite-wal", tmp_path) as backend:  # its ManualClock moves five minutes at once
        _stuck_after_five_minutes(backend)


def _stuck_after_five_minutes(backend: StoreBackend) -> None:
    store = backend.migrated()
    contract.running(store, "inv-stuck", backend.short_lease)
    backend.advance(299)
    assert read_host_health(store).counts == ZERO
    backend.advance(backend.short_lease + 2)
    assert read_host_health(store).counts == replace(ZERO, stuck_runs=1)


def test_a_budget_exhaustion_counts_for_the_window(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy(raises=Crash()), idempotent=True), Scripted(ledger), recovery=1,
                     lease=backend.short_lease)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)  # the one claim of the budget dies in the handler
    backend.expire()
    run_worker(host, backend)  # the claim after the budget settles it (H4)
    assert host.get(queued.id).error == "recovery attempts exhausted (2/1)"
    assert counts(store) == replace(ZERO, open_reconciliations=1, budget_exhaustions=1)
    backend.advance(0.01)
    assert counts(store, window=timedelta(microseconds=1)) == replace(ZERO, open_reconciliations=1)


def _event(space: str, name: str) -> NewEvent:
    return NewEvent(id=f"ev-{name}", tenant_id="acme", space_id=space, subject=Subject("Order", name),
                    type="OrderShipped", payload={"order": name})


def test_dead_letters_count_outside_probe_spaces_only(store: Store) -> None:
    def relay_dead_letters(tx: UnitOfWork) -> None:
        for name in ("lost", "kept"):
            tx.events.append_event_with_outbox(_event("shop", name))
        tx.events.append_event_with_outbox(_event(PROBE_SPACE, "probe"))

    store.transact(relay_dead_letters)
    claimed = store.transact(lambda tx: tx.events.claim_event_outbox(owner="relay-1", limit=10, lease_seconds=30))
    assert sorted(c.event.id for c in claimed) == ["ev-kept", "ev-lost"]  # the relay never claims a probe space
    by_id = {c.event.id: c for c in claimed}
    assert store.transact(lambda tx: tx.events.dead_letter_event(by_id["ev-lost"].lease, error="sink refused"))
    assert store.transact(lambda tx: tx.events.mark_event_published(by_id["ev-kept"].lease))
    assert counts(store) == replace(ZERO, dead_letters=1)

    def probe_cleanup(tx: UnitOfWork) -> None:  # as the conformance checks' cleanup dead-letters a probe row
        rows = tx.event_leases.claim(owner="event-append-probe-worker-1", tenant_id="acme", space_id=PROBE_SPACE,
                                     limit=10, lease_seconds=30, now=tx.now())
        assert len(rows) == 1
        assert tx.event_leases.dead_letter(rows[0].event_id, owner="event-append-probe-worker-1",
                                           token=rows[0].lease_token, reason="probe", now=tx.now())

    store.transact(probe_cleanup)
    health = read_host_health(store)
    assert health.counts == replace(ZERO, dead_letters=1, probe_dead_letters=1)
    store.transact(lambda tx: tx.events.requeue_event("ev-lost"))
    health = read_host_health(store)
    assert health.counts == replace(ZERO, probe_dead_letters=1) and not health.attention  # probes are expected


def test_a_schema_behind_has_no_counts(backend: StoreBackend) -> None:
    bare = backend.open()
    health = read_host_health(bare)
    assert health.schema_version == 0 and not health.schema_current and health.counts is None
    assert health.as_json()["open_reconciliations"] is None and not health.attention
