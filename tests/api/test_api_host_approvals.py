"""The approval routes (host-spec P, §1.Y-5; ADRs 0044, 0052): the open approvals oldest first, approve (the
resume runs in the server process and the invocation succeeds), reject (failed with the approver's reason), the
refusals (another authority, an expired request, an invocation that does not await approval) and a server
without ``--app``, over a real SQLite store with a real worker parking the invocations."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.conftest import AUTH, TOKEN, assert_problem
from fencepost.api import create_app
from fencepost.core.clock import ManualClock
from fencepost.host import Host, PolicyContext, RequireApproval
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.store import Store, open_store
from host.kit import Ledger, Scripted, Spy, charge_action

BASE = "/v1/host"
DECISION = {"approver": "ops:alice", "authority": "ops", "note": "payee checked"}


class OpsApproval:
    """Every charge needs the ``ops`` authority's approval within ten minutes."""

    name = "ops-approval"

    def evaluate(self, ctx: PolicyContext) -> RequireApproval:
        return RequireApproval("ops", expires_in=timedelta(minutes=10), reason="charges need a second person")


@dataclass
class ApprovalApi:
    store: Store
    host: Host
    clock: ManualClock
    ledger: Ledger
    spy: Spy
    client: TestClient

    def waiting(self, key: str) -> str:
        """Submit a charge and let a worker park it awaiting approval; its id."""
        response = self.client.post(f"{BASE}/invocations", headers={**AUTH, "Idempotency-Key": key}, json={
            "action_id": "shop.charge", "params": {"order_id": key, "amount_cents": 100}, "actor": "u1"})
        assert response.status_code == 202, response.text
        registry = HandlerRegistry()
        self.host.register(registry)
        worker = Worker(self.store, registry, WorkerConfig(poll_interval=0.01, lease_seconds=30, grace_seconds=0))
        try:
            while worker.run_once():
                pass
        finally:
            worker.heartbeat.stop()
        invocation_id: str = response.json()["id"]
        assert self.host.get(invocation_id).status == "awaiting_approval"
        return invocation_id

    def decide(self, invocation_id: str, decision: str, **body: Any) -> Any:
        return self.client.post(f"{BASE}/invocations/{invocation_id}/{decision}", json={**DECISION, **body},
                                headers=AUTH)


def _build(tmp_path: Path, *, with_host: bool = True) -> Iterator[ApprovalApi]:
    clock = ManualClock()
    store = open_store(f"sqlite:///{tmp_path / 'fp.db'}", clock=clock)
    store.migrate()
    ledger, spy = Ledger(), Spy()
    action = dataclasses.replace(charge_action(spy, idempotent=True), policies=(OpsApproval(),))
    host = Host(store, actions=[action], adapters=[Scripted(ledger)])
    app = create_app(store, api_token=TOKEN, on_work=lambda: None, host=host if with_host else None)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield ApprovalApi(store, host, clock, ledger, spy, client)
    store.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApprovalApi]:
    yield from _build(tmp_path)


def test_the_open_approvals_oldest_first_with_what_an_approver_needs(api: ApprovalApi) -> None:
    assert api.client.get(f"{BASE}/approvals").json() == {"items": []}
    first = api.waiting("o-1")
    api.clock.advance(5)
    second = api.waiting("o-2")
    items = api.client.get(f"{BASE}/approvals").json()["items"]
    assert [i["invocation"]["id"] for i in items] == [first, second]
    entry = items[0]
    assert (entry["action_id"], entry["policy"], entry["authority"], entry["reason"], entry["expired"]) == (
        "shop.charge", "ops-approval", "ops", "charges need a second person", False)
    assert entry["invocation"]["status"] == "awaiting_approval"
    assert entry["expires_at"] > entry["requested_at"]
    assert api.client.get(f"{BASE}/approvals?limit=0").status_code == 422


def test_approve_resumes_in_the_server_and_the_invocation_succeeds(api: ApprovalApi) -> None:
    invocation_id = api.waiting("o-1")
    assert (api.spy.calls, len(api.ledger.charges)) == (0, 0)
    unauthenticated = api.client.post(f"{BASE}/invocations/{invocation_id}/approve", json=DECISION)
    assert_problem(unauthenticated, 401, "unauthorized")
    approved = api.decide(invocation_id, "approve")
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["status"] == "succeeded" and body["attempt_count"] == 1  # P3: the resume counts no claim
    assert (api.spy.calls, len(api.ledger.charges)) == (1, 1)
    assert api.client.get(f"{BASE}/approvals").json() == {"items": []}
    detail = api.client.get(f"{BASE}/invocations/{invocation_id}").json()
    granted = [e for e in detail["events"] if e["type"] == "ApprovalGranted"]
    assert [(e["payload"]["approver"], e["payload"]["authority"], e["payload"]["note"]) for e in granted] == [
        ("ops:alice", "ops", "payee checked")]
    again = api.decide(invocation_id, "approve")
    assert "not awaiting approval" in assert_problem(again, 409, "conflict")["detail"]


