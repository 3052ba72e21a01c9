"""SimPay end to end with the HttpAdapter: every failure mode, the ledger checked after each call (charged or
not), and the idempotency key honoured across repeated calls, threads, processes and a provider restart."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fencepost.demo.ledger import Ledger
from fencepost.demo.simpay import SIGNATURE_HEADER, SimPay, sign_webhook, verify_webhook
from fencepost.demo.simpay_adapter import SimPayAdapter
from fencepost.host.adapter import (
    Accepted,
    AdapterCall,
    Ambiguous,
    PermanentFailure,
    Succeeded,
    TimedOut,
    TransientFailure,
)
from fencepost.host.outcome import StepVerdict, interpret_reply
from helpers.loopback_http import closed_port, loopback_server, reply
from helpers.processes import start_piped, subprocess_env

TIMEOUTS_S = 0.5  # the client's read timeout; slow-after-charge sleeps past it


@pytest.fixture
def simpay(tmp_path: Path) -> Iterator[SimPay]:
    with SimPay(tmp_path / "ledger.db", slow_seconds=3.0) as provider:
        yield provider


@pytest.fixture
def payer(simpay: SimPay) -> Iterator[SimPayAdapter]:
    from fencepost.host.http_adapter import HttpTimeouts

    with SimPayAdapter(simpay.url, timeouts=HttpTimeouts(connect=2, write=2, read=TIMEOUTS_S, pool=2)) as a:
        yield a


def charge(key: str, mode: str = "ok", amount: int = 500, operation: str = "charge") -> AdapterCall:
    return AdapterCall(adapter_invocation_id=key, operation=operation,
                       input={"amount": amount, "currency": "eur", "mode": mode})


def keys_charged(provider: SimPay) -> list[str | None]:
    return [c["idempotency_key"] for c in provider.ledger.charges()]


@pytest.mark.parametrize(("mode", "kind", "verdict", "charged"), [
    ("ok", Succeeded, StepVerdict.SUCCEEDED, 1),
    ("decline", PermanentFailure, StepVerdict.FAILED, 0),
    ("flaky", TransientFailure, StepVerdict.RETRY, 0),
    ("slow-after-charge", TimedOut, StepVerdict.AMBIGUOUS, 1),
    ("garbage", Ambiguous, StepVerdict.AMBIGUOUS, 1),
    ("reset-after-charge", Ambiguous, StepVerdict.AMBIGUOUS, 1),
])
def test_each_mode_once(simpay: SimPay, payer: SimPayAdapter, mode: str, kind: type, verdict: StepVerdict,
                        charged: int) -> None:
    result = payer.execute(charge("ai_1", mode))
    assert type(result) is kind, result
    assert interpret_reply(result).verdict == verdict
    assert keys_charged(simpay) == ["ai_1"] * charged
    assert [(c["path"], c["mode"]) for c in simpay.ledger.calls()] == [("/v1/charges", mode)]


def test_ok_answers_the_charge_it_made(simpay: SimPay, payer: SimPayAdapter) -> None:
    result = payer.execute(charge("ai_1"))
    assert isinstance(result, Succeeded)
    [made] = simpay.ledger.charges()
    assert result.output["id"] == made["id"] and made["id"].startswith("ch_")
    assert made["request"] == {"amount": 500, "currency": "eur"}  # the mode is a header, not the charge


def test_decline_says_why(simpay: SimPay, payer: SimPayAdapter) -> None:
    result = payer.execute(charge("ai_1", "decline"))
    assert isinstance(result, PermanentFailure)
    assert "402" in result.reason and "card declined" in result.reason


def test_flaky_refuses_twice_with_retry_after_then_charges_once(simpay: SimPay, payer: SimPayAdapter) -> None:
    replies = [payer.execute(charge("ai_1", "flaky")) for _ in range(3)]
    assert [type(r) for r in replies] == [TransientFailure, TransientFailure, Succeeded]
    assert all(isinstance(r, TransientFailure) and r.retry_after == 1.0 for r in replies[:2])
    assert keys_charged(simpay) == ["ai_1"]
    assert len(simpay.ledger.calls()) == 3


def test_garbage_is_uninterpretable(simpay: SimPay, payer: SimPayAdapter) -> None:
    result = payer.execute(charge("ai_1", "garbage"))
    assert isinstance(result, Ambiguous)
    assert result.reason.startswith("uninterpretable reply")


def test_the_same_key_returns_the_first_charge_and_makes_no_new_one(simpay: SimPay, payer: SimPayAdapter) -> None:
    first = payer.execute(charge("ai_1"))
    second = payer.execute(charge("ai_1"))
    assert isinstance(first, Succeeded) and isinstance(second, Succeeded)
    assert first.output == second.output
    assert keys_charged(simpay) == ["ai_1"]
    assert len(simpay.ledger.calls()) == 2


@pytest.mark.parametrize("mode", ["slow-after-charge", "garbage", "reset-after-charge"])
def test_a_recall_with_the_key_after_an_unknown_outcome_finds_the_charge(simpay: SimPay, payer: SimPayAdapter,
                                                                        mode: str) -> None:
    """What an idempotent recovery does: the same key again after an unknown outcome, one charge in all."""
    unknown = payer.execute(charge("ai_1", mode))
    assert interpret_reply(unknown).verdict == StepVerdict.AMBIGUOUS
    recovered = payer.execute(charge("ai_1"))
    assert isinstance(recovered, Succeeded)
    [made] = simpay.ledger.charges()
    assert recovered.output["id"] == made["id"]


def test_a_replay_is_marked(simpay: SimPay) -> None:
    body = {"amount": 500, "currency": "eur"}
    first = httpx.post(f"{simpay.url}/v1/charges", json=body, headers={"Idempotency-Key": "k"})
    second = httpx.post(f"{simpay.url}/v1/charges", json=body, headers={"Idempotency-Key": "k"})
    assert "Idempotent-Replayed" not in first.headers
    assert second.headers["Idempotent-Replayed"] == "true"
    assert first.json() == second.json()


def test_the_same_key_with_other_parameters_is_a_409_and_charges_nothing(simpay: SimPay,
                                                                        payer: SimPayAdapter) -> None:
    assert isinstance(payer.execute(charge("ai_1", amount=500)), Succeeded)
    raw = httpx.post(f"{simpay.url}/v1/charges", json={"amount": 900, "currency": "eur"},
                     headers={"Idempotency-Key": "ai_1"})
    assert raw.status_code == 409
    assert raw.json()["error"]["type"] == "idempotency_error"
    result = payer.execute(charge("ai_1", amount=900))
    assert isinstance(result, Ambiguous), result  # a 409 may be about our own earlier attempt (ADR 0028)
    assert [c["amount"] for c in simpay.ledger.charges()] == [500]


def test_without_a_key_every_request_charges(simpay: SimPay) -> None:
    for _ in range(2):
        assert httpx.post(f"{simpay.url}/v1/charges", json={"amount": 500, "currency": "eur"}).status_code == 200
    assert keys_charged(simpay) == [None, None]


def test_concurrent_requests_with_one_key_make_one_charge(simpay: SimPay) -> None:
    answers: list[str] = []

    def post() -> None:
        response = httpx.post(f"{simpay.url}/v1/charges", json={"amount": 500, "currency": "eur"},
                              headers={"Idempotency-Key": "ai_race"}, timeout=30)
        answers.append(response.json()["id"])

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 8 and len(set(answers)) == 1
    assert keys_charged(simpay) == ["ai_race"]


@pytest.mark.parametrize(("body", "headers"), [
    ({"amount": 0, "currency": "eur"}, {}),
    ({"amount": "5", "currency": "eur"}, {}),
    ({"amount": True, "currency": "eur"}, {}),
    ({"amount": 5, "currency": "euro"}, {}),
    ([1, 2], {}),
    ({"amount": 5, "currency": "eur"}, {"X-SimPay-Mode": "explode"}),
    ({"amount": 5, "currency": "eur"}, {"X-SimPay-Mode": "flaky"}),  # flaky needs a key to count
])
def test_invalid_requests_are_400_and_charge_nothing(simpay: SimPay, body: object, headers: dict[str, str]) -> None:
    response = httpx.post(f"{simpay.url}/v1/charges", json=body, headers=headers)
    assert response.status_code == 400, response.text
    assert simpay.ledger.charges() == []


def test_lookup_by_key(simpay: SimPay, payer: SimPayAdapter) -> None:
    made = payer.execute(charge("ai_1", "reset-after-charge"))
    assert isinstance(made, Ambiguous)
    found = payer.execute(AdapterCall("ai_lookup", "lookup", {"key": "ai_1"}))
    assert isinstance(found, Succeeded)
    assert found.output["id"] == simpay.ledger.charges()[0]["id"]
    missing = payer.execute(AdapterCall("ai_lookup", "lookup", {"key": "ai_other"}))
    assert isinstance(missing, PermanentFailure) and "404" in missing.reason


def test_the_ledger_endpoint_lists_charges_payouts_and_calls(simpay: SimPay, payer: SimPayAdapter) -> None:
    payer.execute(charge("ai_1"))
    payer.execute(charge("ai_2", "decline"))
    ledger = httpx.get(f"{simpay.url}/_ledger").json()
    assert [c["idempotency_key"] for c in ledger["charges"]] == ["ai_1"]
    assert ledger["payouts"] == []
    assert [(c["idempotency_key"], c["mode"]) for c in ledger["calls"]] == [("ai_1", "ok"), ("ai_2", "decline")]


def test_a_payout_is_accepted_with_its_id_once_per_key(simpay: SimPay, payer: SimPayAdapter) -> None:
    first = payer.execute(charge("ai_p", operation="payout"))
    second = payer.execute(charge("ai_p", operation="payout"))
    assert isinstance(first, Accepted) and isinstance(second, Accepted)
    [payout] = simpay.ledger.payouts()
    assert first.external_reference == second.external_reference == payout["id"]
    assert payout["status"] == "pending" and payout["id"].startswith("po_")
    assert interpret_reply(first).verdict == StepVerdict.ACCEPTED
    assert simpay.ledger.charges() == []


def test_a_settled_payout_sends_a_signed_webhook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Delivered straight to the receiver, signed, even with a (dead) proxy in the environment."""
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed_port()}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    received: list[tuple[bytes, str]] = []
    with loopback_server(reply(204)) as receiver, SimPay(
            tmp_path / "ledger.db", webhook_url=f"{receiver.url}/webhooks/simpay", webhook_secret="s3cret") as sp:
        po = httpx.post(f"{sp.url}/v1/payouts", json={"amount": 700, "currency": "eur"},
                        headers={"Idempotency-Key": "ai_p"}, trust_env=False).json()
        assert sp.settle_payout(po["id"], "paid") == 204
        [request] = receiver.received
        headers = {name.lower(): value for name, value in request.headers.items()}
        received.append((request.body, headers[SIGNATURE_HEADER.lower()]))
        assert sp.ledger.payouts()[0]["status"] == "paid"
    body, signature = received[0]
    event = json.loads(body)
    assert event["type"] == "payout.paid" and event["data"]["id"] == po["id"]
    assert verify_webhook("s3cret", signature, body)
    assert not verify_webhook("other", signature, body)
    assert not verify_webhook("s3cret", signature, body.replace(b"700", b"701"))
    assert not verify_webhook("s3cret", signature, body, now=time.time() + 3600)  # an old replay


