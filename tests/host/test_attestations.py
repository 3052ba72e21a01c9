"""Execution attestations and the obligations they satisfy (host-spec G17-G22, O1-O3; ADR 0045), with real
workers, injected store faults and crashes on every backend."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from fencepost.core.statuses import GovernanceRecordKind, InvocationStatus
from fencepost.host import Accepted, Allow, Attestation, Host, HostConfig, Obligations, PolicyContext
from fencepost.host.attestation import attestation_fingerprint
from fencepost.host.governance import governance_record_id
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.host_records import NewGovernanceRecord
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, run_worker


class NeedsReceipt:
    """Attaches the ``receipt_checked`` obligation (or allows, with ``obligations=()``)."""

    name = "receipts"

    def __init__(self, obligations: tuple[str, ...] = ("receipt_checked",)) -> None:
        self.obligations = obligations

    def evaluate(self, ctx: PolicyContext) -> Any:
        return Obligations(self.obligations) if self.obligations else Allow()


class Extractor:
    """Records each call; attests the charge id and satisfies ``satisfies``; ``fail`` is raised (once each)."""

    def __init__(self, satisfies: tuple[str, ...] = ("receipt_checked",), *fail: BaseException) -> None:
        self.satisfies = satisfies
        self.fail = list(fail)
        self.calls: list[dict[str, Any]] = []
        self.made: list[Attestation] = []

    def __call__(self, *, input: dict[str, Any], output: dict[str, Any], started_at: datetime,
                 completed_at: datetime) -> Attestation:
        self.calls.append({"input": input, "output": output, "started_at": started_at, "completed_at": completed_at})
        made = Attestation(claims={"charge_id": output.get("charge_id"), "amount": input["amount_cents"]},
                           satisfies_obligations=self.satisfies)
        self.made.append(made)
        if self.fail:
            raise self.fail.pop(0)
        return made


def attesting_host(store: Store, ledger: Ledger, extractor: Extractor, *script: Any,
                   obligations: tuple[str, ...] = ("receipt_checked",), **fields: Any) -> tuple[Host, Spy]:
    spy = Spy()
    action = dataclasses.replace(charge_action(spy, idempotent=True), policies=(NeedsReceipt(obligations),),
                                 extract_execution_attestation=extractor, **fields)
    return Host(store, actions=[action], adapters=[Scripted(ledger, *script)], config=HostConfig()), spy


def records(store: Store, invocation_id: str, kind: GovernanceRecordKind) -> list[Any]:
    return [r for r in store.read(lambda tx: tx.host.list_governance_records(invocation_id)) if r.kind is kind]


def test_extractor_gets_checkpoint_times(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    extractor = Extractor()
    host, _ = attesting_host(store, ledger, extractor)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.SUCCEEDED
    (row,) = store.read(lambda tx: tx.host.list_adapter_invocations(queued.id))
    (call,) = extractor.calls  # G18: the stored input and output, the checkpoint's times
    assert (call["input"], call["output"]) == (row.input, row.output)
    assert (call["started_at"], call["completed_at"]) == (row.created_at, row.updated_at)
    (attestation,) = records(store, queued.id, GovernanceRecordKind.ATTESTATION)
    assert attestation.fingerprint == attestation_fingerprint(extractor.made[0])
    assert attestation.payload["claims"] == {"charge_id": row.output["charge_id"], "amount": 1299}
    (satisfied,) = records(store, queued.id, GovernanceRecordKind.OBLIGATION_SATISFIED)
    assert (satisfied.name, satisfied.payload["adapter_invocation_id"]) == ("receipt_checked", row.id)


def test_existing_attestation_reused(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """G17 and O3 (``test_obligation_updates_reapplied_idempotently``): the finalization fails twice after
    the attestation committed; each recovery reuses it (no extractor call), applies its satisfaction again,
    and one satisfied state results."""
    extractor = Extractor()
    faulty = FaultInjectingStore(store, plan={"update_leased_invocation": {2, 3}})  # 1: pending -> running
    host, spy = attesting_host(faulty, ledger, extractor)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    for claim in (1, 2):
        run_worker(host, backend)
        assert host.get(queued.id).status is InvocationStatus.RUNNING, claim
        backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 3 and faulty.fired == 2
    assert len(extractor.calls) == 1 and spy.calls == 3 and len(ledger.charges) == 1
    assert len(records(store, queued.id, GovernanceRecordKind.ATTESTATION)) == 1
    assert [r.name for r in records(store, queued.id, GovernanceRecordKind.OBLIGATION_SATISFIED)] == [
        "receipt_checked"]
    assert [r.name for r in records(store, queued.id, GovernanceRecordKind.OBLIGATION)] == ["receipt_checked"]


def test_extractor_rerun_after_interrupted_append(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    extractor = Extractor(("receipt_checked",), Crash())  # dies after extracting, before the append
    host, _ = attesting_host(store, ledger, extractor)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.RUNNING
    assert records(store, queued.id, GovernanceRecordKind.ATTESTATION) == []
    backend.expire()
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.SUCCEEDED
    assert len(extractor.calls) == 2  # G19: called once more
    (attestation,) = records(store, queued.id, GovernanceRecordKind.ATTESTATION)
    assert attestation.fingerprint == attestation_fingerprint(extractor.made[0]) == attestation_fingerprint(
        extractor.made[1])


def test_nondeterministic_extractor_fails_closed(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """G19 (recommended): an attestation already stored under the id with another fingerprint (an earlier
    append whose acknowledgement was lost, from a run that extracted differently) is an IntegrityViolation."""

    def earlier_run(*, input: dict[str, Any], output: dict[str, Any], started_at: datetime,
                    completed_at: datetime) -> Attestation:
        (row,) = store.read(lambda tx: tx.host.list_adapter_invocations(invocation_id))
        store.transact(lambda tx: tx.host.append_governance_record(NewGovernanceRecord(
            id=governance_record_id(GovernanceRecordKind.ATTESTATION, invocation_id, row.id),
            kind=GovernanceRecordKind.ATTESTATION, tenant_id="default", space_id="default",
            invocation_id=invocation_id, name=row.id, payload={"claims": {"charge_id": "other"}},
            fingerprint="sha256:" + "0" * 64)))
        return Attestation(claims={"charge_id": output["charge_id"]}, satisfies_obligations=("receipt_checked",))

    spy = Spy()
    action = dataclasses.replace(charge_action(spy, idempotent=True), policies=(NeedsReceipt(),),
                                 extract_execution_attestation=earlier_run)
    host = Host(store, actions=[action], adapters=[Scripted(ledger)])
    invocation_id = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k").id
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED  # a recorded effect: never "failed"
    assert "not deterministic" in (done.error or "")


def test_no_output_skips_extraction(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    extractor = Extractor()
    host, _ = attesting_host(store, ledger, extractor, Accepted("ref-1"), obligations=(),
                             completion_deadline=timedelta(hours=1))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).parked  # G20: the handoff has no output: nothing to extract from
    assert extractor.calls == [] and records(store, queued.id, GovernanceRecordKind.ATTESTATION) == []


def test_extractor_error_is_recoverable(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """G21, G22: the step's success is durable, so an extractor that fails (a field it needs is missing from
    the stored output) raises RecoverableFinalization, never FAILED; the next claim calls it again."""
    extractor = Extractor(("receipt_checked",), KeyError("card_last4"))
    host, _ = attesting_host(store, ledger, extractor)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.RUNNING
    backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.SUCCEEDED and len(extractor.calls) == 2 and len(ledger.charges) == 1


def test_unsatisfied_obligation_on_recovery_terminal(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    extractor = Extractor(satisfies=())
    host, _ = attesting_host(store, ledger, extractor, Crash())  # claim 1 dies in the provider call
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    backend.expire()
    run_worker(host, backend)  # the recovery re-sends, succeeds, and finds the obligation unsatisfied
    done = host.get(queued.id)
    assert done.status is InvocationStatus.FAILED and done.attempt_count == 2  # O1
    assert (done.error or "").startswith("unsatisfied obligations: receipt_checked; applied before it: charge")


def test_unsatisfied_obligation_after_handoff_reconciles(store: Store, backend: StoreBackend,
                                                        ledger: Ledger) -> None:
    extractor = Extractor(satisfies=())
    host, _ = attesting_host(store, ledger, extractor, Accepted("ref-7", {"queued": True}),
                             completion_deadline=timedelta(hours=1))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    done = host.get(queued.id)
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED  # O2: a handoff is an effect
    assert "unsatisfied obligations: receipt_checked" in (done.error or "") and "ref-7" in (done.error or "")
    assert done.reconciliation is not None and done.reconciliation["kind"] == "applied_effect"
