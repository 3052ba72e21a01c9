"""The action host's operator routes (ADR 0049; host-spec §2.6, §2.7, §1.Y-13): submit under an Idempotency-Key,
list with filters and a cursor, show with the history, resolve, and the reconciliation queue, over a real
SQLite store with a real worker running the invocations."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.conftest import AUTH, TOKEN, assert_problem
from fencepost.api import create_app
from fencepost.core.errors import InvalidInput
from fencepost.host import Ambiguous, Host, HostConfig
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.store import Store, open_store
from host.kit import Ledger, Scripted, Spy, charge_action

BASE = "/v1/host"


@dataclass
class HostApi:
    store: Store
    host: Host
    adapter: Scripted
    client: TestClient

    def submit(self, key: str, order: str = "o-1", **extra: Any) -> Any:
        body = {"action_id": "shop.charge", "params": {"order_id": order, "amount_cents": 100}, "actor": "u1",
                **extra}
        return self.client.post(f"{BASE}/invocations", json=body, headers={**AUTH, "Idempotency-Key": key})

    def run_worker(self) -> None:
        registry = HandlerRegistry()
        self.host.register(registry)
        worker = Worker(self.store, registry, WorkerConfig(poll_interval=0.01, lease_seconds=30, grace_seconds=0))
        try:
            while worker.run_once():
                pass
        finally:
            worker.heartbeat.stop()


def _build(tmp_path: Path, *script: Any, with_host: bool = True) -> Iterator[HostApi]:
    store = open_store(f"sqlite:///{tmp_path / 'fp.db'}")
    store.migrate()
    adapter = Scripted(Ledger(), *script)
    host = Host(store, actions=[charge_action(Spy())], adapters=[adapter], config=HostConfig())
    app = create_app(store, api_token=TOKEN, on_work=lambda: None, host=host if with_host else None)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield HostApi(store, host, adapter, client)
    store.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[HostApi]:
    yield from _build(tmp_path, Ambiguous("connection reset after the request left"))


def test_submit_needs_the_key_and_the_token_and_a_replay_returns_the_same_invocation(api: HostApi) -> None:
    body = {"action_id": "shop.charge", "params": {"order_id": "o-1", "amount_cents": 100}, "actor": "u1"}
    assert_problem(api.client.post(f"{BASE}/invocations", json=body, headers=AUTH), 422, "validation-error")
    assert_problem(api.client.post(f"{BASE}/invocations", json=body, headers={"Idempotency-Key": "k"}), 401,
                   "unauthorized")
    first = api.submit("k1")
    assert first.status_code == 202, first.text
    created = first.json()
    assert created["status"] == "pending" and created["idempotency_key"] == "k1"
    assert first.headers["location"] == f"{BASE}/invocations/{created['id']}"
    assert first.headers["idempotent-replayed"] == "false"
    again = api.submit("k1")
    assert again.status_code == 202 and again.json()["id"] == created["id"]
    assert again.headers["idempotent-replayed"] == "true"  # a client tells a replay from a new submission
    conflict = assert_problem(api.submit("k1", order="o-2"), 409, "idempotency-conflict")
    assert conflict["field"] == "parameters"
    assert_problem(api.submit("k2", order="o-3", action_id="shop.missing"), 422, "invalid-input")
    bad = api.client.post(f"{BASE}/invocations", json={**body, "params": {"order_id": "x", "amount_cents": -1}},
                          headers={**AUTH, "Idempotency-Key": "k3"})
    assert_problem(bad, 422, "invalid-input")


def test_a_body_naming_a_key_twice_is_refused_as_the_cli_refuses_it(api: HostApi) -> None:
    """A break-it trial: ``{"order_id": "a", ..., "order_id": "b"}`` was accepted and kept the last value."""
    text = ('{"action_id": "shop.charge", "actor": "u1", '
            '"params": {"order_id": "o-1", "amount_cents": 100, "order_id": "o-2"}}')
    refused = api.client.post(f"{BASE}/invocations", content=text,
                              headers={**AUTH, "Idempotency-Key": "dup", "Content-Type": "application/json"})
    problem = assert_problem(refused, 422, "invalid-input")
    assert "the request body has a duplicate key 'order_id' in a JSON object" in problem["detail"], problem
    assert api.host.list() == []
    assert api.submit("dup").status_code == 202  # the same request without the duplicate is taken


def test_a_key_header_that_is_not_printable_ascii_is_refused_not_stored_as_latin_1(api: HostApi) -> None:
    """A break-it trial: "ключ" in the header was stored as Latin-1 mojibake, so the same key given to the CLI made a
    second invocation and a second charge. The header is refused instead; ASCII keys are taken as they are."""
    body = {"action_id": "shop.charge", "params": {"order_id": "o-1", "amount_cents": 100}, "actor": "u1"}
    for raw in ["ключ".encode(), "caf\u00e9".encode("latin-1"), b"tab\tkey"]:
        refused = api.client.post(f"{BASE}/invocations", json=body,
                                  headers=[*AUTH.items(), ("Idempotency-Key", raw)])  # type: ignore[list-item]
        assert_problem(refused, 422, "validation-error")
    twice = api.client.post(f"{BASE}/invocations", json=body,
                            headers=[*AUTH.items(), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
    assert_problem(twice, 422, "invalid-input")  # which key would it be under? (a verification trial)
    assert api.host.list() == []
    assert api.submit("order-1/charge ~!").status_code == 202
    # The header cannot carry outer spaces (HTTP strips them), so no path may store them: the CLI stored
    # "  sp1  " where the API stored "sp1", two invocations for what a user typed as one key.
    with pytest.raises(InvalidInput, match="may not begin or end with whitespace"):
        api.host.submit("shop.charge", body["params"], actor="u1", idempotency_key="  sp1  ")


def test_submit_without_the_app_is_a_clear_problem(tmp_path: Path) -> None:
    for api in _build(tmp_path, with_host=False):
        problem = assert_problem(api.submit("k1"), 409, "host-not-configured")
        assert "--app" in problem["detail"]
        assert api.client.get(f"{BASE}/invocations").json() == {"items": [], "next_cursor": None}


def test_list_filters_and_pages_with_a_cursor(api: HostApi) -> None:
    ids = [api.submit(f"k{i}", order=f"o-{i}").json()["id"] for i in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.client.get(f"{BASE}/invocations", params=params)
        assert page.status_code == 200, page.text
        seen += [item["id"] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5  # every one once, newest first
    assert api.client.get(f"{BASE}/invocations", params={"status": "pending"}).json()["items"][0]["id"] in ids
    assert api.client.get(f"{BASE}/invocations", params={"status": "failed"}).json()["items"] == []
    assert api.client.get(f"{BASE}/invocations", params={"action_id": "shop.other"}).json()["items"] == []
    assert api.client.get(f"{BASE}/invocations", params={"tenant": "other"}).json()["items"] == []
    assert len(api.client.get(f"{BASE}/invocations", params={"tenant": "default"}).json()["items"]) == 5
    assert_problem(api.client.get(f"{BASE}/invocations", params={"cursor": "inv_nope"}), 422, "invalid-input")
    assert_problem(api.client.get(f"{BASE}/invocations", params={"status": "done"}), 422, "validation-error")


def test_show_queue_and_resolve(api: HostApi) -> None:
    inv = api.submit("k1").json()
    api.run_worker()
    shown = api.client.get(f"{BASE}/invocations/{inv['id']}").json()
    assert shown["status"] == "reconciliation_required" and shown["resolution"] is None
    step = shown["steps"][0]
    assert step["status"] == "ambiguous" and step["adapter_invocation_id"].startswith("ai_")
    types = [e["type"] for e in shown["events"]]
    assert types[0] == "ActionInvocationStarted" and types[-1] == "ActionInvocationReconciliationRequired"
    assert "AdapterInvocationAmbiguous" in types
    assert [e["sequence"] for e in shown["events"]] == sorted(e["sequence"] for e in shown["events"])
    assert shown["reconciliations"][0]["kind"] == "adapter_outcome_ambiguous"
    assert shown["lease_timeline"][0]["delivery"] == 1 and shown["lease_timeline"][0]["ended"] == "delivered"
    queue = api.client.get(f"{BASE}/reconciliation-queue").json()["items"]
    assert [q["invocation"]["id"] for q in queue] == [inv["id"]]
    assert queue[0]["kind"] == "adapter_outcome_ambiguous" and "connection reset" in queue[0]["reason"]
    assert queue[0]["lookups"] == [{"step": "charge", "vendor": "simpay-test", "operation": "create_charge",
                                    "status": "ambiguous", "adapter_invocation_id": step["adapter_invocation_id"],
                                    "external_reference": None}]
    resolve = {"outcome": "succeeded", "operator": "ops:1", "note": "charge ch_1 found",
               "evidence": {"charge_id": "ch_1"}}
    url = f"{BASE}/invocations/{inv['id']}/resolve"
    assert_problem(api.client.post(url, json=resolve), 401, "unauthorized")
    done = api.client.post(url, json=resolve, headers=AUTH)
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "succeeded" and done.json()["resolution"]["evidence"] == {"charge_id": "ch_1"}
    assert api.client.post(url, json=resolve, headers=AUTH).status_code == 200  # the identical repeat
    assert_problem(api.client.post(url, json={**resolve, "outcome": "failed"}, headers=AUTH), 409, "conflict")
    after = api.client.get(f"{BASE}/invocations/{inv['id']}").json()
    verdicts = [e["type"] for e in after["events"] if e["type"] in ("ActionInvocationReconciliationRequired",
                                                                      "InvocationResolved")]
    assert verdicts == ["ActionInvocationReconciliationRequired", "InvocationResolved"]
    assert after["error"] == shown["error"] and after["resolution"]["prior"]["status"] == "reconciliation_required"
    assert api.client.get(f"{BASE}/reconciliation-queue").json()["items"] == []
    listed = api.client.get(f"{BASE}/invocations", params={"status": "succeeded"}).json()["items"]
    assert [i["id"] for i in listed] == [inv["id"]] and listed[0]["resolution"]["operator"] == "ops:1"


def test_resolve_refusals_are_problems(api: HostApi) -> None:
    pending = api.submit("k1").json()
    body = {"outcome": "failed", "operator": "ops:1", "note": "n"}
    conflict = assert_problem(api.client.post(f"{BASE}/invocations/{pending['id']}/resolve", json=body,
                                              headers=AUTH), 409, "conflict")
    assert "pending" in conflict["detail"]
    assert_problem(api.client.post(f"{BASE}/invocations/inv_nope/resolve", json=body, headers=AUTH), 404,
                   "not-found")
    assert_problem(api.client.post(f"{BASE}/invocations/{pending['id']}/resolve",
                                   json={**body, "outcome": "reconciliation_required"}, headers=AUTH), 422,
                   "validation-error")
    assert_problem(api.client.post(f"{BASE}/invocations/{pending['id']}/resolve",
                                   json={**body, "note": "   "}, headers=AUTH), 422, "invalid-input")
    assert_problem(api.client.get(f"{BASE}/invocations/inv_nope"), 404, "not-found")


def test_the_invocation_page_of_an_unknown_id_is_a_404(api: HostApi) -> None:
    """From a new user's trial: ``/invocations/inv_nope`` answered 200 with an empty page that only said its
    refresh failed; an unknown rehearsal's page was already a 404."""
    inv = api.submit("k1").json()
    known = api.client.get(f"/invocations/{inv['id']}")
    assert known.status_code == 200 and inv["id"] in known.text
    missing = api.client.get("/invocations/inv_nope")
    assert missing.status_code == 404 and "no invocation inv_nope" in missing.text
