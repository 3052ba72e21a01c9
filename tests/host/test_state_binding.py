"""The state binding of an action (host-spec A13, A17, A19; ADR 0077), on every backend: the guard fails closed
before the handler, a success records the entity's target state with exactly one ``StateTransitioned`` fact in
its finalization unit (or when its handoff parks), the handler may set the state itself and the host keeps it,
a verdict that is not a success records nothing, the guard is checked again when the entity moved while the
steps ran, and recovery gives the guard the state before this invocation changed it.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from fencepost.core.errors import InvalidInput, RecoverableFinalization
from fencepost.core.statuses import InvocationStatus, ReconciliationKind
from fencepost.host import (
    Accepted,
    Action,
    AdapterStep,
    Ambiguous,
    BoundEntity,
    Host,
    HostConfig,
    Inline,
    PermanentFailure,
    RetryPolicy,
    StateBinding,
)
from fencepost.host.action import HandlerContext
from fencepost.host.state import STATE_TRANSITIONED, state_event_id
from fencepost.store.audit import audit_store
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.host_records import EntityKey, EventRecord, Subject
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Params, Scripted, charge_action, make_host, run_worker


def order_id(params: Params) -> str:
    return params.order_id


def bound(action: Action, target: str = "charged", guard: Any = None, subject: str = "order") -> Action:
    return dataclasses.replace(action, state=StateBinding(subject, target, entity_id=order_id, guard=guard))


@dataclasses.dataclass
class Handler:
    """A handler that records what it was shown and may set the bound entity's state itself."""

    sets: str | None = None   # given to ctx.set_state ("target": the default, None: it does not set the state)
    emit: tuple[str, ...] = ()
    calls: int = 0
    seen: list[BoundEntity | None] = dataclasses.field(default_factory=list)

    def __call__(self, ctx: HandlerContext, params: Params) -> dict[str, Any]:
        self.calls += 1
        self.seen.append(ctx.bound_entity)
        for event_type in self.emit:
            ctx.emit(event_type, {"order": params.order_id})
        if self.sets is not None:
            ctx.set_state(None if self.sets == "target" else self.sets)
        return {"reserved": params.order_id}


def facts(store: Store, entity: str = "o-1", subject: str = "order") -> list[EventRecord]:
    """The ``StateTransitioned`` facts about one entity, in log order (its state history)."""
    return [e for e in store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default",
                                                                    subject=Subject(subject, entity)))
            if e.type == STATE_TRANSITIONED]


def recorded(store: Store, entity: str = "o-1") -> Any:
    return store.read(lambda tx: tx.host.get_entity_state(EntityKey("default", "default", "order", entity)))


def state_findings(store: Store) -> list[str]:
    return [f"{f.subject}: {f.detail}" for f in audit_store(store) if f.check == "entity_states"]


