"""The refusals inside one settlement unit (host-spec C4, C10; ``fencepost.host.finalization``), driven directly on
a real store: a parent no longer running, a checkpoint outside the invocation's scope, a verdict under a lease
that is not the invocation's own. Each rolls the whole unit back."""

from __future__ import annotations

from typing import Any

import pytest

from fencepost.core.statuses import InvocationStatus
from fencepost.host.enrichment import budget_evidence
from fencepost.host.finalization import Settlement, SettlementRefused, Verdict, settlement
from fencepost.host.handler import kind_of
from fencepost.host.telemetry import NullTelemetry
from fencepost.store.base import Store
from fencepost.store.host_records import (
    AdapterScope,
    AdapterWrite,
    CreateAdapterRow,
    InvocationVerdict,
    LeaseHeld,
    NewAdapterRow,
    VerdictHeld,
)
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host

FAILED = Verdict(InvocationStatus.FAILED, "no")


def claimed(store: Store, backend: StoreBackend, *, running: bool = True, key: str = "k") -> tuple[Any, Any]:
    """A dispatched invocation and the lease of its claimed command (moved to running when ``running``)."""
    host = make_host(store, charge_action(Spy()), Scripted(Ledger()))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=key)
    [command] = store.transact(lambda tx: tx.outbox.claim(owner="t", kinds=[kind_of("shop.charge", 1)], limit=1,
                                                          lease_seconds=60))
    if running:
        store.fenced(command.lease, lambda tx: tx.host.update_leased_invocation(queued.id, tx.lease, InvocationVerdict(
            InvocationStatus.RUNNING, expected=frozenset({InvocationStatus.PENDING}))), name="t", lease_seconds=60)
    record = store.read(lambda tx: tx.host.get_invocation(queued.id))
    return record, command.lease


def settle(store: Store, lease: Any, plan: Settlement) -> None:
    store.fenced(lease, settlement(plan), name="host.settle", lease_seconds=60)


def test_a_parent_no_longer_running_refuses_the_unit(store: Store, backend: StoreBackend) -> None:
    record, lease = claimed(store, backend, running=False)
    with pytest.raises(SettlementRefused, match="no longer running"):
        settle(store, lease, Settlement(record, FAILED))
    assert store.read(lambda tx: tx.host.get_invocation(record.id)).status is InvocationStatus.PENDING


def test_a_checkpoint_outside_the_scope_refuses_the_unit(store: Store, backend: StoreBackend) -> None:
    record, lease = claimed(store, backend)
    row = NewAdapterRow(id="ai-x", step_index=0, step_name="charge", adapter_type="pay", operation="op",
                        vendor="v", input={})
    wrong = AdapterWrite(AdapterScope("other-tenant", record.space_id, record.id), CreateAdapterRow(row),
                         LeaseHeld(lease))
    with pytest.raises(SettlementRefused, match="ai-x"):
        settle(store, lease, Settlement(record, FAILED, writes=(wrong,)))
    assert store.read(lambda tx: tx.host.get_invocation(record.id)).status is InvocationStatus.RUNNING


def test_a_verdict_under_another_commands_lease_refuses_the_unit(store: Store, backend: StoreBackend) -> None:
    record, _ = claimed(store, backend)
    _, other_lease = claimed(store, backend, key="other")
    with pytest.raises(SettlementRefused, match="no longer running"):
        settle(store, other_lease, Settlement(record, FAILED))
    stored = store.read(lambda tx: tx.host.get_invocation(record.id))
    assert stored.status is InvocationStatus.RUNNING and stored.error is None
    assert store.read(lambda tx: tx.host.list_adapter_invocations(record.id)) == []


def test_budget_evidence_for_an_unknown_invocation_does_nothing(store: Store) -> None:
    budget_evidence(store, "no-such-invocation", VerdictHeld(InvocationStatus.RECONCILIATION_REQUIRED, "x"),
                    NullTelemetry())
    assert store.read(lambda tx: tx.host.list_invocations()) == []
