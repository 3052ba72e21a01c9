"""Dispatched execution by a real worker (host-spec C, E, F, A9-A11, J), on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from fencepost.core.errors import RecoverableFinalization
from fencepost.core.statuses import AdapterStatus, InvocationStatus, ReconciliationKind
from fencepost.host import (
    Ambiguous,
    DecisionRequired,
    Inline,
    PermanentFailure,
    Succeeded,
    TimedOut,
    TransientFailure,
)
from fencepost.host.adapter import AdapterCall
from fencepost.host.handler import kind_of
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, events_of, make_host, run_worker


def submit_and_run(store: Store, backend: StoreBackend, action: Any, adapter: Any, key: str = "k") -> Any:
    host = make_host(store, action, adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=key)
    assert run_worker(host, backend) == 1
    return host.get(queued.id)


def test_success_records_the_row_events_and_result(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger)
    done = submit_and_run(store, backend, charge_action(Spy()), adapter)
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 1
    assert done.result == {"reserved": "o-1", "steps": {"charge": {"charge_id": "ch_1"}}}
    row = store.read(lambda tx: tx.host.list_adapter_invocations(done.id))[0]
    assert (row.status, row.adapter_type, row.vendor, row.operation, row.attempts, row.output) == (
        AdapterStatus.SUCCEEDED, "pay", "simpay-test", "create_charge", 1, {"charge_id": "ch_1"})  # E13
    assert row.input == PARAMS and adapter.calls[0].adapter_invocation_id == row.id  # E2
    assert [e.type for e in events_of(store, done.id)] == [
        "ActionInvocationStarted", "AdapterInvocationSucceeded", "ActionInvocationSucceeded"]
    command = store.read(lambda tx: tx.outbox.get(done.id))
    assert command is not None and str(command.status) == "DELIVERED"


def test_row_exists_before_call(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    seen: list[Any] = []

    def look(call: AdapterCall) -> None:
        seen.append(store.read(lambda tx: tx.host.get_adapter_invocation(call.adapter_invocation_id)))

    submit_and_run(store, backend, charge_action(Spy()), Scripted(ledger, before=look))
    assert seen[0] is not None and seen[0].status is AdapterStatus.RUNNING and seen[0].attempts == 1  # E5


def test_permanent_failure_fails(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger, PermanentFailure("card declined"), charges=False)
    done = submit_and_run(store, backend, charge_action(Spy(), retry=3), adapter)
    assert done.status is InvocationStatus.FAILED and "card declined" in (done.error or "")
    assert len(adapter.calls) == 1 and done.steps[0].status is AdapterStatus.FAILED
    assert [e.type for e in events_of(store, done.id)].count("AdapterInvocationFailed") == 1


def test_retry_helper_scope(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger, TransientFailure("busy"), ConnectionRefusedError("refused"))
    done = submit_and_run(store, backend, charge_action(Spy(), retry=3), adapter)
    assert done.status is InvocationStatus.SUCCEEDED and len(adapter.calls) == 3
    assert len({c.adapter_invocation_id for c in adapter.calls}) == 1 and done.steps[0].attempts == 3  # E2
    assert [c.attempt for c in adapter.calls] == [1, 2, 3]


def test_ambiguous_is_never_retried(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger, Ambiguous("reset after the request left"))
    done = submit_and_run(store, backend, charge_action(Spy(), retry=3), adapter)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and len(adapter.calls) == 1
    assert done.reconciliation is not None
    assert done.reconciliation["kind"] == ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS
    row = store.read(lambda tx: tx.host.list_adapter_invocations(done.id))[0]
    assert row.status is AdapterStatus.AMBIGUOUS and row.reconciliation is not None
    assert row.reconciliation["reason"] == "reset after the request left"
    assert row.reconciliation["event_subject"] == {"subject_type": "AdapterInvocation", "subject_id": row.id}
    assert "AdapterInvocationAmbiguous" in [e.type for e in events_of(store, done.id)]


def test_exhausted_transient_fails(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger, TransientFailure("busy"), TransientFailure("busy"), charges=False)
    done = submit_and_run(store, backend, charge_action(Spy(), retry=2), adapter)
    assert done.status is InvocationStatus.FAILED and len(adapter.calls) == 2 and "exhausted" in (done.error or "")


@pytest.mark.parametrize("reply", [TimedOut("no answer"), TimeoutError("read"), RuntimeError("Gateway Timeout"),
                                   {"outcome": "success", "success": 1}, None, "ok"],
                         ids=["timed-out", "timeout-error", "timeout-message", "non-bool-success", "none", "str"])
def test_unknown_outcomes_reconcile_without_a_second_call(store: Store, backend: StoreBackend, ledger: Ledger,
                                                          reply: Any) -> None:
    adapter = Scripted(ledger, (lambda call: reply) if not isinstance(reply, BaseException) else reply)
    done = submit_and_run(store, backend, charge_action(Spy(), retry=3), adapter)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and len(adapter.calls) == 1  # F2-F11, F17
    assert done.reconciliation is not None and done.reconciliation["kind"] == "adapter_outcome_ambiguous"


def test_handler_error_fails(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger)
    done = submit_and_run(store, backend, charge_action(Spy(raises=ValueError("no stock"))), adapter)
    assert done.status is InvocationStatus.FAILED and done.error == "handler: ValueError: no stock"
    assert adapter.calls == [] and "ActionInvocationFailed" in [e.type for e in events_of(store, done.id)]


def test_decision_signal_stops_adapters(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger)
    spy = Spy(raises=DecisionRequired("address needs review"))
    host = make_host(store, charge_action(spy), adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    backend.expire()
    assert run_worker(host, backend) == 0  # no automatic retry
    done = host.get(queued.id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and adapter.calls == [] and spy.calls == 1
    assert done.reconciliation == {"kind": "handler_decision_required"}


def test_declared_events_commit_with_the_verdict(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    done = submit_and_run(store, backend, charge_action(Spy(emit=("OrderCharged",))), Scripted(ledger))
    types = [e.type for e in events_of(store, done.id)]
    assert types[-2:] == ["OrderCharged", "ActionInvocationSucceeded"]


def test_later_definite_failure_after_success_fails_naming_the_applied_step(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger, None, PermanentFailure("out of stock"))
    done = submit_and_run(store, backend, charge_action(Spy(), steps=("charge", "ship")), adapter)
    assert done.status is InvocationStatus.FAILED  # X1
    assert "applied before it: charge" in (done.error or "") and done.reconciliation is not None
    assert done.reconciliation["applied"][0]["step"] == "charge"


def test_stale_worker_cannot_borrow_new_token(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """Worker A's lease is taken over while its provider call is in flight: every later write of A is refused
    (C3, C4, C8); B's state stays as B left it; the next claim settles the unknown outcome without a call."""
    taken: list[Any] = []

    def take_over(call: AdapterCall) -> None:
        if not taken:
            backend.expire()
            kinds = [kind_of("shop.charge", 1)]
            taken.extend(store.transact(lambda tx: tx.outbox.claim(owner="B", kinds=kinds, limit=1,
                                                                    lease_seconds=backend.short_lease)))

    adapter = Scripted(ledger, before=take_over)
    host = make_host(store, charge_action(Spy()), adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert len(taken) == 1
    stuck = host.get(queued.id)
    assert stuck.status is InvocationStatus.RUNNING and stuck.attempt_count == 2  # no verdict from A
    assert stuck.steps[0].status is AdapterStatus.RUNNING and len(ledger.charges) == 1
    backend.expire()
    run_worker(host, backend)
    settled = host.get(queued.id)
    assert settled.status is InvocationStatus.RECONCILIATION_REQUIRED  # G7: running step, outcome unknown
    assert "running step without handoff: outcome unknown" in (settled.error or "")
    assert len(adapter.calls) == 1 and settled.steps[0].status is AdapterStatus.AMBIGUOUS


def test_finalization_is_one_transaction_and_recovers_without_recall(backend: StoreBackend, ledger: Ledger) -> None:
    """The fence of the finalization fails: no verdict, no verdict event, no step repaired twice (J1); the next
    claim of the idempotent action repairs and finalizes without calling the provider again (J4)."""
    inner = backend.migrated()
    faulty = FaultInjectingStore(inner, nth=1, query="finish_command")  # the fence of host.finalize
    adapter = Scripted(ledger)
    host = make_host(faulty, charge_action(Spy(), idempotent=True), adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert faulty.fired == 1
    after_fault = host.get(queued.id)
    assert after_fault.status is InvocationStatus.RUNNING and after_fault.steps[0].status is AdapterStatus.SUCCEEDED
    assert "ActionInvocationSucceeded" not in [e.type for e in events_of(inner, queued.id)]
    backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.SUCCEEDED and len(adapter.calls) == 1 and len(ledger.requests) == 1
    types = [e.type for e in events_of(inner, queued.id)]
    assert types.count("AdapterInvocationSucceeded") == 1 and types.count("ActionInvocationSucceeded") == 1


def test_execute_raises_recoverable_after_effect_and_the_caller_retries(backend: StoreBackend,
                                                                       ledger: Ledger) -> None:
    """Inline: the completion write fails after a succeeded row (A3): RecoverableFinalization, still running;
    the caller's own execute() converges under its lease without a second provider call or an attempt (A4, A6)."""
    inner = backend.migrated()
    faulty = FaultInjectingStore(inner, nth=1, query="update_leased_invocation")
    adapter = Scripted(ledger)
    host = make_host(faulty, charge_action(Spy(), idempotent=True), adapter)
    with pytest.raises(RecoverableFinalization):
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    stuck = host.list()[0]
    assert stuck.status is InvocationStatus.RUNNING
    done = host.execute(stuck.id)
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 0 and len(ledger.requests) == 1


def test_inline_caller_that_dies_is_taken_over_by_a_worker(store: Store, backend: StoreBackend,
                                                           ledger: Ledger) -> None:
    from host.kit import Crash

    adapter = Scripted(ledger, Crash())
    host = make_host(store, charge_action(Spy()), adapter, lease=backend.short_lease)
    with pytest.raises(Crash):
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    stuck = host.list()[0]
    assert stuck.status is InvocationStatus.RUNNING and stuck.attempt_count == 0
    assert run_worker(host, backend) == 0  # the caller's lease is still active (A5)
    backend.expire()
    run_worker(host, backend)
    taken = host.get(stuck.id)
    assert taken.attempt_count == 1  # A8
    assert taken.status is InvocationStatus.RECONCILIATION_REQUIRED and len(adapter.calls) == 1


def test_succeeded_reply_output_is_stored(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    adapter = Scripted(ledger, lambda call: Succeeded({"charge_id": "ch_x", "last4": "4242"}))
    done = submit_and_run(store, backend, charge_action(Spy()), adapter)
    assert done.steps[0].output == {"charge_id": "ch_x", "last4": "4242"}


class WrappingStore(FaultInjectingStore):
    """A store whose units rethrow any error as its own ``StoreUnavailable`` (host-spec A9's wrapper)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.disarm()

    def transact(self, fn: Any, *, write: bool = True, name: str | None = None) -> Any:
        try:
            return super().transact(fn, write=write, name=name)
        except Exception as error:
            from fencepost.core.errors import StoreUnavailable
            raise StoreUnavailable("the transaction failed") from error


def test_wrapped_handler_error_is_handler_failure(backend: StoreBackend, ledger: Ledger) -> None:
    store = WrappingStore(backend.migrated())
    adapter = Scripted(ledger)
    done = submit_and_run(store, backend, charge_action(Spy(raises=ValueError("bad order"))), adapter)
    assert done.status is InvocationStatus.FAILED and done.error == "handler: ValueError: bad order"  # A9
    assert adapter.calls == []


def test_a_charged_step_whose_output_cannot_be_stored_settles_at_once(store: Store, backend: StoreBackend,
                                                                     ledger: Ledger) -> None:
    """From the break-it trial: the provider charged, but the reply's output is not plain JSON. It is an
    unreadable reply (F10): reconciliation_required at once, never a traceback and a row left running."""
    adapter = Scripted(ledger, lambda call: Succeeded({"charge_id": {"ch_1"}}))
    done = submit_and_run(store, backend, charge_action(Spy()), adapter)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and "not plain JSON" in (done.error or "")
    assert done.steps[0].status is AdapterStatus.AMBIGUOUS and len(ledger.charges) == 1


def test_odd_errors_from_adapters_and_handlers_are_classified(store: Store, backend: StoreBackend,
                                                             ledger: Ledger) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    failed = submit_and_run(store, backend, charge_action(Spy(raises=Unprintable())), Scripted(ledger))
    assert failed.status is InvocationStatus.FAILED and failed.error == "handler: Unprintable"
    refused = submit_and_run(store, backend, charge_action(Spy()), Scripted(ledger, GeneratorExit(), charges=False),
                             key="k-gen")
    assert refused.status is InvocationStatus.FAILED and "GeneratorExit" in (refused.error or "")
