"""Governance before the handler: policies, the deferral rule, policy evidence and obligations (host-spec D1-D10,
P1, P2; ADR 0043), with real workers and the store's controlled lease clock on every backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import GovernanceRecordKind, InvocationStatus
from fencepost.host import (
    Allow,
    Deny,
    ErrorTextContext,
    Host,
    HostConfig,
    Inline,
    Obligations,
    PolicyContext,
    PolicyDenied,
    Redaction,
    RequireApproval,
    TransientGovernanceError,
)
from fencepost.host.governance import policy_record_id
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, events_of, run_worker


class Rules:
    """A policy answering from ``script`` (one item per evaluation: a decision, or an exception to raise);
    after the script, ``Allow``. ``seen`` keeps each context it was given."""

    def __init__(self, name: str, *script: Any) -> None:
        self.name = name
        self.script = list(script)
        self.seen: list[PolicyContext] = []

    def evaluate(self, ctx: PolicyContext) -> Any:
        self.seen.append(ctx)
        item = self.script.pop(0) if self.script else Allow()
        if isinstance(item, BaseException):
            raise item
        return item


def busy() -> TransientGovernanceError:
    return TransientGovernanceError("rules service rate-limited")


def governed_host(store: Store, ledger: Ledger, *policies: Any, idempotent: bool = True, retryable: int = 5,
                  recovery: int | None = None, redaction: Redaction | None = None,
                  **action_fields: Any) -> tuple[Host, Spy, Scripted]:
    spy = Spy()
    adapter = Scripted(ledger)
    action = dataclasses.replace(charge_action(spy, idempotent=idempotent), policies=policies, **action_fields)
    host = Host(store, actions=[action], adapters=[adapter], config=HostConfig(
        recovery_max_attempts=recovery, retryable_execution_max_attempts=retryable), redaction=redaction)
    return host, spy, adapter


def records(store: Store, invocation_id: str, kind: GovernanceRecordKind | None = None) -> list[Any]:
    found = store.read(lambda tx: tx.host.list_governance_records(invocation_id))
    return [r for r in found if kind is None or r.kind is kind]


def test_transient_governance_defers_until_lease_expiry(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    rules = Rules("limits", busy())
    host, spy, _ = governed_host(store, ledger, rules)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    assert run_worker(host, backend) == 1
    deferred = host.get(queued.id)
    assert deferred.status is InvocationStatus.RUNNING and deferred.attempt_count == 1  # D1: still leased
    assert deferred.lease_owner is not None and spy.calls == 0
    assert run_worker(host, backend) == 0  # before lease_until nothing can claim it: the delay is the lease
    backend.expire()
    assert run_worker(host, backend) == 1
    done = host.get(queued.id)
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 2  # the next claim counted
    assert [c.attempt for c in rules.seen] == [1, 2] and spy.calls == 1
    assert [r.id for r in records(store, queued.id, GovernanceRecordKind.POLICY_RECORD)] == [
        policy_record_id(queued.id, "limits")]  # §Y-6: per invocation and policy, no attempt number


@pytest.mark.parametrize("case", ["at_cap", "unleased", "not_idempotent", "approval_resume"])
def test_governance_retry_refused_reasons(store: Store, backend: StoreBackend, ledger: Ledger,
                                          monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    texts: list[tuple[str, str]] = []

    def redactor(context: ErrorTextContext, message: str) -> str:  # Q8: the refusal passes the error redactor
        texts.append((str(context.source), message))
        return message

    hooks = Redaction(redact_error_text=redactor)
    if case == "approval_resume":
        host, spy, _ = governed_host(store, ledger, Rules("four-eyes", RequireApproval("ops"), RequireApproval("ops")),
                                     Rules("limits", Allow(), busy()), redaction=hooks)
        queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
        run_worker(host, backend)
        assert host.get(queued.id).status is InvocationStatus.AWAITING_APPROVAL
        done = host.approve(queued.id, approver="alice", authority="ops", note="ok")
        reason = "approval resume"
    elif case == "unleased":
        host, spy, _ = governed_host(store, ledger, Rules("limits", busy()), redaction=hooks)
        done = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
        reason = "unleased"
    else:
        host, spy, _ = governed_host(store, ledger, Rules("limits", busy()), idempotent=case != "not_idempotent",
                                     retryable=1 if case == "at_cap" else 5, redaction=hooks)
        queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
        run_worker(host, backend)
        done = host.get(queued.id)
        reason = "at the cap" if case == "at_cap" else "not idempotent"
    assert done.status is InvocationStatus.FAILED and done.lease_owner is None  # D2: no lease left to expire
    assert done.error is not None and "governance retry refused" in done.error and reason in done.error
    assert ("execution", done.error) in texts  # the error text passed through the redactor's hook
    assert spy.calls == 0


def test_policy_denied_terminal(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, spy, adapter = governed_host(store, ledger, Rules("sanctions", PolicyDenied("blocked country")))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.FAILED and done.attempt_count == 1 and done.lease_owner is None  # D4
    assert "PolicyDenied: blocked country" in (done.error or "")
    assert (spy.calls, len(adapter.calls)) == (0, 0)
    backend.expire()
    assert run_worker(host, backend) == 0  # no deferral: nothing left to claim


def test_deny_decision_blocks_with_compliance_event(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, spy, _ = governed_host(store, ledger, Rules("kyc", Allow()), Rules("sanctions", Deny("blocked country")))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.FAILED and done.error == "policy sanctions denied: blocked country"
    types = [e.type for e in events_of(store, queued.id)]
    assert types[-2:] == ["ComplianceBlocked", "ActionInvocationFailed"] and spy.calls == 0
    stored = {r.name: r.payload["decision"] for r in records(store, queued.id, GovernanceRecordKind.POLICY_RECORD)}
    assert stored == {"kyc": "allow", "sanctions": "deny"}
    assert not {f.check for f in store.read(lambda tx: tx.audit.invariant_findings())}


def test_persisted_footprint_reused_after_deferral(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    computed: list[int] = []

    def footprint(ctx: PolicyContext) -> dict[str, Any]:
        computed.append(ctx.attempt)
        return {"writes": ["ledger"], "amount_cents": ctx.params["amount_cents"]}

    rules = Rules("limits", busy())
    host, _, _ = governed_host(store, ledger, rules, mutation_governance=footprint)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)  # claim 1 persists the footprint, then defers
    assert host.get(queued.id).status is InvocationStatus.RUNNING
    backend.expire()
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.SUCCEEDED
    assert computed == [1]  # D5: claim 2 reused the persisted decision
    assert [c.footprint for c in rules.seen] == [{"writes": ["ledger"], "amount_cents": 1299}] * 2
    assert len(records(store, queued.id, GovernanceRecordKind.MUTATION_FOOTPRINT)) == 1


def test_no_policy_records_before_batch_evaluates(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    first, second, third = Rules("kyc"), Rules("limits", busy()), Rules("sanctions")
    host, _, _ = governed_host(store, ledger, first, second, third)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.RUNNING
    assert records(store, queued.id, GovernanceRecordKind.POLICY_RECORD) == []  # D6: policy 1 evaluated, unwritten
    assert (len(first.seen), len(second.seen), len(third.seen)) == (1, 1, 0)


def test_policy_record_write_failure_not_deferral(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    faulty = FaultInjectingStore(store, query="insert_governance_record")
    host, spy, _ = governed_host(faulty, ledger, Rules("limits"))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    done = host.get(queued.id)
    assert faulty.fired == 1
    assert done.status is InvocationStatus.FAILED and done.lease_owner is None  # D7: not RUNNING with a lease
    assert "policy records could not be written" in (done.error or "") and spy.calls == 0


def test_retryable_resolver_error_fails_with_evidence(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    def resolver(ctx: PolicyContext, names: tuple[str, ...]) -> list[str]:
        raise TransientGovernanceError("kyc provider timed out")

    host, spy, _ = governed_host(store, ledger, Rules("kyc", Obligations(("kyc_verified",))),
                                 obligation_resolver=resolver)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.FAILED and done.lease_owner is None  # D8: terminal, not deferred
    assert "obligation resolver failed: TransientGovernanceError" in (done.error or "") and spy.calls == 0
    kept = records(store, queued.id, GovernanceRecordKind.POLICY_RECORD)
    assert [(r.name, r.payload["obligations"]) for r in kept] == [("kyc", ["kyc_verified"])]
    assert [r.name for r in records(store, queued.id, GovernanceRecordKind.OBLIGATION)] == ["kyc_verified"]


def test_resolver_satisfies_obligations_before_the_handler(store: Store, backend: StoreBackend,
                                                          ledger: Ledger) -> None:
    host, spy, _ = governed_host(store, ledger, Rules("kyc", Obligations(("kyc_verified",))),
                                 obligation_resolver=lambda ctx, names: list(names))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.SUCCEEDED and spy.calls == 1
    satisfied = records(store, queued.id, GovernanceRecordKind.OBLIGATION_SATISFIED)
    assert [(r.name, r.payload["by"]) for r in satisfied] == [("kyc_verified", "resolver")]


def test_preview_errors_raise_to_caller(store: Store, ledger: Ledger) -> None:
    host, _, _ = governed_host(store, ledger, Rules("kyc", Obligations(("kyc_verified",))), Rules("limits", busy()))
    with pytest.raises(TransientGovernanceError, match="rate-limited"):  # D9: not the execution's catch
        host.preview("shop.charge", PARAMS, actor="u1")
    assert host.list() == []  # nothing was submitted or written
    outcomes = host.preview("shop.charge", PARAMS, actor="u1")  # the script is spent: both decide now
    assert [(o.policy, o.as_json()["decision"]) for o in outcomes] == [("kyc", "allow"), ("limits", "allow")]
    assert host.list() == []


def test_deferral_cap_independent(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    rules = Rules("limits", *(busy() for _ in range(10)))
    host, _, _ = governed_host(store, ledger, rules, retryable=3, recovery=10)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    for claim in (1, 2):
        run_worker(host, backend)
        assert host.get(queued.id).status is InvocationStatus.RUNNING, claim
        backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.FAILED and done.attempt_count == 3  # D10: the cap, not the budget
    assert "at the cap: attempt 3 of retryable_execution_max_attempts 3" in (done.error or "")


def test_recovery_budget_validation() -> None:
    with pytest.raises(InvalidInput, match="may not be below"):
        HostConfig(recovery_max_attempts=3, retryable_execution_max_attempts=5)  # H1
    assert HostConfig(retryable_execution_max_attempts=7).recovery_budget == 7  # H13
    assert HostConfig().recovery_budget == 5  # H2
    for bad in (0, True, 1001):
        with pytest.raises(InvalidInput):
            HostConfig(retryable_execution_max_attempts=bad)


def test_policy_names_must_be_unique(store: Store, ledger: Ledger) -> None:
    with pytest.raises(InvalidInput, match="unique"):
        governed_host(store, ledger, Rules("kyc"), Rules("kyc"))
    with pytest.raises(InvalidInput, match="not a policy"):
        governed_host(store, ledger, object())


def test_docs_say_host_does_not_redact_policy_or_hitl_evidence() -> None:
    """P5: applications own the safety of policy and HITL evidence, and the docs say so."""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "host.md").read_text(encoding="utf-8").split())
    assert "Applications own the safety of policy and HITL evidence" in text
    assert "Host does not redact them (host-spec P5)" in text


def test_governance_records_first_write_wins_in_scope_and_append_only(store: Store, backend: StoreBackend) -> None:
    """The store contract of the new records (both backends): the first write of an id wins, a record naming a
    parent in another scope is refused, and no statement may rewrite one."""
    from fencepost.core.errors import Conflict
    from fencepost.store.host_records import NewGovernanceRecord
    from fencepost.testing import host as host_contract

    host_contract.dispatched(store, "inv_1")

    def item(payload: dict[str, Any], tenant: str = "acme") -> NewGovernanceRecord:
        return NewGovernanceRecord(id="gov_1", kind=GovernanceRecordKind.POLICY_RECORD, tenant_id=tenant,
                                   space_id="shop", invocation_id="inv_1", name="kyc", payload=payload)

    parent = host_contract.invocation(store, "inv_1")
    assert (parent.tenant_id, parent.space_id) == ("acme", "shop")
    assert not store.transact(lambda tx: tx.host.append_governance_record(item({"n": 0}, tenant="other")))
    assert store.transact(lambda tx: tx.host.append_governance_record(item({"n": 1})))
    assert not store.transact(lambda tx: tx.host.append_governance_record(item({"n": 2})))
    (stored,) = records(store, "inv_1")
    assert stored.payload == {"n": 1}
    with pytest.raises(Conflict):
        store.transact(lambda tx: backend.inspect(tx, "UPDATE host_governance_records SET name = 'x'"))


def test_default_caps_governance_exhaustion_on_claim_5(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """H2: with the defaults a transient error on every claim ends FAILED on claim 5, inside the budget of 5."""
    host, _, _ = governed_host(store, ledger, Rules("limits", *(busy() for _ in range(10))))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    for _ in range(4):
        run_worker(host, backend)
        backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.FAILED and done.attempt_count == 5
    assert "at the cap: attempt 5 of retryable_execution_max_attempts 5" in (done.error or "")


def interrupted_then_recovered(store: Store, backend: StoreBackend, action: Any, adapter: Scripted) -> Any:
    """Submit once, let a first worker die mid-way (a ``Crash`` in the action), expire its lease, let a second
    worker recover it; the invocation's view afterwards."""
    host = Host(store, actions=[action], adapters=[adapter])
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    backend.expire()
    run_worker(host, backend)
    return host.get(queued.id)