def test_a_signature_is_hmac_sha256_over_timestamp_and_body() -> None:
    import hashlib
    import hmac

    expected = hmac.new(b"k", b"1700000000.{}", hashlib.sha256).hexdigest()
    assert sign_webhook("k", 1_700_000_000, b"{}") == f"t=1700000000,v1={expected}"


def test_a_webhook_url_needs_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="secret"):
        SimPay(tmp_path / "ledger.db", webhook_url="http://127.0.0.1:1/")


@pytest.mark.slow
def test_the_simpay_adapter_ignores_proxy_settings(simpay: SimPay, monkeypatch: pytest.MonkeyPatch) -> None:
    """SimPay is on loopback: a proxy from the environment must not stand between the demo and it."""
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed_port()}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with SimPayAdapter(simpay.url) as a:
        assert isinstance(a.execute(charge("ai_1")), Succeeded)
    assert keys_charged(simpay) == ["ai_1"]


def test_in_its_own_process_the_ledger_outlives_the_provider(tmp_path: Path) -> None:
    """``python -m fencepost.demo.simpay``: charge through it, stop it, read its ledger file from here, start it
    again on the same file, and the key still answers the first charge (no second charge)."""
    ledger_path = tmp_path / "ledger.db"
    ids = []
    for run in range(2):
        process = start_piped(["--port", "0", "--ledger", str(ledger_path)], stderr_path=tmp_path / f"err{run}",
                              env=subprocess_env(), argv_prefix=[sys.executable, "-m", "fencepost.demo.simpay"])
        try:
            url = process.expect(r"simpay listening on (http://127\.0\.0\.1:\d+)").group(1)
            with SimPayAdapter(url) as a:
                result = a.execute(charge("ai_1"))
            assert isinstance(result, Succeeded), result
            ids.append(result.output["id"])
            assert [c["id"] for c in httpx.get(f"{url}/_ledger").json()["charges"]] == [ids[0]]
        finally:
            assert process.stop(signal.SIGTERM) == 0, process.stderr
    assert ids[0] == ids[1]
    assert [c["id"] for c in Ledger(ledger_path).charges()] == [ids[0]]
    assert len(Ledger(ledger_path).calls()) == 2


