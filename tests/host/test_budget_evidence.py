"""Evidence after the budget verdict (host-spec H5-H7, H17, H18; ADR 0031): the verdict first, under the exhausted
claim's lease, then the rows' evidence and the parent enrichment, each under the settled-verdict condition."""

from __future__ import annotations

from typing import Any

import pytest

from fencepost.core.errors import RecoverableFinalization
from fencepost.core.statuses import AdapterStatus, CommandStatus, InvocationStatus, ReconciliationKind
from fencepost.host.enrichment import budget_evidence
from fencepost.host.telemetry import EVIDENCE_REFUSED
from fencepost.store.audit import audit_store
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.host_records import VerdictHeld
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, events_of, make_host, run_worker
from host.test_degraded_settlement import Recorder


def crash_after_charge(call: Any) -> Any:
    raise Crash()  # the provider charged; the worker dies before anything is recorded


def exhausted(store: Store, backend: StoreBackend, ledger: Ledger, worker_store: Store | None = None) -> Any:
    """An invocation whose first worker died after the charge (row ``running``) and whose next claim exceeds a
    recovery budget of 1; returns the host and the invocation id."""
    host = make_host(store, charge_action(Spy()), Scripted(ledger, crash_after_charge), recovery=1)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)  # the worker abandons what it cannot handle: the lease stays until it expires
    assert host.get(queued.id).steps[0].status is AdapterStatus.RUNNING
    backend.expire()
    run_worker(host, backend, worker_store)
    return host, queued.id


def test_budget_settles_running_rows_unknown_and_enriches(store: Store, backend: StoreBackend,
                                                          ledger: Ledger) -> None:
    """H6, H7: the running row becomes ambiguous with its event and record; the error starts with the budget text
    and names the step; ``adapter_reconciliation`` lists it; audit is clean; the provider was called once."""
    host, invocation_id = exhausted(store, backend, ledger)
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert (view.error or "").startswith("recovery attempts exhausted (2/1); step charge: running step")
    assert view.reconciliation is not None and view.reconciliation["kind"] == "recovery_budget_exhausted"
    [entry] = view.reconciliation["adapter_reconciliation"]
    assert entry["step"] == "charge" and entry["adapter_invocation_id"] == view.steps[0].adapter_invocation_id
    assert view.steps[0].status is AdapterStatus.AMBIGUOUS
    assert "AdapterInvocationAmbiguous" in [e.type for e in events_of(store, invocation_id)]
    [record] = store.read(lambda tx: tx.host.list_reconciliations(invocation_id))
    assert record.kind is ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS
    assert [f for f in audit_store(store) if f.subject == invocation_id] == []
    assert len(ledger.requests) == 1


def test_budget_verdict_before_evidence_reads(backend: StoreBackend, ledger: Ledger) -> None:
    """H5: every adapter-row read of the exhausted claim fails: the verdict is still durable, the lease released;
    the unread evidence is a gap audit reports."""
    inner = backend.migrated()
    faulty = FaultInjectingStore(inner, plan={"list_adapter_invocations": set(range(1, 50))})
    host, invocation_id = exhausted(inner, backend, ledger, worker_store=faulty)
    assert faulty.fired >= 1
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED and view.error == "recovery attempts exhausted (2/1)"
    assert view.lease_owner is None
    command = inner.read(lambda tx: tx.outbox.get(invocation_id))
    assert command is not None and command.status is CommandStatus.FAILED
    assert any("still running" in f.detail for f in audit_store(inner) if f.subject == invocation_id)