def test_policy_denial_after_effect_still_fails_naming_it(store: Store, backend: StoreBackend,
                                                          ledger: Ledger) -> None:
    """G16: a policy is a decision, not a store error, also after an effect; the applied step is named. The first
    execution dies after the charge's checkpoint and before the ship row (its input dies), so nothing is in flight;
    with a step left ``running`` the verdict is ``reconciliation_required`` instead (ADR 0082, the next test)."""
    spy = Spy()
    adapter = Scripted(ledger)

    def ship_input(ctx: Any, params: Any) -> dict[str, Any]:
        if ctx.step_name == "ship" and spy.calls == 1:
            raise Crash()
        return {"amount_cents": 1}
    action = charge_action(spy, steps=("charge", "ship"), idempotent=True)
    action = dataclasses.replace(action, policies=(Rules("sanctions", Allow(), Deny("list updated")),),
                                 steps=(action.steps[0], dataclasses.replace(action.steps[1], input=ship_input)))
    done = interrupted_then_recovered(store, backend, action, adapter)
    assert done.status is InvocationStatus.FAILED and spy.calls == 1  # decided before the handler ran again
    assert (done.error or "").startswith("policy sanctions denied: list updated; applied before it: charge")
    assert done.reconciliation is not None and done.reconciliation["applied"][0]["step"] == "charge"


def test_policy_denial_with_a_step_left_in_flight_is_reconciliation_required(store: Store, backend: StoreBackend,
                                                                             ledger: Ledger) -> None:
    """ADR 0082: the ship call died mid-call, so the ship may have happened. A recovery denied by a policy before
    it sends anything must not deny that effect: ``reconciliation_required``, the ship row settled unknown, the
    policy's reason kept."""
    spy = Spy()
    adapter = Scripted(ledger, None, Crash())  # charge succeeds, ship dies in its call
    action = dataclasses.replace(charge_action(spy, steps=("charge", "ship"), idempotent=True),
                                 policies=(Rules("sanctions", Allow(), Deny("list updated")),))
    done = interrupted_then_recovered(store, backend, action, adapter)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and spy.calls == 1, done.error
    assert "policy sanctions denied: list updated" in (done.error or "")
    assert done.reconciliation is not None and done.reconciliation["unknown_steps"] == ["ship"]
    assert len(adapter.calls) == 2  # the recovery sent nothing