# ── payout webhooks by mode (issue 14): what SimPay sends, how it retries, what its ledger keeps ──

def answers(*replies: tuple[int, bytes]) -> Any:
    """A receiver behaviour that answers the n-th request with the n-th of ``replies`` (the last one after)."""
    from helpers.loopback_http import Loopback

    def behave(handler: Any, server: Loopback) -> None:
        status, body = replies[min(len(server.received), len(replies)) - 1]
        reply(status, body, {"Content-Type": "application/json"})(handler, server)

    return behave


SETTLED = (200, b'{"disposition": "settled"}')
ABSORBED = (200, b'{"disposition": "absorbed"}')
CONTRADICTED = (200, b'{"disposition": "contradicted"}')
NOT_YET = (404, b'{"type": "https://fencepost.dev/problems/unknown-reference"}')
PARKING = (409, b'{"type": "https://fencepost.dev/problems/still-executing"}')
SECRET = "a-webhook-secret-of-32-characters!"


def payout(provider: SimPay, mode: str, key: str = "ai_p") -> dict[str, Any]:
    made: dict[str, Any] = httpx.post(f"{provider.url}/v1/payouts", json={"amount": 700, "currency": "eur"},
                                      headers={"Idempotency-Key": key, "X-SimPay-Mode": mode},
                                      trust_env=False).json()
    return made


