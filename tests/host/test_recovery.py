"""Recovery of interrupted invocations (host-spec G) and the recovery budget (H), with real workers on every
backend. An interruption is a ``Crash`` (a ``BaseException`` nothing catches): the process "dies" mid-way, its
lease expires, and a new worker's claim is the takeover."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from pydantic import Field

from fencepost.core.statuses import AdapterStatus, InvocationStatus
from fencepost.host import Ambiguous, Host, PermanentFailure, RetryPolicy, TransientFailure
from fencepost.host.action import StepInputContext
from fencepost.host.handler import kind_of
from fencepost.store.base import Store
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Params, Scripted, Spy, charge_action, events_of, make_host, run_worker

STATES = ("none", "running", "failed", "succeeded")


def interrupted(store: Store, backend: StoreBackend, ledger: Ledger, state: str, *,
                idempotent: bool) -> tuple[Host, Scripted, Spy, str]:
    """A two-step invocation whose first execution died leaving step rows in ``state`` (see ``STATES``)."""
    spy = Spy(raises=Crash() if state == "none" else None)
    adapter = Scripted(ledger, Crash() if state in ("running", "failed") else None)
    action = charge_action(spy, steps=("charge", "ship"), idempotent=idempotent)
    if state == "succeeded":  # step 2's input dies before its row: step 1 is the one recorded effect
        def ship_input(ctx: StepInputContext, params: Any) -> dict[str, Any]:
            if ctx.step_name == "ship" and spy.calls == 1:
                raise Crash()
            return {"amount_cents": 1}
        action = dataclasses.replace(action, steps=(action.steps[0], dataclasses.replace(action.steps[1],
                                                                                          input=ship_input)))
    host = make_host(store, action, adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    if state == "failed":  # a definite failure whose verdict was lost (G14): the row says failed
        row = store.read(lambda tx: tx.host.list_adapter_invocations(queued.id))[0]
        store.transact(lambda tx: backend.inspect(
            tx, f"UPDATE adapter_invocations SET status = 'failed', error = 'declined' WHERE id = '{row.id}'"))
    spy.raises = None
    assert host.get(queued.id).status is InvocationStatus.RUNNING
    backend.expire()
    return host, adapter, spy, queued.id


@pytest.mark.parametrize("state, expected", [
    ("none", InvocationStatus.FAILED), ("failed", InvocationStatus.FAILED),
    ("running", InvocationStatus.RECONCILIATION_REQUIRED), ("succeeded", InvocationStatus.RECONCILIATION_REQUIRED)])
def test_non_idempotent_reclaim_matrix(store: Store, backend: StoreBackend, ledger: Ledger, state: str,
                                       expected: InvocationStatus) -> None:
    host, adapter, spy, invocation_id = interrupted(store, backend, ledger, state, idempotent=False)
    calls, handled = len(adapter.calls), spy.calls
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert done.status is expected and done.attempt_count == 2  # G5-G8
    assert (len(adapter.calls), spy.calls) == (calls, handled)  # no provider call, no handler on the reclaim
    if state == "running":
        assert "running step without handoff: outcome unknown" in (done.error or "")
        assert done.steps[0].status is AdapterStatus.AMBIGUOUS
        assert "AdapterInvocationAmbiguous" in [e.type for e in events_of(store, invocation_id)]
    if state == "succeeded":
        assert done.reconciliation is not None and done.reconciliation["kind"] == "applied_effect"
        assert [s.name for s in done.steps] == ["charge"]  # G8: step 2 never ran


@pytest.mark.parametrize("state", STATES)
def test_idempotent_recovery_matrix(store: Store, backend: StoreBackend, ledger: Ledger, state: str) -> None:
    host, adapter, spy, invocation_id = interrupted(store, backend, ledger, state, idempotent=True)
    step_one_calls = sum(1 for c in adapter.calls if c.adapter_invocation_id == adapter_id(host, invocation_id))
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 2
    assert spy.calls == 2  # G9: the handler runs again
    assert len(ledger.charges) == 2  # one charge per step, whatever was re-sent (G14 with the same key)
    keys = [c.adapter_invocation_id for c in adapter.calls]
    assert len(set(keys)) == 2  # E2: each step kept its one key across the takeover
    if state == "succeeded":  # E7, G13: a succeeded step is never called again
        assert sum(1 for k in keys if k == adapter_id(host, invocation_id)) == step_one_calls == 1
        types = [e.type for e in events_of(store, invocation_id)]
        assert types.count("AdapterInvocationSucceeded") == 2  # step 1 once (first write wins), step 2 once


def adapter_id(host: Host, invocation_id: str) -> str:
    return host.get(invocation_id).steps[0].adapter_invocation_id


@pytest.mark.parametrize("idempotent", [False, True])
def test_ambiguous_row_settles_before_anything(store: Store, backend: StoreBackend, ledger: Ledger,
                                               idempotent: bool) -> None:
    host, adapter, spy, invocation_id = interrupted(store, backend, ledger, "running", idempotent=idempotent)
    row = host.get(invocation_id).steps[0]
    store.transact(lambda tx: backend.inspect(tx, "UPDATE adapter_invocations SET status = 'ambiguous', "
                                                  "reconciliation = '{\"reason\":\"stored reason\"}' "
                                                  f"WHERE id = '{row.adapter_invocation_id}'"))
    calls, handled = len(adapter.calls), spy.calls
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED  # G1
    assert done.error == "step charge: stored reason"  # G2: the stored metadata is the reason
    assert (len(adapter.calls), spy.calls) == (calls, handled)


def test_sixth_claim_settles(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """An idempotent action that dies on every claim: five claims run it, the sixth settles (H4, H12)."""
    spy = Spy(raises=Crash())
    adapter = Scripted(ledger)
    host = make_host(store, charge_action(spy, idempotent=True), adapter, recovery=5)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    for claim in range(1, 7):
        assert run_worker(host, backend) == 1
        if claim < 6:
            assert host.get(queued.id).status is InvocationStatus.RUNNING
            backend.expire()
    done = host.get(queued.id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and done.attempt_count == 6
    assert done.error == "recovery attempts exhausted (6/5)" and spy.calls == 5 and adapter.calls == []
    assert done.reconciliation == {"kind": "recovery_budget_exhausted", "attempts": 6, "max": 5}


def test_budget_check_precedes_resolution(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """At the exhausted claim the action is not even resolved (H3, H5): an unregistered action still gets the
    budget verdict, and no row is read or written."""
    spy = Spy(raises=Crash())
    host = make_host(store, charge_action(spy, idempotent=True), Scripted(ledger), recovery=1)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    backend.expire()
    bare = Host(store, actions=[], adapters=[], config=host.config)
    run_worker(bare, backend, serve=("shop.charge", 1))
    done = host.get(queued.id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and done.error == "recovery attempts exhausted (2/1)"


def test_unknown_action_on_recovery_fails_only_without_recorded_effects(store: Store, backend: StoreBackend,
                                                                        ledger: Ledger) -> None:
    host, _, _, invocation_id = interrupted(store, backend, ledger, "none", idempotent=True)
    bare = Host(store, actions=[], adapters=[], config=host.config)
    run_worker(bare, backend, serve=("shop.charge", 1))
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.FAILED and done.error == "unknown action shop.charge version 1"  # A18


def test_unknown_outcome_settles_in_one_unit_with_its_event(store: Store, backend: StoreBackend,
                                                             ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger, Ambiguous("5xx after send")))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    types = [e.type for e in events_of(store, queued.id)]
    assert types[-2:] == ["AdapterInvocationAmbiguous", "ActionInvocationReconciliationRequired"]  # K1 order


def test_killed_claims_consume_budget(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """Workers that die right after their claim still spent it (C2); the claim after the budget settles (H4)."""
    adapter = Scripted(ledger)
    host = make_host(store, charge_action(Spy(), idempotent=True), adapter, recovery=2)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    for _ in range(2):  # a claim, then nothing: the worker died before reaching anything
        claimed = store.transact(lambda tx: tx.outbox.claim(owner="dies", kinds=[kind_of("shop.charge", 1)], limit=1,
                                                             lease_seconds=backend.short_lease))
        assert len(claimed) == 1
        backend.expire()
    assert host.get(queued.id).attempt_count == 2 and adapter.calls == []
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.error == "recovery attempts exhausted (3/2)" and adapter.calls == []


class StricterParams(Params):
    """What a redeployed action accepts: an amount the stored params do not satisfy (they fail validation)."""

    amount_cents: int = Field(gt=100_000)


def failing_before_any_call(host: Host, store: Store, adapter: Scripted, spy: Spy, fails: str) -> Host:
    """The host whose next execution fails before any call: its handler raises (``fails == "handler"``), or the
    redeployed action's params no longer validate (``"params"``)."""
    if fails == "handler":
        spy.raises = ValueError("inventory service down")
        return host
    action = dataclasses.replace(charge_action(spy, steps=("charge", "ship"), idempotent=True), params=StricterParams)
    return make_host(store, action, adapter)


