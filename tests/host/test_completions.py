"""External completions (host-spec N; ADR 0035), on every backend: a handoff parks its invocation, a provider's
callback settles it by the decision table, and the deadline sweep settles what never came back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from fencepost.core.errors import RecoverableFinalization, StoreUnavailable
from fencepost.core.statuses import AdapterStatus, CommandStatus, CompletionDisposition, InvocationStatus
from fencepost.host import Accepted, Action, AdapterStep, Inline, PermanentFailure, RetryPolicy, Succeeded
from fencepost.host.completion import FIXED_FAILURE
from fencepost.host.sweep import sweep_one
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.worker import Worker, WorkerConfig
from fencepost.store.audit import audit_store
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Params, Scripted, Spy, events_of, make_host, run_worker

DEADLINE = timedelta(seconds=1)
VENDOR = "simpay-test"


class PayoutResult(BaseModel):
    reserved: str
    payout_id: str


def payout_action(*, steps: tuple[str, ...] = ("payout",), result: type[BaseModel] | None = None,
                  deadline: timedelta | None = DEADLINE) -> Action:
    return Action(id="shop.charge", version=1, params=Params, handler=Spy(), result=result,
                  completion_deadline=deadline,
                  steps=tuple(AdapterStep(name=s, adapter="pay", operation="payout",
                                          retry=RetryPolicy(max_attempts=1, initial=timedelta(0))) for s in steps))


def accepted(reference: str = "po_1") -> Any:
    return lambda call: Accepted(reference, {"status": "pending"})


def parked(store: Store, backend: StoreBackend, ledger: Ledger, *, reference: str = "po_1",
           result: type[BaseModel] | None = None) -> tuple[Any, str]:
    """A dispatched payout whose provider accepted it: the worker parks it. Returns (host, invocation id)."""
    host = make_host(store, payout_action(result=result), Scripted(ledger, accepted(reference)))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    assert run_worker(host, backend) == 1
    return host, queued.id


def record(store: Store, invocation_id: str) -> Any:
    return store.read(lambda tx: tx.host.get_invocation(invocation_id))


def findings(store: Store, invocation_id: str) -> list[str]:
    return [f.detail for f in audit_store(store) if f.subject == invocation_id]


def test_parking_sets_parked_at_and_releases_lease(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """N1, N2: the handoff and its marker are durable; the invocation stays running, parked, with no lease and its
    command finished: no worker claims it again; the audit finds it consistent."""
    host, invocation_id = parked(store, backend, ledger)
    stored = record(store, invocation_id)
    assert stored.status is InvocationStatus.RUNNING and stored.parked_at is not None and stored.lease_owner is None
    assert (stored.handoff_provider, stored.handoff_reference) == (VENDOR, "po_1")
    assert stored.completion_due_at is not None and stored.overdue_at is None
    assert stored.pending_completion["result"]["reserved"] == "o-1"
    assert store.read(lambda tx: tx.outbox.get(invocation_id)).status is CommandStatus.DELIVERED
    assert host.get(invocation_id).steps[0].status is AdapterStatus.SUCCEEDED
    assert "ExternalOperationAccepted" in [e.type for e in events_of(store, invocation_id)]
    backend.expire()
    assert run_worker(host, backend) == 0
    assert findings(store, invocation_id) == []


def test_handoff_and_marker_commit_together(backend: StoreBackend, ledger: Ledger) -> None:
    """N1, E6: a failure inside the handoff unit leaves neither the handoff nor the marker."""
    inner = backend.migrated()
    faulty = FaultInjectingStore(inner, plan={"update_adapter_invocation": {1}})
    host = make_host(faulty, payout_action(), Scripted(ledger, accepted()), lease=backend.short_lease)
    with pytest.raises(RecoverableFinalization):
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    [stored] = inner.read(lambda tx: tx.host.list_invocations())
    assert stored.handoff_reference is None and stored.status is InvocationStatus.RUNNING
    assert host.get(stored.id).steps[0].status is AdapterStatus.RUNNING


def test_a_completed_callback_settles_a_parked_invocation(store: Store, backend: StoreBackend,
                                                          ledger: Ledger) -> None:
    """Row 1 of the table: merged result, SUCCEEDED, ExternalOperationCompleted, the completion on record."""
    host, invocation_id = parked(store, backend, ledger, result=PayoutResult)
    receipt = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p-9"})
    assert receipt.disposition is CompletionDisposition.SETTLED and receipt.status is InvocationStatus.SUCCEEDED
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.SUCCEEDED and view.result["payout_id"] == "p-9"
    assert view.result["reserved"] == "o-1"
    stored = record(store, invocation_id)
    assert stored.external_completion["outcome"] == "completed" and stored.pending_completion is None
    types = [e.type for e in events_of(store, invocation_id)]
    assert "ExternalOperationCompleted" in types and "ActionInvocationSucceeded" in types
    assert findings(store, invocation_id) == []


@pytest.mark.parametrize(("error", "expected"), [("payout rejected by the bank", "payout rejected by the bank"),
                                                 (None, FIXED_FAILURE)])
def test_a_failed_callback_settles_failed(store: Store, backend: StoreBackend, ledger: Ledger, error: str | None,
                                          expected: str) -> None:
    host, invocation_id = parked(store, backend, ledger)
    receipt = host.complete(VENDOR, "po_1", "failed", error=error)
    assert receipt.disposition is CompletionDisposition.SETTLED
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.FAILED and view.error == expected
    assert "ExternalOperationFailed" in [e.type for e in events_of(store, invocation_id)]


def test_an_unknown_reference_is_not_found_and_records_nothing(store: Store, backend: StoreBackend,
                                                               ledger: Ledger) -> None:
    """N33: a callback that outruns its handoff (or names another provider) matches nothing: not_found, nothing
    recorded, so the provider retries; its retry after parking settles it."""
    host = make_host(store, payout_action(), Scripted(ledger, accepted()))
    early = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert early.disposition is CompletionDisposition.NOT_FOUND and early.invocation_id is None
    assert store.read(lambda tx: tx.host.list_invocations()) == []
    _, invocation_id = parked(store, backend, ledger)
    assert host.complete("another-vendor", "po_1", "completed").disposition is CompletionDisposition.NOT_FOUND
    assert host.complete(VENDOR, "po_", "completed").disposition is CompletionDisposition.NOT_FOUND
    assert record(store, invocation_id).external_completion is None
    assert host.complete(VENDOR, "po_1", "completed").disposition is CompletionDisposition.SETTLED


def test_unparked_running_is_still_executing(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """N4: the callback arrives while the invocation's later step is still running: refused, nothing written."""
    answers: list[Any] = []
    host_box: list[Any] = []
    adapter = Scripted(ledger, accepted(), lambda call: _complete_then_ok(host_box, answers))
    host = make_host(store, payout_action(steps=("payout", "notify")), adapter)
    host_box.append(host)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    [receipt] = answers
    assert receipt.disposition is CompletionDisposition.STILL_EXECUTING
    stored = record(store, queued.id)
    assert stored.external_completion is None and stored.parked_at is not None  # parked after step two
    assert host.complete(VENDOR, "po_1", "completed").disposition is CompletionDisposition.SETTLED