@pytest.mark.parametrize(("mode", "replies", "sent", "taken", "status"), [
    ("webhook", (SETTLED,), ["payout.paid"], [("payout.paid", "settled")], "paid"),
    ("webhook-twice", (SETTLED, ABSORBED), ["payout.paid", "payout.paid"],
     [("payout.paid", "settled"), ("payout.paid", "absorbed")], "paid"),
    ("webhook-contradict", (SETTLED, CONTRADICTED), ["payout.paid", "payout.failed"],
     [("payout.paid", "settled"), ("payout.failed", "contradicted")], "failed"),
    ("webhook-never", (SETTLED,), [], [], "pending"),
    # fencepost's "later" answers (the webhook outran the handoff, then the parking) are retried until taken
    ("webhook", (NOT_YET, PARKING, SETTLED), ["payout.paid"] * 3, [("payout.paid", "settled")], "paid"),
], ids=["once", "twice", "contradict", "never", "retried-until-taken"])
def test_each_payout_mode_delivers_its_webhooks(tmp_path: Path, mode: str, replies: tuple[tuple[int, bytes], ...],
                                                sent: list[str], taken: list[tuple[str, str]], status: str) -> None:
    from fencepost.api import signatures

    with loopback_server(answers(*replies)) as receiver, SimPay(
            tmp_path / "ledger.db", webhook_url=f"{receiver.url}/hook", webhook_secret=SECRET,
            webhook_delay_seconds=0.0, webhook_retry_seconds=0.05) as sp:
        po = payout(sp, mode)
        assert po["status"] == "pending"
        assert sp.wait_for_webhooks(10)
        time.sleep(0.2 if not sent else 0)  # "never" must still be nothing after a while
        events = [json.loads(r.body) for r in receiver.received]
        assert [e["type"] for e in events] == sent
        assert all(e["data"]["id"] == po["id"] for e in events)
        for request in receiver.received:  # signed as ADR 0036 says: fencepost's own verifier accepts it
            header = {k.lower(): v for k, v in request.headers.items()}["fencepost-signature"]
            assert signatures.refusal(header, request.body, [SECRET], now=time.time()) is None
            assert signatures.refusal(header, request.body, ["another-secret-of-32-characters!!"],
                                      now=time.time()) == "mismatch"
        if mode == "webhook-twice":
            assert receiver.received[0].body == receiver.received[1].body  # the same body again
        log = sp.ledger.webhooks(po["id"])
        assert [w["attempt"] for w in log] == ([1, 2, 3] if len(replies) == 3 else [1] * len(sent))
        assert [(w["type"], w["answer"]) for w in log if w["answer_status"] == 200] == taken
        assert [w["answer"] for w in log if w["answer_status"] != 200] == (
            ["unknown-reference", "still-executing"] if len(replies) == 3 else [])
        made = sp.ledger.find("payout", record_id=po["id"])
        assert made is not None and made["status"] == status