@pytest.mark.parametrize("fails", ["handler", "params"])
def test_a_failure_before_any_call_of_a_recovery_does_not_deny_a_step_left_in_flight(
        store: Store, backend: StoreBackend, ledger: Ledger, fails: str) -> None:
    """E5, G5, X1: an idempotent charge died mid-call (its first step ``running``). Its recovery fails before it
    sends anything (the handler raises, or the redeployed action's params no longer validate). The step in flight
    may have charged, so the verdict is ``reconciliation_required`` with that step settled as unknown, never
    ``failed``: "failed" promises the provider did nothing (found by the break-it trial of ADR 0077)."""
    host, adapter, spy, invocation_id = interrupted(store, backend, ledger, "running", idempotent=True)
    calls = len(adapter.calls)
    host = failing_before_any_call(host, store, adapter, spy, fails)
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED, done.error
    assert done.reconciliation is not None and done.reconciliation["kind"] == "adapter_outcome_ambiguous"
    assert done.reconciliation["unknown_steps"] == ["charge"]
    assert ("inventory service down" if fails == "handler" else "invalid params") in (done.error or "")
    assert done.steps[0].status is AdapterStatus.AMBIGUOUS and len(adapter.calls) == calls  # nothing sent again
    assert "AdapterInvocationAmbiguous" in [e.type for e in events_of(store, invocation_id)]