def test_state_transitioned_sets_target(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """A19: after finalization the recorded state is the target, and exactly one ``StateTransitioned`` fact (about
    the entity, under the invocation's stable id) says from what; the next bound action moves on from there."""
    ship = Action(id="shop.ship", version=1, params=Params, handler=Handler(),
                  state=StateBinding("order", "shipped", entity_id=order_id,
                                     guard=lambda before, params: before == "charged"))
    charge = bound(charge_action(Handler(emit=("OrderCharged",))), guard=lambda before, params: before is None)
    host = Host(store, actions=[charge, ship], adapters=[Scripted(ledger)])
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.SUCCEEDED and len(ledger.charges) == 1
    now = recorded(store)
    assert (now.state, now.previous_state, now.updated_by_invocation) == ("charged", None, view.id)
    [fact] = facts(store)
    assert fact.id == state_event_id(view.id)
    assert fact.payload == {"invocation_id": view.id, "action_id": "shop.charge", "subject": "order",
                            "entity_id": "o-1", "from": None, "to": "charged", "set_by": "host",
                            "at": "finalization"}
    assert view.state is not None and view.state["transition"]["set_by"] == "host"
    assert view.state["recorded"]["state"] == "charged" and view.state["target"] == "charged"
    shipped = host.submit("shop.ship", PARAMS, actor="u1", idempotency_key="ship", mode=Inline())
    assert shipped.status is InvocationStatus.SUCCEEDED
    assert [(f.payload["from"], f.payload["to"], f.payload["invocation_id"]) for f in facts(store)] == [
        (None, "charged", view.id), ("charged", "shipped", shipped.id)]
    assert (recorded(store).state, recorded(store).previous_state) == ("shipped", "charged")
    again = host.get(view.id).state  # the charge's view: its fact, and the entity's state now (moved on)
    assert again is not None and again["transition"]["to"] == "charged"
    assert again["recorded"]["state"] == "shipped" and again["recorded"]["updated_by_invocation"] == shipped.id
    assert state_findings(store) == []


@pytest.mark.parametrize("sets, set_by, after_handler", [("target", "handler", "charged"),
                                                           ("charging", "host", "charging")])
def test_the_handler_may_set_the_state_itself_and_the_host_keeps_it(
        store: Store, backend: StoreBackend, ledger: Ledger, sets: str, set_by: str, after_handler: str) -> None:
    """A19, "if the handler already set the bound entity to the binding's target, Host keeps it": the handler's
    write commits with its unit, before the adapter runs; at finalization the host keeps a target the handler set
    (its row untouched) or sets the target over another state; either way one fact, from the state before."""
    handler = Handler(sets=sets)
    during: list[Any] = []
    adapter = Scripted(ledger, before=lambda call: during.append(recorded(store)))
    host = make_host(store, bound(charge_action(handler)), adapter)
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.SUCCEEDED
    assert handler.seen == [BoundEntity("order", "o-1", "charged", None, None)]
    [at_call] = during  # committed by the handler's unit before the provider was called
    assert (at_call.state, at_call.updated_by_invocation) == (after_handler, view.id)
    final = recorded(store)
    assert (final.state, final.previous_state, final.updated_by_invocation) == ("charged", None, view.id)
    if set_by == "handler":
        assert final == at_call  # kept as the handler wrote it
    [fact] = facts(store)
    assert (fact.payload["from"], fact.payload["set_by"]) == (None, set_by)
    assert state_findings(store) == []


@pytest.mark.parametrize("guard", [pytest.param(lambda before, params: 1 / 0, id="raises"),
                                   pytest.param(lambda before, params: False, id="refuses"),
                                   pytest.param(lambda before, params: "yes", id="not-a-bool")])
def test_state_guard_exception_fails_closed(store: Store, backend: StoreBackend, ledger: Ledger,
                                            guard: Any) -> None:
    """A13: a guard that raises, refuses or answers anything but True fails the invocation closed: ``failed``,
    no handler call, no adapter call, no recorded state, no fact."""
    handler, adapter = Handler(sets="target"), Scripted(ledger)
    host = make_host(store, bound(charge_action(handler), guard=guard), adapter)
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.FAILED
    assert view.error is not None and view.error.startswith("the state guard refuses order o-1 from no recorded "
                                                            "state to charged")
    assert (handler.calls, adapter.calls, ledger.charges) == (0, [], {})
    assert view.reconciliation is not None and view.reconciliation["state_refused"]["to"] == "charged"
    assert recorded(store) is None and facts(store) == []
    assert view.state is not None and view.state["transition"] is None and view.state["recorded"] is None
    assert state_findings(store) == []


def test_recovery_gives_the_guard_the_state_before_this_invocation(store: Store, backend: StoreBackend,
                                                                   ledger: Ledger) -> None:
    """The handler set the target, then the process died before the provider answered. The recovered run's guard
    (a first transition only) is given the state before this invocation changed it, not the state its own
    handler wrote, so it passes again; the provider is asked again with the same key (one charge) and the one
    fact names the handler."""
    handler = Handler(sets="target")
    adapter = Scripted(ledger, Crash())
    action = bound(charge_action(handler, idempotent=True), guard=lambda before, params: before is None)
    host = make_host(store, action, adapter)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.RUNNING
    assert recorded(store).state == "charged" and facts(store) == []  # the handler's write, no fact yet
    backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert handler.seen[1] == BoundEntity("order", "o-1", "charged", None, "charged")
    assert len(ledger.charges) == 1
    [fact] = facts(store)
    assert (fact.payload["from"], fact.payload["set_by"]) == (None, "handler")
    assert state_findings(store) == []


def test_the_guard_is_checked_again_when_the_entity_moved_while_the_steps_ran(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """While the charge's provider call is in flight, another invocation cancels the order. At the charge's
    finalization its guard refuses ``cancelled -> charged``: the charge cannot fail closed any more (the provider
    charged), so it ends ``reconciliation_required`` naming the refusal and the effect; the cancellation stands
    and the charge records no fact."""
    first_only = {None, "reserved"}
    cancel = Action(id="shop.cancel", version=1, params=Params, handler=Handler(),
                    state=StateBinding("order", "cancelled", entity_id=order_id,
                                       guard=lambda before, params: before in first_only))
    cancelled: list[Any] = []

    def cancel_meanwhile(call: Any) -> None:
        cancelled.append(host.submit("shop.cancel", PARAMS, actor="u2", idempotency_key="cancel", mode=Inline()))

    charge = bound(charge_action(Handler()), guard=lambda before, params: before in first_only)
    host = Host(store, actions=[charge, cancel], adapters=[Scripted(ledger, before=cancel_meanwhile)],
                config=HostConfig())
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert cancelled[0].status is InvocationStatus.SUCCEEDED
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED, view.error
    assert view.reconciliation is not None and view.reconciliation["kind"] == ReconciliationKind.APPLIED_EFFECT
    refused = view.reconciliation["state_refused"]
    assert (refused["from"], refused["to"], refused["changed_by"], refused["at"]) == (
        "cancelled", "charged", cancelled[0].id, "finalization")
    assert view.error is not None and "the steps' effects stand" in view.error and len(ledger.charges) == 1
    now = recorded(store)
    assert (now.state, now.updated_by_invocation) == ("cancelled", cancelled[0].id)
    assert [f.payload["invocation_id"] for f in facts(store)] == [cancelled[0].id]
    assert state_findings(store) == []


def test_a_failed_or_reconciliation_verdict_records_no_fact(store: Store, backend: StoreBackend,
                                                            ledger: Ledger) -> None:
    """A verdict that is not a success moves nothing (ADR 0077): a decline leaves the handler's own write (the
    handler's writes committed separately, A17) and no fact; an unknown outcome none either, and an operator who
    resolves it ``succeeded`` adds none (a resolution moves the status only, ADR 0048)."""
    handler = Handler(sets="charging")
    host = make_host(store, bound(charge_action(handler)), Scripted(ledger, PermanentFailure("declined"),
                                                                    Ambiguous("reset after the request left")))
    declined = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k1", mode=Inline())
    assert declined.status is InvocationStatus.FAILED
    assert (recorded(store).state, recorded(store).updated_by_invocation) == ("charging", declined.id)
    unknown = host.submit("shop.charge", {**PARAMS, "order_id": "o-2"}, actor="u1", idempotency_key="k2",
                          mode=Inline())
    assert unknown.status is InvocationStatus.RECONCILIATION_REQUIRED
    host.resolve(unknown.id, "succeeded", operator="ops:1", note="charge found at the provider")
    assert facts(store) == [] and facts(store, "o-2") == []
    shown = host.get(unknown.id).state
    assert shown is not None and shown["transition"] is None and shown["recorded"]["state"] == "charging"
    assert state_findings(store) == []


def test_a_parked_handoff_records_the_fact_and_a_failed_completion_keeps_it(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """A17: the fact commits when the required steps "accept a parked external handoff". The provider later
    reports the operation failed: the invocation fails, and the recorded state and its one fact stay (nothing
    reverts a recorded fact; compensation is the application's, ADR 0077)."""
    payout = Action(id="shop.charge", version=1, params=Params, handler=Handler(), completion_deadline=timedelta(
        hours=1), steps=(AdapterStep(name="payout", adapter="pay", operation="payout",
                                     retry=RetryPolicy(max_attempts=1, initial=timedelta(0))),))
    host = make_host(store, bound(payout, target="paid-out"),
                     Scripted(ledger, lambda call: Accepted("po_1", {"status": "pending"})))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    assert run_worker(host, backend) == 1
    assert host.get(queued.id).parked
    [fact] = facts(store)
    assert (fact.payload["to"], fact.payload["at"], fact.payload["set_by"]) == ("paid-out", "parking", "host")
    assert recorded(store).state == "paid-out"
    assert host.complete("simpay-test", "po_1", "failed", error="payout bounced").status is InvocationStatus.FAILED
    assert recorded(store).state == "paid-out" and len(facts(store)) == 1
    assert state_findings(store) == []


def test_a_retried_finalization_keeps_exactly_one_fact(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """J4 with A17: the finalization unit fails at its verdict write. Nothing of it is left (no fact, no state
    change: they commit together); the caller's retry finalizes once, with exactly one fact under the stable id,
    and the provider is not called again."""
    faulty = FaultInjectingStore(store, plan={"update_leased_invocation": {1}})
    adapter = Scripted(ledger)
    host = make_host(faulty, bound(charge_action(Handler(emit=("OrderCharged",)), idempotent=True)), adapter)
    with pytest.raises(RecoverableFinalization) as raised:
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    invocation_id = raised.value.invocation_id
    assert invocation_id is not None
    assert recorded(store) is None and facts(store) == []
    assert store.read(lambda tx: tx.events.get_event(state_event_id(invocation_id))) is None
    done = host.execute(invocation_id)
    assert done.status is InvocationStatus.SUCCEEDED and len(adapter.calls) == 1
    [fact] = facts(store)
    assert (fact.id, fact.payload["set_by"], fact.payload["from"]) == (state_event_id(invocation_id), "host", None)
    assert recorded(store).state == "charged"
    assert state_findings(store) == []


def test_the_audit_finds_a_missing_fact_and_a_state_that_is_not_the_target(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """``fencepost audit`` learns the invariant: a succeeded bound invocation without its fact, and a fact whose
    invocation still last changed the entity but left another state, are findings."""
    host = make_host(store, bound(charge_action(Handler())), Scripted(ledger))
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.SUCCEEDED and state_findings(store) == []
    store.transact(lambda tx: backend.inspect(tx, "UPDATE entity_states SET state = 'refunded'"))
    assert state_findings(store) == [f"{view.id}: the StateTransitioned fact of order o-1 left it refunded, not its "
                                     "target charged"]
    store.transact(lambda tx: backend.inspect(tx, "UPDATE entity_states SET state = 'charged'"))
    store.transact(lambda tx: backend.inspect(tx, "UPDATE host_events SET type = 'Renamed' WHERE type = "
                                                  "'StateTransitioned'"))
    assert state_findings(store) == [f"{view.id}: succeeded invocation bound to order o-1 has 0 StateTransitioned "
                                     "fact(s), not 1"]


def test_a_binding_is_checked_when_the_action_is_defined_and_when_it_is_submitted(store: Store) -> None:
    """The binding's names are bounded (the subject never looks like a host subject type) and its entity id is
    computed once, at submission: a function that raises or names no entity refuses the submission."""
    for subject, target in (("Order", "charged"), ("order", ""), ("order", "has space"), ("", "x")):
        with pytest.raises(InvalidInput):
            StateBinding(subject, target, entity_id=order_id)
    with pytest.raises(InvalidInput):
        dataclasses.replace(charge_action(Handler()), state="order")  # type: ignore[arg-type]
    for entity_id in (lambda params: 1 / 0, lambda params: "", lambda params: 7):
        action = dataclasses.replace(charge_action(Handler()), state=StateBinding("order", "charged", entity_id))
        host = make_host(store, action, Scripted(Ledger()))
        with pytest.raises(InvalidInput):
            host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    assert store.read(lambda tx: tx.host.list_invocations()) == []


def test_a_guard_refusal_on_recovery_does_not_deny_a_step_left_in_flight(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """A14 with E5: an idempotent charge died mid-call (its step row ``running``), and meanwhile another invocation
    cancelled the order. On recovery the guard refuses (terminal, no handler, no provider call), but the step in
    flight may have charged: the verdict is ``reconciliation_required`` with that step settled as unknown, never
    ``failed``."""
    first_only = {None}
    cancel = Action(id="shop.cancel", version=1, params=Params, handler=Handler(),
                    state=StateBinding("order", "cancelled", entity_id=order_id))
    handler, adapter = Handler(), Scripted(ledger, Crash())
    charge = bound(charge_action(handler, idempotent=True), guard=lambda before, params: before in first_only)
    host = Host(store, actions=[charge, cancel], adapters=[adapter], config=HostConfig(lease_seconds=30))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).steps[0].status == "running"
    host.submit("shop.cancel", PARAMS, actor="u2", idempotency_key="cancel", mode=Inline())
    backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED, done.error
    assert done.reconciliation is not None and done.reconciliation["kind"] == "adapter_outcome_ambiguous"
    assert done.reconciliation["state_refused"]["from"] == "cancelled"
    assert done.steps[0].status == "ambiguous" and (handler.calls, len(adapter.calls)) == (1, 1)
    assert recorded(store).state == "cancelled" and [f.payload["to"] for f in facts(store)] == ["cancelled"]
    assert [f for f in audit_store(store) if f.subject == queued.id] == []


def test_a_guard_that_refuses_at_parking_leaves_the_handoff_to_an_operator(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """A17 at parking: the provider accepted the handoff, then another invocation cancelled the order before the
    invocation parked. The guard refuses ``cancelled -> paid-out`` in the park unit: nothing of the park or the
    fact is written; the accepted handoff is an applied effect an operator decides, and a later callback is kept
    as evidence."""
    cancel = Action(id="shop.cancel", version=1, params=Params, handler=Handler(),
                    state=StateBinding("order", "cancelled", entity_id=order_id))

    def accept_and_cancel(call: Any) -> Any:
        host.submit("shop.cancel", PARAMS, actor="u2", idempotency_key="cancel", mode=Inline())
        return Accepted("po_1", {"status": "pending"})

    payout = Action(id="shop.charge", version=1, params=Params, handler=Handler(), completion_deadline=timedelta(
        hours=1), steps=(AdapterStep(name="payout", adapter="pay", operation="payout",
                                     retry=RetryPolicy(max_attempts=1, initial=timedelta(0))),))
    host = Host(store, actions=[bound(payout, target="paid-out", guard=lambda before, params: before is None),
                                cancel], adapters=[Scripted(ledger, accept_and_cancel)])
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED and not view.parked, view.error
    assert view.reconciliation is not None and view.reconciliation["kind"] == "applied_effect"
    assert view.reconciliation["state_refused"]["at"] == "parking"
    assert recorded(store).state == "cancelled" and [f.payload["to"] for f in facts(store)] == ["cancelled"]
    receipt = host.complete("simpay-test", "po_1", "completed", result={"payout_id": "p"})
    assert receipt.status is InvocationStatus.RECONCILIATION_REQUIRED and recorded(store).state == "cancelled"
    assert [f for f in audit_store(store) if f.subject == view.id] == []