def test_reject_ends_it_failed_with_the_approvers_reason(api: ApprovalApi) -> None:
    invocation_id = api.waiting("o-1")
    rejected = api.decide(invocation_id, "reject", note="payee unknown")
    assert rejected.status_code == 200, rejected.text
    body = rejected.json()
    assert body["status"] == "failed"
    assert body["error"] == "approval rejected by ops:alice (authority ops): payee unknown"
    assert (api.spy.calls, len(api.ledger.charges)) == (0, 0)
    types = [e["type"] for e in api.client.get(f"{BASE}/invocations/{invocation_id}").json()["events"]]
    assert types.index("ApprovalRequested") < types.index("ApprovalRejected") < types.index(
        "ActionInvocationFailed")
    assert_problem(api.decide(invocation_id, "approve"), 409, "conflict")


def test_another_authority_is_refused_and_nothing_is_recorded(api: ApprovalApi) -> None:
    invocation_id = api.waiting("o-1")
    for decision in ("approve", "reject"):
        refused = assert_problem(api.decide(invocation_id, decision, authority="finance"), 409, "not-allowed")
        assert refused["guard"] == "approval_authority"
        assert "requires authority 'ops'" in refused["detail"]
    assert api.host.get(invocation_id).status == "awaiting_approval"
    assert [i["invocation"]["id"] for i in api.client.get(f"{BASE}/approvals").json()["items"]] == [invocation_id]
    assert_problem(api.decide(invocation_id, "approve", authority=""), 422, "validation-error")
    assert_problem(api.decide(invocation_id, "approve", note="x" * 2001), 422, "validation-error")


def test_an_expired_request_is_refused_until_the_sweep_ends_it(api: ApprovalApi) -> None:
    invocation_id = api.waiting("o-1")
    api.clock.advance(601)
    (entry,) = api.client.get(f"{BASE}/approvals").json()["items"]
    assert entry["expired"] is True
    for decision in ("approve", "reject"):
        assert "expired" in assert_problem(api.decide(invocation_id, decision), 409, "approval-expired")["detail"]
    assert api.spy.calls == 0 and api.host.get(invocation_id).status == "awaiting_approval"
    assert api.host.expire_approvals() == 1
    assert api.host.get(invocation_id).status == "failed"
    assert api.client.get(f"{BASE}/approvals").json() == {"items": []}


def test_not_awaiting_and_unknown_invocations(api: ApprovalApi) -> None:
    assert_problem(api.decide("inv_missing", "approve"), 404, "not-found")
    assert_problem(api.decide("inv_missing", "reject"), 404, "not-found")
    invocation_id = api.waiting("o-1")
    assert api.decide(invocation_id, "reject").status_code == 200
    assert "is failed, not awaiting approval" in assert_problem(api.decide(invocation_id, "reject"), 409,
                                                               "conflict")["detail"]


def test_without_app_approve_is_host_not_configured_and_reject_works(api: ApprovalApi) -> None:
    first = api.waiting("o-1")
    api.clock.advance(1)
    second = api.waiting("o-2")
    # The same database served without --app: reads and rejections work, approving cannot resume anything.
    with TestClient(create_app(api.store, api_token=TOKEN, on_work=lambda: None),
                    raise_server_exceptions=False) as bare:
        listed = bare.get(f"{BASE}/approvals").json()["items"]
        assert [i["invocation"]["id"] for i in listed] == [first, second]
        refused = bare.post(f"{BASE}/invocations/{first}/approve", json=DECISION, headers=AUTH)
        assert "--app" in assert_problem(refused, 409, "host-not-configured")["detail"]
        assert api.host.get(first).status == "awaiting_approval"  # nothing recorded
        rejected = bare.post(f"{BASE}/invocations/{second}/reject", json=DECISION, headers=AUTH)
        assert rejected.status_code == 200 and rejected.json()["status"] == "failed"
    assert api.spy.calls == 0
