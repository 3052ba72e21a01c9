"""Attempts: enqueue (202, never runs anything), list/read, reconcile (409 while the lease is active), abort,
comparison and gate; an Attempt is only reachable under its own rehearsal."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from api.conftest import AUTH, Api, assert_problem
from fencepost.rehearsal.handler import KIND

SCENARIOS = ["deliver_and_install", "integrity_check", "seed_and_verify", "reapply_is_noop",
             "upgrade_from_previous", "uninstall_to_empty"]


def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


def claim(api: Api, lease_seconds: float = 60.0) -> Any:
    """Claim the oldest PENDING command as a worker would (PROCESSING with a fresh private token)."""
    claimed = api.store.transact(lambda tx: tx.outbox.claim(owner="host:1:abcd", kinds=[KIND], limit=1,
                                                            lease_seconds=lease_seconds))
    assert len(claimed) == 1
    return claimed[0].lease


def attempt_url(run_id: str, attempt_id: str, tail: str = "") -> str:
    return f"/delivery-rehearsals/{run_id}/attempts/{attempt_id}{tail}"


# ── enqueue ──
def test_enqueue_returns_202_with_a_pending_attempt_and_runs_nothing(api: Api) -> None:
    run_id = api.create_run()
    response = api.client.post(f"/delivery-rehearsals/{run_id}/attempts", headers=AUTH)
    assert response.status_code == 202, response.text
    attempt = response.json()
    assert response.headers["location"] == attempt_url(run_id, attempt["id"])
    assert attempt["status"] == "PENDING" and attempt["seq"] == 1 and attempt["started_at"] is None
    assert attempt["outbox"] | {"command_id": None, "available_at": None} == {
        "command_id": None, "available_at": None, "status": "PENDING", "lease_owner": None, "lease_until": None,
        "last_heartbeat_at": None, "delivery_count": 0, "lease_expired": False, "kind": KIND,
        # no worker runs in these tests, and none is registered: the Attempt says so (ADR 0019)
        "pending_seconds": 0.0, "live_workers": 0, "no_live_worker": True}
    assert [r["scenario"] for r in attempt["receipts"]] == SCENARIOS
    assert {r["status"] for r in attempt["receipts"]} == {"PENDING"}
    assert not api.work_dir.exists(), "the request must never open a sandbox"
    assert api.woken == [1], "in-process workers are woken"
    # still PENDING afterwards: no worker ran
    again = api.client.get(attempt_url(run_id, attempt["id"])).json()
    assert again["status"] == "PENDING" and again["outbox"]["status"] == "PENDING"


def test_enqueue_errors(api: Api) -> None:
    run_id = api.create_run()
    assert_problem(api.client.post(f"/delivery-rehearsals/{run_id}/attempts"), 401, "unauthorized")
    assert_problem(api.client.post("/delivery-rehearsals/run_nope/attempts", headers=AUTH), 404, "not-found")
    assert api.client.get(f"/delivery-rehearsals/{run_id}/attempts").json()["items"] == []


# ── list and read ──
def test_list_and_read_attempts_after_a_worker_ran(api: Api) -> None:
    run_id = api.create_run()
    first = api.enqueue(run_id)
    api.run_worker()
    listed = api.client.get(f"/delivery-rehearsals/{run_id}/attempts").json()
    assert from_iso(listed["now"]) == api.clock.now()
    (attempt,) = listed["items"]
    assert attempt["id"] == first["id"] and attempt["status"] == "SUCCEEDED"
    assert attempt["outbox"]["status"] == "DELIVERED" and attempt["outbox"]["delivery_count"] == 1
    assert attempt["outbox"]["last_heartbeat_at"] is not None
    for receipt in attempt["receipts"]:
        assert receipt["status"] == "SUCCEEDED" and receipt["delivery"] == 1
        assert receipt["evidence_fingerprint"].startswith("sha256:")
        assert receipt["integrity"]["status"] == "ok"
        assert receipt["evidence"] is None
    read = api.client.get(attempt_url(run_id, first["id"], "?evidence=true")).json()
    assert read["receipts"][0]["evidence"]["scenario"] == "deliver_and_install"
    history = attempt.pop("lease_history")
    assert [(d["delivery"], d["claim"], d["ended"]) for d in history] == [(1, "claim", "delivered")]
    assert api.client.get(attempt_url(run_id, first["id"])).json() == attempt


def test_unknown_ids_are_404(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    assert_problem(api.client.get(attempt_url(run_id, "att_nope")), 404, "not-found")
    assert_problem(api.client.get(attempt_url("run_nope", attempt["id"])), 404, "not-found")
    assert_problem(api.client.get("/delivery-rehearsals/run_nope/attempts"), 404, "not-found")
    assert_problem(api.client.post(attempt_url(run_id, "att_nope", "/reconcile"), headers=AUTH), 404, "not-found")
    assert_problem(api.client.post(attempt_url(run_id, "att_nope", "/abort"), headers=AUTH), 404, "not-found")
    assert_problem(api.client.get("/delivery-rehearsals/run_nope/attempt-comparison"), 404, "not-found")
    assert_problem(api.client.get("/delivery-rehearsals/run_nope/release-gate"), 404, "not-found")
    assert_problem(api.client.get("/no/such/route"), 404, "not-found")


@pytest.mark.parametrize("action", ["", "/reconcile", "/abort"])
def test_an_attempt_of_another_rehearsal_is_404_and_untouched(api: Api, action: str) -> None:
    mine, other = api.create_run(), api.create_run()
    attempt = api.enqueue(other)
    claim(api)
    api.clock.advance(120)
    url = attempt_url(mine, attempt["id"], action)
    response = api.client.post(url, headers=AUTH) if action else api.client.get(url)
    assert_problem(response, 404, "not-found")
    still = api.client.get(attempt_url(other, attempt["id"])).json()
    assert still["status"] == "PENDING" and still["outbox"]["status"] == "PROCESSING"


# ── reconcile ──
def test_reconcile_of_an_active_lease_is_409_with_the_expiry_time(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    lease = claim(api, lease_seconds=60)
    url = attempt_url(run_id, attempt["id"], "/reconcile")
    assert_problem(api.client.post(url), 401, "unauthorized")
    body = assert_problem(api.client.post(url, headers=AUTH), 409, "lease-active")
    assert from_iso(body["lease_until"]) == lease.until
    assert body["lease_until"][:19] in body["detail"].replace("+00:00", "Z")
    view = api.client.get(attempt_url(run_id, attempt["id"])).json()
    assert view["outbox"]["status"] == "PROCESSING" and view["outbox"]["lease_expired"] is False
    assert view["outbox"]["lease_owner"] == "host:1:abcd"


def test_reconcile_after_expiry_returns_the_command_to_pending(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    lease = claim(api, lease_seconds=60)
    api.clock.advance(61)
    listed = api.client.get(f"/delivery-rehearsals/{run_id}/attempts").json()
    assert listed["items"][0]["outbox"]["lease_expired"] is True
    assert from_iso(listed["now"]) > lease.until
    api.woken.clear()
    response = api.client.post(attempt_url(run_id, attempt["id"], "/reconcile"), headers=AUTH)
    assert response.status_code == 200, response.text
    after = response.json()
    assert after["outbox"]["status"] == "PENDING" and after["outbox"]["lease_owner"] is None
    assert after["outbox"]["lease_expired"] is False and after["outbox"]["delivery_count"] == 1
    assert api.woken == [1]
    # a worker then redelivers it: delivery 2, all six scenarios replayed
    api.run_worker()
    done = api.client.get(attempt_url(run_id, attempt["id"])).json()
    assert done["status"] == "SUCCEEDED" and done["outbox"]["delivery_count"] == 2
    assert {r["delivery"] for r in done["receipts"]} == {2}


def test_after_a_reconcile_no_scenario_shows_running_that_nothing_runs(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    lease = claim(api, lease_seconds=60)

    def start(tx: Any) -> None:  # the delivery's first fenced write, as the handler makes it
        tx.rehearsal.lock_attempt(attempt["id"])
        tx.rehearsal.start_attempt(attempt["id"])
        tx.rehearsal.receipt_running(attempt["id"], 1)

    api.store.fenced(lease, start, name="rehearsal.start", lease_seconds=60)
    running = api.client.get(attempt_url(run_id, attempt["id"])).json()
    assert running["status"] == running["state"] == "RUNNING"
    assert [r["state"] for r in running["receipts"]] == ["RUNNING"] + ["PENDING"] * 5, "a live lease: it runs"
    api.clock.advance(61)
    assert api.client.post(attempt_url(run_id, attempt["id"], "/reconcile"), headers=AUTH).status_code == 200
    after = api.client.get(attempt_url(run_id, attempt["id"])).json()
    assert after["status"] == "RUNNING" and after["outbox"]["status"] == "PENDING"
    assert after["state"] == "INTERRUPTED"
    assert [r["status"] for r in after["receipts"]] == ["RUNNING"] + ["PENDING"] * 5
    assert [r["state"] for r in after["receipts"]] == ["INTERRUPTED"] + ["PENDING"] * 5
    listed = api.client.get(f"/delivery-rehearsals/{run_id}/attempts").json()["items"][0]
    assert listed["state"] == "INTERRUPTED" and listed["receipts"][0]["state"] == "INTERRUPTED"
    page = api.client.get(f"/rehearsals/{run_id}").text
    assert "Interrupted, will be replayed" in page and ">RUNNING<" not in page
    api.run_worker()
    done = api.client.get(attempt_url(run_id, attempt["id"])).json()
    assert done["state"] == "SUCCEEDED" and [r["state"] for r in done["receipts"]] == ["SUCCEEDED"] * 6


def test_reconcile_of_a_pending_or_finished_command_is_409(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    body = assert_problem(api.client.post(attempt_url(run_id, attempt["id"], "/reconcile"), headers=AUTH), 409,
                          "conflict")
    assert "PENDING" in body["detail"]
    api.run_worker()
    assert_problem(api.client.post(attempt_url(run_id, attempt["id"], "/reconcile"), headers=AUTH), 409, "conflict")


# ── abort ──
def test_abort_a_pending_attempt_then_abort_again_is_409(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    url = attempt_url(run_id, attempt["id"], "/abort")
    assert_problem(api.client.post(url), 401, "unauthorized")
    response = api.client.post(url, headers=AUTH, json={"reason": "operator test"})
    assert response.status_code == 200, response.text
    aborted = response.json()
    assert aborted["status"] == "ABORTED" and aborted["outbox"]["status"] == "ABORTED"
    assert {r["status"] for r in aborted["receipts"]} == {"ABORTED"}
    body = assert_problem(api.client.post(url, headers=AUTH), 409, "conflict")
    assert "ABORTED" in body["detail"]


def test_abort_a_processing_attempt_fences_the_lease(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    claim(api)
    response = api.client.post(attempt_url(run_id, attempt["id"], "/abort"), headers=AUTH)
    assert response.status_code == 200
    assert response.json()["outbox"] | {"command_id": None, "available_at": None, "last_heartbeat_at": None} == {
        "command_id": None, "available_at": None, "last_heartbeat_at": None, "status": "ABORTED",
        "lease_owner": None, "lease_until": None, "delivery_count": 1, "lease_expired": False, "kind": KIND,
        "pending_seconds": None, "live_workers": 0, "no_live_worker": False}
    assert api.sql("SELECT lease_token FROM commands") == [(None,)]


def test_abort_of_a_succeeded_attempt_is_409(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    api.run_worker()
    assert_problem(api.client.post(attempt_url(run_id, attempt["id"], "/abort"), headers=AUTH), 409, "conflict")


@pytest.mark.parametrize("body", [{"reason": ""}, {"reason": "x" * 501}, {"reason": 3}, {"other": "x"}])
def test_abort_with_an_invalid_body_is_422(api: Api, body: dict[str, Any]) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    assert_problem(api.client.post(attempt_url(run_id, attempt["id"], "/abort"), headers=AUTH, json=body), 422,
                   "validation-error")
    assert api.client.get(attempt_url(run_id, attempt["id"])).json()["status"] == "PENDING"


# ── comparison and gate ──
def test_comparison_and_gate_before_and_after_two_successful_attempts(api: Api) -> None:
    run_id = api.create_run()
    comparison = api.client.get(f"/delivery-rehearsals/{run_id}/attempt-comparison").json()
    assert comparison["comparable"] is False and "0 successful" in comparison["reason"]
    gate = api.client.get(f"/delivery-rehearsals/{run_id}/release-gate").json()
    assert gate["passed"] is False and gate["latest_attempt_id"] is None
    first = api.enqueue(run_id)
    api.run_worker()
    second = api.enqueue(run_id)
    pending_gate = api.client.get(f"/delivery-rehearsals/{run_id}/release-gate").json()
    assert pending_gate["passed"] is False, "a newer PENDING Attempt blocks the gate"
    api.run_worker()
    comparison = api.client.get(f"/delivery-rehearsals/{run_id}/attempt-comparison").json()
    assert comparison["comparable"] is True and comparison["equal"] is True
    assert comparison["baseline"]["attempt_id"] == first["id"]
    assert comparison["candidate"]["attempt_id"] == second["id"]
    assert comparison["baseline"]["semantic_fingerprint"] == comparison["candidate"]["semantic_fingerprint"]
    assert [r["evidence_fingerprint"] for r in comparison["baseline"]["raw"]] != [
        r["evidence_fingerprint"] for r in comparison["candidate"]["raw"]]
    assert comparison["differing_paths"] == []
    gate = api.client.get(f"/delivery-rehearsals/{run_id}/release-gate").json()
    assert gate["passed"] is True and gate["latest_attempt_id"] == second["id"]
    assert gate["baseline_attempt_id"] == first["id"]
    assert len(gate["checks"]) == 5 and all(c["passed"] and c["reason"] for c in gate["checks"])


def test_a_tampered_receipt_is_marked_and_blocks_the_gate(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    api.run_worker()
    (text,) = api.sql("SELECT evidence FROM rehearsal_receipts WHERE attempt_id = ? AND position = 3",
                      (attempt["id"],))[0]
    forged = json.loads(text)
    forged["result"] = {"forged": True}
    api.sql("UPDATE rehearsal_receipts SET evidence = ? WHERE attempt_id = ? AND position = 3",
            (json.dumps(forged), attempt["id"]))
    view = api.client.get(attempt_url(run_id, attempt["id"])).json()
    assert [r["integrity"]["status"] for r in view["receipts"]] == ["ok", "ok", "tampered", "ok", "ok", "ok"]
    gate = api.client.get(f"/delivery-rehearsals/{run_id}/release-gate").json()
    assert gate["passed"] is False
    assert [t["position"] for t in gate["tampered_receipts"]] == [3]
    assert not next(c for c in gate["checks"] if c["name"] == "evidence_integrity")["passed"]
    page = api.client.get(f"/rehearsals/{run_id}").text
    assert "TAMPERED" in page


def test_lease_expiry_is_judged_by_the_store_clock(api: Api) -> None:
    run_id = api.create_run()
    api.enqueue(run_id)
    lease = claim(api, lease_seconds=10)
    api.clock.advance(9.5)
    item = api.client.get(f"/delivery-rehearsals/{run_id}/attempts").json()["items"][0]
    assert item["outbox"]["lease_expired"] is False
    assert from_iso(item["outbox"]["lease_until"]) == lease.until
    api.clock.advance(timedelta(seconds=1).total_seconds())
    item = api.client.get(f"/delivery-rehearsals/{run_id}/attempts").json()["items"][0]
    assert item["outbox"]["lease_expired"] is True
