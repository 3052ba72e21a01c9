"""HttpAdapter against real HTTP servers on loopback: one case per row of its classification table (host-spec
§2.3, F14, F18), each also read by ``interpret_reply`` to the step verdict the host will act on."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from fencepost.host.adapter import (
    Accepted,
    AdapterCall,
    Ambiguous,
    PermanentFailure,
    Succeeded,
    TimedOut,
    TransientFailure,
)
from fencepost.host.http_adapter import HttpAdapter, HttpOperation, HttpTimeouts
from fencepost.host.outcome import StepVerdict, interpret_reply
from helpers.loopback_http import (
    Behaviour,
    NeverReads,
    close_without_answer,
    closed_port,
    full_backlog,
    loopback_server,
    not_http,
    reply,
    reset_connection,
    sleep_then,
)

OPERATIONS = {
    "charge": HttpOperation("/v1/charges"),
    "refund": HttpOperation("/v1/refunds", idempotent=True),
    "lookup": HttpOperation("/v1/charges", method="GET", idempotent=True),
    "payout": HttpOperation("/v1/payouts"),
}
FAST = HttpTimeouts(connect=0.5, write=0.5, read=0.5, pool=0.5)


def adapter(url: str, timeouts: HttpTimeouts = FAST) -> HttpAdapter:
    return HttpAdapter(url, vendor="testpay", operations=OPERATIONS, timeouts=timeouts)


def call(operation: str = "charge", **input_: object) -> AdapterCall:
    return AdapterCall(adapter_invocation_id="ai_step_1", operation=operation,
                       input=dict(input_) or {"amount": 500, "currency": "eur"})


def js(value: object) -> bytes:
    return json.dumps(value).encode()


def run(behaviour: Behaviour, operation: str = "charge") -> tuple[object, int]:
    """The reply to one call against a server behaving so, and how many requests the server read."""
    with loopback_server(behaviour) as server, adapter(server.url) as a:
        result = a.execute(call(operation))
        return result, len(server.received)


HTTP_ROWS = [
    # (case, behaviour, operation, reply type, step verdict)
    ("200 with a JSON object", reply(200, js({"id": "ch_1"})), "charge", Succeeded, StepVerdict.SUCCEEDED),
    ("201 with a JSON object", reply(201, js({"id": "ch_1"})), "charge", Succeeded, StepVerdict.SUCCEEDED),
    ("204 without a body", reply(204), "charge", Succeeded, StepVerdict.SUCCEEDED),
    ("200 with a JSON array", reply(200, b"[]"), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("200 with JSON null", reply(200, b"null"), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("200 with text", reply(200, b"charged!"), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("200 with an empty body", reply(200), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("202 with an id", reply(202, js({"id": "po_1", "status": "pending"})), "payout", Accepted,
     StepVerdict.ACCEPTED),
    ("202 with a Location", reply(202, b"", {"Location": "/v1/payouts/po_2"}), "payout", Accepted,
     StepVerdict.ACCEPTED),
    ("202 without a reference", reply(202, js({"status": "pending"})), "payout", Ambiguous,
     StepVerdict.AMBIGUOUS),
    ("402 decline", reply(402, js({"error": {"message": "card declined"}})), "charge", PermanentFailure,
     StepVerdict.FAILED),
    ("400 invalid", reply(400, js({"error": "amount must be positive"})), "charge", PermanentFailure,
     StepVerdict.FAILED),
    ("404 on an idempotent endpoint", reply(404, b"no such charge"), "lookup", PermanentFailure,
     StepVerdict.FAILED),
    ("409 idempotency conflict", reply(409, js({"error": {"message": "key reused"}})), "charge", Ambiguous,
     StepVerdict.AMBIGUOUS),
    ("429 with Retry-After", reply(429, b"slow down", {"Retry-After": "2"}), "charge", TransientFailure,
     StepVerdict.RETRY),
    ("429 without Retry-After", reply(429), "charge", TransientFailure, StepVerdict.RETRY),
    ("408 request timeout", reply(408), "charge", TransientFailure, StepVerdict.RETRY),
    ("503 with Retry-After", reply(503, b"", {"Retry-After": "1"}), "charge", TransientFailure,
     StepVerdict.RETRY),
    ("503 without Retry-After", reply(503), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("500", reply(500, b"boom"), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("502", reply(502), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("504 gateway timeout", reply(504), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("500 on an idempotent endpoint", reply(500), "refund", TransientFailure, StepVerdict.RETRY),
    ("503 without Retry-After on an idempotent endpoint", reply(503), "refund", TransientFailure,
     StepVerdict.RETRY),
    ("a redirect", reply(303, b"", {"Location": "/elsewhere"}), "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("closed after reading the request", close_without_answer, "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("reset after reading the request", reset_connection, "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("a reply that is not HTTP", not_http, "charge", Ambiguous, StepVerdict.AMBIGUOUS),
    ("sleeps past the read timeout", sleep_then(3.0, reply(200, js({"id": "ch_late"}))), "charge", TimedOut,
     StepVerdict.AMBIGUOUS),
]


@pytest.mark.parametrize(("behaviour", "operation", "kind", "verdict"),
                         [pytest.param(*row[1:], id=row[0]) for row in HTTP_ROWS])
def test_classification_table(behaviour: Behaviour, operation: str, kind: type, verdict: StepVerdict) -> None:
    result, requests = run(behaviour, operation)
    assert type(result) is kind, result
    assert interpret_reply(result).verdict == verdict
    assert requests == 1


def test_success_output_is_the_json_body() -> None:
    result, _ = run(reply(200, js({"id": "ch_1", "amount": 500})))
    assert result == Succeeded(output={"id": "ch_1", "amount": 500})


def test_uninterpretable_body_says_so() -> None:
    result, _ = run(reply(200, b"[]"))
    assert isinstance(result, Ambiguous)
    assert result.reason.startswith("uninterpretable reply")
    assert "JSON array" in result.reason
    assert interpret_reply(result).reason == result.reason


def test_decline_carries_the_provider_error_text() -> None:
    result, _ = run(reply(402, js({"error": {"message": "card declined", "code": "card_declined"}})))
    assert isinstance(result, PermanentFailure)
    assert "402" in result.reason and "card declined" in result.reason
    assert result.sent is True  # the provider answered: authoritative, even for a re-send


def test_accepted_carries_the_reference_and_the_body() -> None:
    result, _ = run(reply(202, js({"id": "po_1", "status": "pending"})), "payout")
    assert result == Accepted(external_reference="po_1", output={"id": "po_1", "status": "pending"})


@pytest.mark.parametrize(("header", "expected"), [("7", 7.0), ("soon", None)])
def test_retry_after_in_seconds(header: str, expected: float | None) -> None:
    result, _ = run(reply(429, b"", {"Retry-After": header}))
    assert isinstance(result, TransientFailure)
    assert result.retry_after == expected


def test_retry_after_as_an_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    result, _ = run(reply(503, b"", {"Retry-After": when}))
    assert isinstance(result, TransientFailure)
    assert result.retry_after is not None and 100 < result.retry_after <= 120


def test_an_unreadable_retry_after_on_503_is_not_a_retry() -> None:
    result, _ = run(reply(503, b"", {"Retry-After": "later, maybe"}))
    assert isinstance(result, Ambiguous)


def test_sends_input_as_json_and_the_step_id_as_idempotency_key() -> None:
    with loopback_server(reply(200, js({"id": "ch_1"}))) as server, adapter(server.url) as a:
        a.execute(AdapterCall(adapter_invocation_id="ai_42", operation="charge",
                              input={"amount": 500, "currency": "eur", "meta": {"order": 7}}))
    [request] = server.received
    assert (request.method, request.path) == ("POST", "/v1/charges")
    assert request.headers["Idempotency-Key"] == "ai_42"
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.body) == {"amount": 500, "currency": "eur", "meta": {"order": 7}}


def test_a_get_operation_sends_its_input_as_query_parameters() -> None:
    with loopback_server(reply(200, js({"id": "ch_1"}))) as server, adapter(server.url) as a:
        a.execute(AdapterCall(adapter_invocation_id="ai_7", operation="lookup", input={"key": "ai_6"}))
    [request] = server.received
    assert (request.method, request.path, request.body) == ("GET", "/v1/charges?key=ai_6", b"")
    assert request.headers["Idempotency-Key"] == "ai_7"


def test_subclass_headers_are_sent_and_cannot_replace_the_key() -> None:
    class Moded(HttpAdapter):
        def headers(self, call: AdapterCall) -> dict[str, str]:
            return {"X-Mode": "flaky", "Idempotency-Key": "forged"}

    with loopback_server(reply(200, js({}))) as server, Moded(
            server.url, vendor="testpay", operations=OPERATIONS, timeouts=FAST) as a:
        a.execute(call())
    [request] = server.received
    assert request.headers["X-Mode"] == "flaky"
    assert request.headers["Idempotency-Key"] == "ai_step_1"


def test_connect_refused_is_a_transient_failure_with_nothing_sent() -> None:
    with adapter(f"http://127.0.0.1:{closed_port()}") as a:
        result = a.execute(call())
    assert isinstance(result, TransientFailure), result
    assert result.reason.startswith("nothing sent")
    assert interpret_reply(result).verdict == StepVerdict.RETRY


def test_dns_failure_is_a_transient_failure() -> None:
    with adapter("http://no-such-host.invalid") as a:
        result = a.execute(call())
    assert isinstance(result, TransientFailure), result
    assert interpret_reply(result).verdict == StepVerdict.RETRY


def test_connect_timeout_is_a_transient_failure() -> None:
    with full_backlog() as port, adapter(f"http://127.0.0.1:{port}",
                                          HttpTimeouts(connect=0.3, write=0.3, read=0.3, pool=0.3)) as a:
        result = a.execute(call())
    assert isinstance(result, TransientFailure), result
    assert "ConnectTimeout" in result.reason


def test_write_timeout_is_timed_out() -> None:
    """A request too large for the socket buffers of a server that never reads: the write stalls mid-request."""
    with NeverReads() as server, adapter(f"http://127.0.0.1:{server.port}",
                                         HttpTimeouts(connect=1, write=0.3, read=0.3, pool=1)) as a:
        result = a.execute(call(amount=500, memo="x" * 32_000_000))
    assert isinstance(result, TimedOut), result
    assert interpret_reply(result).verdict == StepVerdict.AMBIGUOUS


def test_read_timeout_reason_names_the_timeout() -> None:
    result, _ = run(sleep_then(3.0, reply(200, js({}))))
    assert isinstance(result, TimedOut)
    assert "ReadTimeout" in result.reason


def test_an_expired_deadline_sends_nothing_and_fails() -> None:
    with loopback_server(reply(200, js({"id": "ch_1"}))) as server, adapter(server.url) as a:
        result = a.execute(AdapterCall("ai_1", "charge", {"amount": 1}, deadline=time.monotonic() - 0.001))
    assert isinstance(result, PermanentFailure)
    assert "deadline" in result.reason and result.reason.startswith("no request sent")
    assert result.sent is False  # reached nothing: never denies an earlier attempt's call (ADR 0113)
    assert interpret_reply(result).verdict == StepVerdict.FAILED and interpret_reply(result).sent is False
    assert server.received == []


def test_the_deadline_bounds_the_read_timeout() -> None:
    """Read timeout 30 s, deadline 0.3 s away, a server answering after 2 s: the deadline wins."""
    slow = sleep_then(2.0, reply(200, js({"id": "ch_1"})))
    with loopback_server(slow) as server, adapter(server.url, HttpTimeouts(read=30)) as a:
        result = a.execute(AdapterCall("ai_1", "charge", {"amount": 1}, deadline=time.monotonic() + 0.3))
    assert isinstance(result, TimedOut), result
    assert len(server.received) == 1


def test_an_unknown_operation_sends_nothing_and_fails() -> None:
    with loopback_server(reply(200, js({}))) as server, adapter(server.url) as a:
        result = a.execute(call("capture"))
    assert isinstance(result, PermanentFailure) and result.sent is False
    assert server.received == []


def test_input_that_is_not_json_sends_nothing_and_fails() -> None:
    with loopback_server(reply(200, js({}))) as server, adapter(server.url) as a:
        result = a.execute(AdapterCall("ai_1", "charge", {"amount": float("nan")}))
    assert isinstance(result, PermanentFailure) and result.sent is False
    assert result.reason.startswith("no request sent")
    assert server.received == []


def test_a_base_url_that_is_not_http_sends_nothing_and_fails() -> None:
    with adapter("ftp://127.0.0.1:21") as a:
        result = a.execute(call())
    assert isinstance(result, PermanentFailure) and result.sent is False, result
    assert result.reason.startswith("no request sent")


def test_a_body_past_the_limit_is_ambiguous() -> None:
    big = js({"pad": "x" * 5000})
    with loopback_server(reply(200, big)) as server, HttpAdapter(
            server.url, vendor="testpay", operations=OPERATIONS, timeouts=FAST, max_response_bytes=1000) as a:
        result = a.execute(call())
    assert isinstance(result, Ambiguous)
    assert "larger than 1000 bytes" in result.reason


def test_a_closed_adapter_sends_nothing() -> None:
    with loopback_server(reply(200, js({}))) as server:
        a = adapter(server.url)
        a.close()
        result = a.execute(call())
    assert isinstance(result, TransientFailure)
    assert server.received == []


@pytest.mark.parametrize(("keep_alive", "idle"), [(False, 0), (True, 1)])
def test_no_idle_connection_is_kept_by_default(keep_alive: bool, idle: int) -> None:
    """By default each call opens its own connection, so none is written on a connection the server is closing;
    ``keep_alive=True`` keeps it (which proves the server here would have allowed reuse)."""
    with loopback_server(reply(200, js({})), protocol="HTTP/1.1") as server, HttpAdapter(
            server.url, vendor="testpay", operations=OPERATIONS, timeouts=FAST, keep_alive=keep_alive) as a:
        assert isinstance(a.execute(call()), Succeeded)
        assert isinstance(a.execute(call()), Succeeded)
        pool = a._client._transport._pool
        assert len(pool.connections) == idle
    assert len(server.received) == 2


def test_no_cookie_is_carried_to_the_next_call() -> None:
    with loopback_server(reply(200, js({}), {"Set-Cookie": "session=abc; Path=/"})) as server, \
            adapter(server.url) as a:
        a.execute(call())
        a.execute(call())
    assert [r.headers.get("Cookie") for r in server.received] == [None, None]


def test_it_is_an_adapter() -> None:
    from fencepost.host.adapter import Adapter

    a = adapter("http://127.0.0.1:1")
    assert isinstance(a, Adapter)
    assert (a.type, a.vendor) == ("http", "testpay")
    a.close()