def _complete_then_ok(host_box: list[Any], answers: list[Any]) -> Any:
    """Step two's provider: the first step's callback arrives while this step runs; then it succeeds."""
    answers.append(host_box[0].complete(VENDOR, "po_1", "completed"))
    return Succeeded({"sent": True})


def test_an_identical_repeat_is_absorbed(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """N6: the same completion twice: absorbed, no row or event changes."""
    host, invocation_id = parked(store, backend, ledger)
    assert host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"}).disposition is \
        CompletionDisposition.SETTLED
    before = (record(store, invocation_id), events_of(store, invocation_id))
    again = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert again.disposition is CompletionDisposition.ABSORBED and again.status is InvocationStatus.SUCCEEDED
    assert (record(store, invocation_id), events_of(store, invocation_id)) == before


def test_a_contradiction_reconciles_and_keeps_the_first(store: Store, backend: StoreBackend,
                                                        ledger: Ledger) -> None:
    """N7: completed, then failed: reconciliation_required; the first completion stays on record; the second is in
    ExternalOperationContradicted and the completion log; the audit finds the invocation consistent."""
    host, invocation_id = parked(store, backend, ledger)
    host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    receipt = host.complete(VENDOR, "po_1", "failed", error="reversed")
    assert receipt.disposition is CompletionDisposition.CONTRADICTED
    stored = record(store, invocation_id)
    assert stored.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert stored.reconciliation["kind"] == "completion_contradicted"
    assert stored.external_completion["outcome"] == "completed"
    [contradicted] = [e for e in events_of(store, invocation_id) if e.type == "ExternalOperationContradicted"]
    assert contradicted.payload["second"]["outcome"] == "failed" and contradicted.payload["first"]["outcome"] == \
        "completed"
    logs = {str(r.log) for r in store.read(lambda tx: tx.host.list_reconciliations(invocation_id))}
    assert logs == {"completion", "governance"}
    assert findings(store, invocation_id) == []


def test_an_invalid_settling_result_is_evidence_and_reconciles(store: Store, backend: StoreBackend,
                                                               ledger: Ledger) -> None:
    """N9: the merged result fails the result schema: not SUCCEEDED; recorded, reconciliation_required."""
    host, invocation_id = parked(store, backend, ledger, result=PayoutResult)
    receipt = host.complete(VENDOR, "po_1", "completed", result={"unexpected": 1})
    assert receipt.disposition is CompletionDisposition.EVIDENCE_ONLY
    stored = record(store, invocation_id)
    assert stored.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert stored.reconciliation["kind"] == "completion_result_invalid"
    assert stored.external_completion["result"] == {"unexpected": 1}


def test_a_callback_after_another_verdict_is_evidence_only(store: Store, backend: StoreBackend,
                                                           ledger: Ledger) -> None:
    """N11: the handoff's invocation failed at a later step: the callback keeps that verdict and is recorded."""
    adapter = Scripted(ledger, accepted(), PermanentFailure("notify declined"))
    host = make_host(store, payout_action(steps=("payout", "notify")), adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.FAILED
    receipt = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert receipt.disposition is CompletionDisposition.EVIDENCE_ONLY and receipt.status is InvocationStatus.FAILED
    stored = record(store, queued.id)
    assert stored.status is InvocationStatus.FAILED and stored.external_completion["outcome"] == "completed"


def test_the_sweep_marks_overdue_and_a_late_callback_settles_a_parked_one(store: Store, backend: StoreBackend,
                                                                         ledger: Ledger) -> None:
    """N12, N15, N19: past the deadline the sweep settles reconciliation_required with overdue_at, keeps the
    handoff and writes its reconciliation record; a late callback then settles it, since it had parked."""
    host, invocation_id = parked(store, backend, ledger)
    assert host.reconcile_overdue_completions() == 0  # not due yet
    backend.advance(DEADLINE.total_seconds() + 0.5)
    assert host.reconcile_overdue_completions() == 1
    assert host.reconcile_overdue_completions() == 0  # once
    swept = record(store, invocation_id)
    assert swept.status is InvocationStatus.RECONCILIATION_REQUIRED and swept.overdue_at is not None
    assert swept.handoff_reference == "po_1" and swept.reconciliation["kind"] == "completion_overdue"
    assert "did not arrive by" in swept.error
    kinds = [str(r.kind) for r in store.read(lambda tx: tx.host.list_reconciliations(invocation_id))]
    assert kinds == ["completion_overdue"]
    late = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert late.disposition is CompletionDisposition.SETTLED and late.status is InvocationStatus.SUCCEEDED
    assert findings(store, invocation_id) == []


@pytest.mark.parametrize(("resolved", "reported"), [("failed", "completed"), ("succeeded", "failed")])
def test_a_completion_that_contradicts_an_operators_resolution_is_recorded_not_absorbed(
        store: Store, backend: StoreBackend, ledger: Ledger, resolved: str, reported: str) -> None:
    """ADR 0048 (found by the break-it trial): a swept payout an operator resolved, then the provider's late word
    disagreeing with it. The resolution stays final, but the contradiction is an event and a reconciliation
    record, and the receipt says so; a completion that agrees stays plain evidence."""
    host, invocation_id = parked(store, backend, ledger)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    assert host.reconcile_overdue_completions() == 1
    host.resolve(invocation_id, resolved, operator="ops:1", note="looked it up")
    late = host.complete(VENDOR, "po_1", reported, result={"payout_id": "p"} if reported == "completed" else None,
                         error="declined" if reported == "failed" else None)
    assert late.disposition is CompletionDisposition.CONTRADICTED and str(late.status) == resolved
    assert "ops:1 resolved it" in late.detail and not late.changed
    assert str(record(store, invocation_id).status) == resolved
    assert [e.type for e in events_of(store, invocation_id)].count("ExternalOperationContradicted") == 1
    kinds = [str(r.kind) for r in store.read(lambda tx: tx.host.list_reconciliations(invocation_id))]
    assert kinds.count("completion_contradicted") == 1
    assert findings(store, invocation_id) == []


def test_a_completion_that_agrees_with_the_resolution_is_evidence(store: Store, backend: StoreBackend,
                                                                  ledger: Ledger) -> None:
    host, invocation_id = parked(store, backend, ledger)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    assert host.reconcile_overdue_completions() == 1
    host.resolve(invocation_id, "succeeded", operator="ops:1", note="paid per the provider's dashboard")
    late = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert late.disposition is CompletionDisposition.EVIDENCE_ONLY
    assert "ExternalOperationContradicted" not in [e.type for e in events_of(store, invocation_id)]


def test_a_swept_unparked_handoff_is_evidence_only(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """N20: the executor died after the handoff, before parking; the sweep settles it (and finishes its command);
    a late callback is evidence only and clears the handoff."""
    adapter = Scripted(ledger, accepted(), Crash())
    host = make_host(store, payout_action(steps=("payout", "notify")), adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)  # the worker abandons the crash; the lease stays until it expires
    backend.advance(max(DEADLINE.total_seconds(), backend.short_lease) + 1.0)
    assert host.reconcile_overdue_completions() == 1
    swept = record(store, queued.id)
    assert swept.status is InvocationStatus.RECONCILIATION_REQUIRED and swept.parked_at is None
    assert store.read(lambda tx: tx.outbox.get(queued.id)).status is CommandStatus.DELIVERED
    assert run_worker(host, backend) == 0
    receipt = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert receipt.disposition is CompletionDisposition.EVIDENCE_ONLY
    stored = record(store, queued.id)
    assert stored.status is InvocationStatus.RECONCILIATION_REQUIRED and stored.pending_completion is None
    assert stored.external_completion["outcome"] == "completed"


def test_the_sweep_rechecks_its_candidate_under_the_lock(store: Store, backend: StoreBackend,
                                                         ledger: Ledger) -> None:
    """N14: a candidate settled by a callback between the listing and the write is skipped."""
    host, invocation_id = parked(store, backend, ledger)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    [candidate] = store.read(lambda tx: tx.host.list_overdue_handoffs())
    host.complete(VENDOR, "po_1", "completed")
    assert store.transact(lambda tx: sweep_one(tx, candidate), name="host.sweep") is False
    assert record(store, invocation_id).overdue_at is None


def test_workers_sweep_before_they_claim(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """N13: a worker serving the host runs the deadline sweep in its cycle."""
    host, invocation_id = parked(store, backend, ledger)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    registry = HandlerRegistry()
    host.register(registry)
    worker = Worker(store, registry, WorkerConfig(poll_interval=0.01, lease_seconds=backend.short_lease,
                                                  grace_seconds=0), sweeps=host.sweeps())
    try:
        worker.run_once()
    finally:
        worker.heartbeat.stop()
    assert record(store, invocation_id).overdue_at is not None


def test_an_action_without_a_deadline_does_not_park(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """A15: no completion_deadline, no parking: the handoff settles reconciliation_required at once."""
    host = make_host(store, payout_action(deadline=None), Scripted(ledger, accepted()))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    view = host.get(queued.id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED and "completion_deadline" in (view.error or "")


def test_a_second_handoff_is_refused(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """L5: two steps both hand off: reconciliation_required with both references."""
    adapter = Scripted(ledger, accepted("po_1"), accepted("po_2"))
    host = make_host(store, payout_action(steps=("payout", "refund")), adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    view = host.get(queued.id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert view.reconciliation["handoffs"] == ["po_1", "po_2"]


def test_docs_have_the_overdue_runbook_and_say_nothing_is_cancelled() -> None:
    """N27, N32: the operations guide has the overdue-handoffs runbook (look up by adapter_invocation_id and
    external reference, then resolve); the host guide says nothing cancels the provider's operation."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    operations = (docs / "operations.md").read_text(encoding="utf-8")
    runbook = " ".join(operations.split("## Overdue handoffs", 1)[1].split("\n## ", 1)[0].split())
    for needed in ("adapter_invocation_id", "external reference", "fencepost host complete", "fencepost host sweep"):
        assert needed in runbook, needed
    assert "Nothing here cancels the provider's operation" in " ".join((docs / "host.md").read_text().split())
    assert "None of this cancels the provider's operation" in runbook


def test_a_parked_invocation_settles_past_its_deadline_before_the_sweep(store: Store, backend: StoreBackend,
                                                                       ledger: Ledger) -> None:
    """N5: the deadline passed but no sweep ran yet: the callback still settles it."""
    host, invocation_id = parked(store, backend, ledger)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    receipt = host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert receipt.disposition is CompletionDisposition.SETTLED and receipt.status is InvocationStatus.SUCCEEDED
    assert record(store, invocation_id).overdue_at is None
    assert host.reconcile_overdue_completions() == 0


def test_the_sweep_verdict_and_its_record_commit_together(backend: StoreBackend, ledger: Ledger) -> None:
    """N15, N31: the sweep's verdict write fails: no reconciliation record is left; the next sweep writes exactly
    one."""
    inner = backend.migrated()
    _, invocation_id = parked(inner, backend, ledger)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    faulty = FaultInjectingStore(inner, plan={"insert_reconciliation": {1}})
    swept_host = make_host(faulty, payout_action(), Scripted(ledger))
    with pytest.raises(StoreUnavailable):
        swept_host.reconcile_overdue_completions()
    stored = record(inner, invocation_id)
    assert stored.status is InvocationStatus.RUNNING and stored.overdue_at is None
    assert inner.read(lambda tx: tx.host.list_reconciliations(invocation_id)) == []
    assert swept_host.reconcile_overdue_completions() == 1
    assert len(inner.read(lambda tx: tx.host.list_reconciliations(invocation_id))) == 1


@pytest.mark.parametrize(("reference", "why"), [("R" * 501, "is 501 characters"), ("po\x00x", "contains NUL"),
                                               ("po\ud800", "is not valid Unicode text")])
def test_an_unstorable_handoff_reference_is_kept_in_the_unknown_outcome(store: Store, backend: StoreBackend,
                                                                        ledger: Ledger, reference: str,
                                                                        why: str) -> None:
    """N30: the provider accepted an operation under a reference fencepost cannot store and match: the step is an
    unknown outcome whose reason keeps the reference (escaped), so an operator can look it up."""
    host = make_host(store, payout_action(), Scripted(ledger, accepted(reference)))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    view = host.get(queued.id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED and view.steps[0].status is AdapterStatus.AMBIGUOUS
    assert why in (view.error or "") and ascii(reference[:20])[1:-1] in (view.error or "")
    assert findings(store, queued.id) == []


@pytest.mark.parametrize(("field", "bad"), [("external_reference", "a\x00b"), ("external_reference", "a\udc80b"),
                                           ("error", "a\x00b"), ("error", "a\udc80b"), ("result", "a\udc80b")],
                         ids=["reference-nul", "reference-surrogate", "error-nul", "error-surrogate",
                              "result-surrogate"])  # NUL inside JSON is stored escaped on both backends
def test_a_completion_with_unstorable_text_is_invalid_input(store: Store, backend: StoreBackend, ledger: Ledger,
                                                            field: str, bad: str) -> None:
    """A completion both backends could not store the same way is refused as bad input, on every backend."""
    from fencepost.core.errors import InvalidInput

    host, invocation_id = parked(store, backend, ledger)
    arguments: dict[str, Any] = {"external_reference": "po_1", "error": None, "result": None}
    arguments[field] = {"note": bad} if field == "result" else bad
    with pytest.raises(InvalidInput):
        host.complete(VENDOR, arguments["external_reference"], "failed", result=arguments["result"],
                      error=arguments["error"])
    assert record(store, invocation_id).external_completion is None


def test_a_late_settlement_keeps_the_sweep_verdict_as_history(store: Store, backend: StoreBackend,
                                                              ledger: Ledger) -> None:
    """A swept, parked handoff settled late is succeeded with no live reconciliation kind; the sweep's is kept as
    ``previous``."""
    host, invocation_id = parked(store, backend, ledger)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    host.reconcile_overdue_completions()
    host.complete(VENDOR, "po_1", "completed")
    stored = record(store, invocation_id)
    assert stored.status is InvocationStatus.SUCCEEDED and "kind" not in stored.reconciliation
    assert stored.reconciliation["previous"]["kind"] == "completion_overdue"