def test_a_replayed_payout_schedules_no_second_webhook(tmp_path: Path) -> None:
    with loopback_server(answers(SETTLED)) as receiver, SimPay(
            tmp_path / "ledger.db", webhook_url=f"{receiver.url}/hook", webhook_secret=SECRET,
            webhook_delay_seconds=0.0) as sp:
        first, second = payout(sp, "webhook"), payout(sp, "webhook")
        assert sp.wait_for_webhooks(10)
        time.sleep(0.2)
    assert first["id"] == second["id"] and len(sp.ledger.payouts()) == 1
    assert len(receiver.received) == 1


def test_a_webhook_nobody_takes_is_given_up_after_its_attempts(tmp_path: Path) -> None:
    """A refusal that is not "later" (here a 401) is retried like any non-2xx, and the ledger keeps each one;
    the next event of the plan is never sent."""
    with loopback_server(answers((401, b'{"type": "x/invalid-signature"}'))) as receiver, SimPay(
            tmp_path / "ledger.db", webhook_url=f"{receiver.url}/hook", webhook_secret=SECRET,
            webhook_delay_seconds=0.0, webhook_retry_seconds=0.01, webhook_attempts=3) as sp:
        po = payout(sp, "webhook-twice")
        assert sp.wait_for_webhooks(10)
    assert [(w["attempt"], w["answer_status"], w["answer"]) for w in sp.ledger.webhooks(po["id"])] == [
        (1, 401, "invalid-signature"), (2, 401, "invalid-signature"), (3, 401, "invalid-signature")]
    assert len(receiver.received) == 3


def test_a_webhook_mode_on_a_charge_is_refused(simpay: SimPay, payer: SimPayAdapter) -> None:
    result = payer.execute(charge("ai_1", "webhook-twice"))
    assert isinstance(result, PermanentFailure), result
    assert simpay.ledger.charges() == []


def test_simpays_webhook_parser_maps_its_events() -> None:
    from fencepost.core.errors import InvalidInput
    from fencepost.demo.simpay_adapter import SimPayWebhookParser

    parser = SimPayWebhookParser()
    data = {"id": "po_1", "status": "paid", "amount": 700, "currency": "eur", "created_at": "t"}
    paid = parser.parse(json.dumps({"type": "payout.paid", "data": data}).encode(), {})
    assert (paid.external_reference, str(paid.outcome)) == ("po_1", "completed")
    assert paid.result == {"payout": {"id": "po_1", "status": "paid", "amount": 700, "currency": "eur"}}
    failed = parser.parse(json.dumps({"type": "payout.failed", "data": {**data, "status": "failed"}}).encode(), {})
    assert (str(failed.outcome), failed.error) == ("failed", "SimPay: payout po_1 failed")
    for bad in (b"[]", b"not json", b'{"type": "payout.paid"}', b'{"type": "charge.x", "data": {"id": "po_1"}}'):
        with pytest.raises(InvalidInput):
            parser.parse(bad, {})