def test_parent_enrichment_is_conditional(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """H17, H18: once the parent no longer holds the plain budget verdict (here: it was enriched already), a
    second enrichment under the plain verdict is refused, says so in telemetry, and changes nothing."""
    host, invocation_id = exhausted(store, backend, ledger)
    before = host.get(invocation_id)
    sink = Recorder()
    budget_evidence(store, invocation_id, VerdictHeld(InvocationStatus.RECONCILIATION_REQUIRED,
                                                      "recovery attempts exhausted (2/1)"), sink)
    assert "parent_enrichment" in [a["evidence"] for a in sink.named(EVIDENCE_REFUSED)]
    after = host.get(invocation_id)
    assert (after.error, after.reconciliation) == (before.error, before.reconciliation)


def test_parent_enrichment_error_is_recoverable_with_a_durable_verdict(backend: StoreBackend,
                                                                       ledger: Ledger) -> None:
    """M2 (a thrown parent-enrichment error) and H18: the other evidence lands, then RecoverableFinalization with
    ``verdict_durable``; the budget verdict stays exactly as written."""
    inner = backend.migrated()
    faulty = FaultInjectingStore(inner, plan={"update_settled_invocation": {1}})
    host, invocation_id = exhausted(inner, backend, ledger, worker_store=faulty)
    assert faulty.fired == 1
    view = host.get(invocation_id)
    assert view.error == "recovery attempts exhausted (2/1)"  # enrichment lost, verdict kept
    assert view.steps[0].status is AdapterStatus.AMBIGUOUS  # the row's evidence still landed
    with pytest.raises(RecoverableFinalization) as raised:
        faulty.arm(nth=1, plan={"update_settled_invocation": {1}})
        budget_evidence(faulty, invocation_id, VerdictHeld(InvocationStatus.RECONCILIATION_REQUIRED,
                                                           "recovery attempts exhausted (2/1)"), Recorder())
    assert raised.value.verdict_durable and host.get(invocation_id).status is not InvocationStatus.FAILED


def test_budget_names_applied_steps_and_the_unknown_one(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """H6, H7 with an applied step before the unknown one: both are named; the applied one is listed."""
    host = make_host(store, charge_action(Spy(), steps=("charge", "ship")),
                     Scripted(ledger, None, crash_after_charge), recovery=1)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    backend.expire()
    run_worker(host, backend)
    view = host.get(queued.id)
    assert "step ship: running step" in (view.error or "") and "applied: charge" in (view.error or "")
    assert view.reconciliation is not None and [a["step"] for a in view.reconciliation["applied"]] == ["charge"]
    assert [s.status for s in view.steps] == [AdapterStatus.SUCCEEDED, AdapterStatus.AMBIGUOUS]


def test_budget_without_rows_keeps_the_exact_message(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """H4: with no adapter row there is nothing to enrich: the error is exactly the budget text."""
    host = make_host(store, charge_action(Spy(raises=Crash())), Scripted(ledger), recovery=1)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    backend.expire()
    run_worker(host, backend)
    assert host.get(queued.id).error == "recovery attempts exhausted (2/1)"


def test_enriched_error_is_bounded() -> None:
    """The enriched error keeps the budget text first and stays within 2,000 characters."""
    from datetime import UTC, datetime

    from fencepost.core.statuses import InvocationMode
    from fencepost.host.enrichment import enriched
    from fencepost.store.host_records import AdapterRecord, InvocationRecord

    now = datetime.now(UTC)
    invocation = InvocationRecord(
        id="inv", tenant_id="t", space_id="s", action_id="a", action_version=1, idempotency_key="k", actor="u",
        authority="", binding_digest="v1:x", params_digest="v1:y", params={}, mode=InvocationMode.DISPATCH,
        status=InvocationStatus.RECONCILIATION_REQUIRED, error="recovery attempts exhausted (6/5)", result=None,
        reconciliation={"kind": "recovery_budget_exhausted"}, pending_completion=None, created_at=now,
        updated_at=now, attempt_count=6, lease_owner=None, lease_until=None, command_status=None)
    rows = [AdapterRecord(id=f"ai{i}", tenant_id="t", space_id="s", invocation_id="inv", step_index=i,
                          step_name=f"step-{i}-" + "x" * 80, adapter_type="pay", operation="op", vendor="v",
                          input={}, output=None, status=AdapterStatus.AMBIGUOUS, error="lost " * 20, attempts=1,
                          external_reference=None, reconciliation=None, created_at=now, updated_at=now)
            for i in range(40)]
    result = enriched(VerdictHeld(invocation.status, invocation.error), invocation, rows)
    assert result is not None
    error, reconciliation = result
    assert error.startswith("recovery attempts exhausted (6/5); step step-0-") and len(error) == 2000
    assert len(reconciliation["adapter_reconciliation"]) == 40 and reconciliation["kind"] == "recovery_budget_exhausted"