def test_a_reclaimed_running_step_whose_deadline_ends_its_retries_is_ambiguous(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """ADR 0076 on the deadline's path: an idempotent charge died mid-call (``running``); its recovery's re-send
    answers a transient failure and the step's deadline passes before the retry. The retry did nothing, but the
    first call may still apply, so the step is unknown, never "failed" (found by the break-it trial)."""
    host, adapter, spy, invocation_id = interrupted(store, backend, ledger, "running", idempotent=True)
    adapter.script.append(TransientFailure("provider busy"))
    action = charge_action(spy, steps=("charge", "ship"), idempotent=True)
    slow = dataclasses.replace(action.steps[0], timeout=timedelta(seconds=0.2),
                               retry=RetryPolicy(max_attempts=3, initial=timedelta(seconds=1)))
    host = make_host(store, dataclasses.replace(action, steps=(slow, action.steps[1])), adapter)
    calls = len(adapter.calls)
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert len(adapter.calls) == calls + 1  # the re-send, then the deadline: no second retry
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED, done.error
    assert done.steps[0].status is AdapterStatus.AMBIGUOUS
    assert "deadline" in (done.steps[0].error or "") and "may have reached the provider" in (done.steps[0].error or "")


@pytest.mark.parametrize("fails", ["handler", "params"])
def test_a_failure_before_any_call_without_a_step_in_flight_is_failed(
        store: Store, backend: StoreBackend, ledger: Ledger, fails: str) -> None:
    """The control: the same failures when the earlier attempt left no step recorded (it died before its first
    row) are definite failures: nothing was sent."""
    host, adapter, spy, invocation_id = interrupted(store, backend, ledger, "none", idempotent=True)
    host = failing_before_any_call(host, store, adapter, spy, fails)
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.FAILED and done.steps == () and adapter.calls == []


@pytest.mark.parametrize("sent", [False, True])
def test_a_re_send_that_reached_nothing_does_not_deny_the_earlier_call(
        store: Store, backend: StoreBackend, ledger: Ledger, sent: bool) -> None:
    """ADR 0113: an idempotent charge died mid-call (``running``); its recovery's re-send could not reach the
    provider at all (``PermanentFailure(sent=False)``: a workflow target file missing on the recovering machine).
    That says nothing of the first call, which may have applied: the step is unknown, never "failed, nothing was
    applied" (a break-it trial: the task was committed on the target). The control: a provider that answered with a
    decline (``sent`` left True) settles the step ``failed`` as before."""
    host, adapter, _spy, invocation_id = interrupted(store, backend, ledger, "running", idempotent=True)
    adapter.script.append(PermanentFailure("target t: database file does not exist", sent=sent))
    calls = len(adapter.calls)
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert len(adapter.calls) == calls + 1  # the re-send, not retried
    if sent:
        assert done.status is InvocationStatus.FAILED and done.steps[0].status is AdapterStatus.FAILED, done.error
        return
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED, done.error
    assert done.steps[0].status is AdapterStatus.AMBIGUOUS
    assert "may have reached the provider" in (done.steps[0].error or "")
