"""``POST /v1/host/completions/{provider}`` (host-spec N, §2.6, §1.Y-14; ADR 0036) over a real SQLite store and a
real host: a parked payout settles from a signed callback; every refused signature is one 401 that leaves the store
byte-for-byte as it was; a replay inside the window is absorbed; the receipt's dispositions map to 200, 404 and 409;
an unparsable body is 422; schemathesis fuzzes the endpoint with signed and unsigned requests."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from api.conftest import AUTH, TOKEN, assert_problem
from fencepost.api import create_app
from fencepost.api.completions import CompletionProvider
from fencepost.api.signatures import parse_header, refusal, sign, signature
from fencepost.core.clock import ManualClock
from fencepost.core.statuses import InvocationStatus
from fencepost.host import Accepted, Action, AdapterStep, Host, Inline, RetryPolicy, Succeeded
from fencepost.host.webhooks import CompletionFields
from fencepost.store import Store, open_store
from fencepost.store.faults import FaultInjectingStore
from host.kit import PARAMS, Ledger, Params, Scripted, Spy, make_host

VENDOR = "simpay-test"  # the vendor of host.kit's Scripted adapter
SECRET = "whsec_test_secret_0123456789"
OTHER_SECRET = "whsec_other_secret_9876543210"
NOW = 1_767_225_600  # the signature clock of these apps: 2026-01-01T00:00:00Z
PATH = f"/v1/host/completions/{VENDOR}"
ROOT = Path(__file__).resolve().parents[2]


def payout_action(steps: tuple[str, ...] = ("payout",)) -> Action:
    from datetime import timedelta

    return Action(id="shop.charge", version=1, params=Params, handler=Spy(), completion_deadline=timedelta(hours=1),
                  steps=tuple(AdapterStep(name=s, adapter="pay", operation="payout",
                                          retry=RetryPolicy(max_attempts=1, initial=timedelta(0))) for s in steps))


def accepted(reference: str) -> Any:
    return lambda call: Accepted(reference, {"status": "pending"})


class VendorParser:
    """A vendor-shaped webhook: ``{"id": ..., "status": "paid"|"reversed", "amount": ...}``."""

    def parse(self, body: bytes, headers: Mapping[str, str]) -> CompletionFields:
        data = json.loads(body)
        outcome = {"paid": "completed", "reversed": "failed"}[data["status"]]
        return CompletionFields(data["id"], outcome, result={"settled_amount": data["amount"]}, error=None)


@dataclass
class Callbacks:
    """One app with a host over one SQLite database."""

    db_path: Path
    store: Store
    host: Host
    ledger: Ledger
    client: TestClient
    now: list[float]

    def park(self, reference: str = "po_1", key: str = "k1") -> str:
        """An inline payout that the provider accepted as ``reference``: parked, running, no lease."""
        self.host.runtime.adapters["pay"].script.append(accepted(reference))
        view = self.host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=key, mode=Inline())
        stored = self.record(view.id)
        assert stored.parked_at is not None and stored.status is InvocationStatus.RUNNING, stored
        return view.id

    def post(self, body: bytes, *, header: str | None = "sign", provider: str = VENDOR, secret: str = SECRET,
             timestamp: int = NOW, extra: dict[str, str] | None = None) -> Any:
        headers = {"Content-Type": "application/json", **(extra or {})}
        if header == "sign":
            headers["Fencepost-Signature"] = sign(secret, timestamp, body)
        elif header is not None:
            headers["Fencepost-Signature"] = header
        return self.client.post(f"/v1/host/completions/{provider}", content=body, headers=headers)

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table, read with plain sqlite3 (the WAL included)."""
        conn = sqlite3.connect(self.db_path)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}
        finally:
            conn.close()

    def record(self, invocation_id: str) -> Any:
        """The stored invocation row (its handoff columns included)."""
        return self.store.read(lambda tx: tx.host.get_invocation(invocation_id))

    def status(self, invocation_id: str) -> InvocationStatus:
        return self.host.get(invocation_id).status


def build(tmp_path: Path, *, steps: tuple[str, ...] = ("payout",), providers: Any = None, migrate: bool = True,
          script: tuple[Any, ...] = ()) -> Iterator[Callbacks]:
    db_path = tmp_path / "control.db"
    store = open_store(f"sqlite:///{db_path}", clock=ManualClock())
    if migrate:
        store.migrate()
    ledger = Ledger()
    host = make_host(store, payout_action(steps), Scripted(ledger, *script))
    now = [float(NOW)]
    app = create_app(store, api_token=TOKEN, host=host, on_work=lambda: None,
                     completion_providers=providers if providers is not None else {VENDOR: SECRET},
                     signature_clock=lambda: now[0])
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Callbacks(db_path, store, host, ledger, client, now)
    store.close()


@pytest.fixture
def cb(tmp_path: Path) -> Iterator[Callbacks]:
    yield from build(tmp_path)


def completion(reference: str = "po_1", outcome: str = "completed", **extra: Any) -> bytes:
    return json.dumps({"external_reference": reference, "outcome": outcome, **extra}).encode()


# ── settling ──
def test_a_signed_completion_settles_the_parked_invocation(cb: Callbacks) -> None:
    invocation_id = cb.park()
    response = cb.post(completion(result={"payout_id": "p-9"}))
    assert response.status_code == 200, response.text
    assert response.json() == {"disposition": "settled", "invocation_id": invocation_id, "status": "succeeded",
                               "detail": "settled"}
    view = cb.host.get(invocation_id)
    assert view.status is InvocationStatus.SUCCEEDED and view.result["payout_id"] == "p-9"


def test_a_failed_completion_settles_failed(cb: Callbacks) -> None:
    invocation_id = cb.park()
    response = cb.post(completion(outcome="failed", error="the bank refused"))
    assert response.status_code == 200 and response.json()["status"] == "failed", response.text
    assert cb.host.get(invocation_id).error == "the bank refused"


def test_a_contradiction_is_200_contradicted_and_needs_an_operator(cb: Callbacks) -> None:
    """ADR 0036: the host took it (reconciliation_required, the first completion kept): 200, so the provider stops
    re-sending; a 409 would be retried forever."""
    invocation_id = cb.park()
    assert cb.post(completion()).status_code == 200
    response = cb.post(completion(outcome="failed", error="reversed"))
    assert response.status_code == 200, response.text
    assert response.json()["disposition"] == "contradicted"
    assert response.json()["status"] == "reconciliation_required"
    assert cb.status(invocation_id) is InvocationStatus.RECONCILIATION_REQUIRED


def test_the_bearer_token_is_neither_needed_nor_enough(cb: Callbacks) -> None:
    cb.park()
    assert_problem(cb.post(completion(), header=None, extra=AUTH), 401, "invalid-signature")
    assert cb.post(completion(), extra={}).status_code == 200  # signed, no bearer token


# ── refused signatures ──
BODY = completion(result={"payout_id": "p-9"})
REFUSALS: dict[str, dict[str, Any]] = {
    "wrong secret": {"secret": OTHER_SECRET},
    "stale timestamp": {"timestamp": NOW - 301},
    "future timestamp beyond the window": {"timestamp": NOW + 301},
    "missing header": {"header": None},
    "empty header": {"header": ""},
    "no timestamp": {"header": "v1=" + signature(SECRET, NOW, BODY)},
    "two timestamps": {"header": f"t={NOW},t={NOW},v1={signature(SECRET, NOW, BODY)}"},
    "timestamp not digits": {"header": f"t=+{NOW},v1={signature(SECRET, NOW, BODY)}"},
    "no v1": {"header": f"t={NOW},v0={signature(SECRET, NOW, BODY)}"},
    "garbage": {"header": "definitely not a signature"},
    "signature of another timestamp": {"header": f"t={NOW},v1={signature(SECRET, NOW - 1, BODY)}"},
    "signature of the body without the timestamp": {
        "header": f"t={NOW},v1=" + __import__("hmac").new(SECRET.encode(), BODY, "sha256").hexdigest()},
    "unknown provider": {"provider": "another-vendor"},
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_a_refused_signature_is_401_and_leaves_nothing_but_a_log_line(cb: Callbacks, case: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    cb.park()
    before = cb.dump()
    with caplog.at_level(logging.INFO, logger="fencepost.api"):
        response = cb.post(BODY, **REFUSALS[case])
    body = assert_problem(response, 401, "invalid-signature")
    assert response.headers["www-authenticate"] == "Fencepost-Signature"
    assert cb.dump() == before
    refused = [r for r in caplog.records if getattr(r, "event", None) == "completion_refused"]
    assert len(refused) == 1 and [r for r in caplog.records if r.name == "fencepost.api"] == refused
    # one answer for every check: the body never says which one failed
    assert body["detail"] == cb.post(BODY, header=None).json()["detail"]
    assert SECRET not in caplog.text and signature(SECRET, NOW, BODY) not in caplog.text


def test_a_body_altered_after_signing_is_refused(cb: Callbacks) -> None:
    invocation_id = cb.park()
    before = cb.dump()
    header = sign(SECRET, NOW, BODY)
    altered = BODY.replace(b"p-9", b"p-8")
    response = cb.client.post(PATH, content=altered, headers={"Fencepost-Signature": header})
    assert_problem(response, 401, "invalid-signature")
    reformatted = json.dumps(json.loads(BODY), indent=2).encode()  # the same JSON, other bytes: still refused
    assert_problem(cb.client.post(PATH, content=reformatted, headers={"Fencepost-Signature": header}), 401,
                   "invalid-signature")
    assert cb.dump() == before and cb.status(invocation_id) is InvocationStatus.RUNNING
    assert cb.client.post(PATH, content=BODY, headers={"Fencepost-Signature": header}).status_code == 200


def test_the_window_is_inclusive_and_follows_the_clock(cb: Callbacks) -> None:
    cb.park()
    assert cb.post(BODY, timestamp=NOW - 300).json()["disposition"] == "settled"
    assert cb.post(BODY, timestamp=NOW + 300).json()["disposition"] == "absorbed"
    cb.now[0] = NOW + 1000  # the server's clock moved on: the same signed request is now stale
    assert_problem(cb.post(BODY, timestamp=NOW), 401, "invalid-signature")


def test_a_replay_inside_the_window_is_processed_again_and_absorbed(cb: Callbacks) -> None:
    """ADR 0036: no nonce store; the byte-identical request has the digest of the recorded completion."""
    invocation_id = cb.park()
    header = sign(SECRET, NOW, BODY)
    first = cb.client.post(PATH, content=BODY, headers={"Fencepost-Signature": header})
    assert first.json()["disposition"] == "settled"
    after_first = cb.dump()
    replay = cb.client.post(PATH, content=BODY, headers={"Fencepost-Signature": header})
    assert replay.status_code == 200 and replay.json() == {**first.json(), "disposition": "absorbed",
                                                           "detail": "an identical completion is recorded"}
    assert cb.dump() == after_first and cb.status(invocation_id) is InvocationStatus.SUCCEEDED


def test_rotation_old_and_new_secrets(tmp_path: Path) -> None:
    """A provider that rotates signs with both secrets (two v1); a server that rotates accepts either."""
    for cb in build(tmp_path, providers={VENDOR: CompletionProvider((OTHER_SECRET, SECRET))}):
        cb.park()
        both = sign([OTHER_SECRET + "-retired", SECRET], NOW, BODY)
        assert parse_header(both) is not None and len(parse_header(both).signatures) == 2  # type: ignore[union-attr]
        assert cb.post(BODY, header=both).json()["disposition"] == "settled"
        assert cb.post(BODY, secret=OTHER_SECRET).json()["disposition"] == "absorbed"
        assert_problem(cb.post(BODY, secret=OTHER_SECRET + "-retired"), 401, "invalid-signature")


# ── the receipt's answers ──
def test_an_unknown_reference_is_404_and_records_nothing(cb: Callbacks) -> None:
    """N33: the provider retries; its retry after the handoff settles it."""
    before = cb.dump()
    body = assert_problem(cb.post(completion("po_1")), 404, "unknown-reference")
    assert "retry" in body["detail"]
    assert cb.dump() == before
    cb.park("po_1")
    assert cb.post(completion("po_1")).json()["disposition"] == "settled"


def test_an_unparked_running_invocation_is_409_still_executing(tmp_path: Path) -> None:
    """N4: the callback for step one arrives while step two runs: 409 still-executing, nothing written; the retry
    after parking settles."""
    answers: list[Any] = []
    box: list[Callbacks] = []

    def step_two(call: Any) -> Any:
        answers.append((box[0].post(completion()), box[0].dump()))
        return Succeeded({"sent": True})

    for cb in build(tmp_path, steps=("payout", "notify"), script=(accepted("po_1"), step_two)):
        box.append(cb)
        before = cb.dump()
        view = cb.host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
        [(response, during)] = answers
        assert_problem(response, 409, "still-executing")
        assert during != before  # the handoff itself was durable when the callback came
        stored = cb.record(view.id)
        assert stored.external_completion is None and stored.parked_at is not None
        assert cb.post(completion()).json()["disposition"] == "settled"


def test_two_invocations_holding_one_reference_is_409_conflict(cb: Callbacks) -> None:
    cb.park("po_1", key="k1")
    cb.park("po_1", key="k2")
    before = cb.dump()
    assert_problem(cb.post(completion("po_1")), 409, "conflict")
    assert cb.dump() == before


def test_an_unmigrated_store_is_503_after_the_signature(tmp_path: Path) -> None:
    for cb in build(tmp_path, migrate=False):
        assert_problem(cb.post(completion(), header=None), 401, "invalid-signature")
        assert_problem(cb.post(completion()), 503, "schema-not-ready")


def test_a_store_failure_is_503_records_nothing_and_the_retry_settles(cb: Callbacks) -> None:
    """The verdict's write fails inside the decision's transaction: rolled back, 503 ``unavailable`` (the provider
    retries); the retry settles."""
    invocation_id = cb.park()
    faulty = FaultInjectingStore(cb.store, query="lock_unleased_invocation", nth=1)
    host = make_host(faulty, payout_action(), Scripted(cb.ledger))
    app = create_app(cb.store, api_token=TOKEN, host=host, completion_providers={VENDOR: SECRET},
                     signature_clock=lambda: float(NOW))
    before = cb.dump()
    with TestClient(app, raise_server_exceptions=False) as client:
        headers = {"Fencepost-Signature": sign(SECRET, NOW, BODY)}
        assert_problem(client.post(PATH, content=BODY, headers=headers), 503, "unavailable")
        assert cb.dump() == before
        assert client.post(PATH, content=BODY, headers=headers).json()["disposition"] == "settled"
    assert cb.status(invocation_id) is InvocationStatus.SUCCEEDED


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b'"po_1"', b'{"external_reference": "po_1"}',
                                 b'{"external_reference": "po_1", "outcome": "maybe"}',
                                 b'{"external_reference": "", "outcome": "completed"}',
                                 b'{"external_reference": "po_1", "outcome": "completed", "result": [1]}',
                                 b'{"external_reference": "po_1", "outcome": "completed", "invocation_id": "x"}',
                                 b'\xff\xfe'], ids=repr)
def test_an_unparsable_signed_body_is_422_and_records_nothing(cb: Callbacks, raw: bytes) -> None:
    cb.park()
    before = cb.dump()
    assert_problem(cb.post(raw), 422, "invalid-input")
    assert cb.dump() == before


def test_a_vendor_parser_maps_its_webhook(tmp_path: Path) -> None:
    for cb in build(tmp_path, providers={VENDOR: CompletionProvider((SECRET,), VendorParser())}):
        invocation_id = cb.park("po_7")
        assert_problem(cb.post(b'{"id": "po_7", "status": "lost"}'), 422, "invalid-input")  # KeyError
        assert_problem(cb.post(b'{"id": "po_7"'), 422, "invalid-input")  # ValueError (broken JSON)
        assert_problem(cb.post(completion("po_7")), 422, "invalid-input")  # fencepost's own shape: not this vendor's
        response = cb.post(b'{"id": "po_7", "status": "paid", "amount": 1299}')
        assert response.json()["disposition"] == "settled", response.text
        assert cb.host.get(invocation_id).result["settled_amount"] == 1299


def test_configuration_is_checked(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}", clock=ManualClock())
    try:
        with pytest.raises(ValueError, match="need the host"):
            create_app(store, api_token=TOKEN, completion_providers={VENDOR: SECRET})
        with pytest.raises(ValueError, match="16"):
            CompletionProvider(("short",))
        with pytest.raises(ValueError, match="window"):
            create_app(store, api_token=TOKEN, signature_window_seconds=0)
    finally:
        store.close()


# ── the signature scheme ──
def test_the_documented_example_signature_is_right() -> None:
    """docs/api.md's worked example (computed there with openssl) is what the server computes."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    secret = re.search(r"^SECRET='([^']+)'$", text, re.M)
    timestamp = re.search(r"^T=(\d+)$", text, re.M)
    body = re.search(r"^BODY='([^']+)'$", text, re.M)
    expected = re.search(r"^# -> ([0-9a-f]{64})$", text, re.M)
    assert secret and timestamp and body and expected, "the worked example is missing from docs/api.md"
    assert signature(secret[1], int(timestamp[1]), body[1].encode()) == expected[1]


@pytest.mark.parametrize("value", ["t=1,v1=ab", " t=1 , v1=AB ", "v1=ab,t=1,v0=zz,extra=1"])
def test_parse_header_accepts_any_order_case_and_unknown_schemes(value: str) -> None:
    assert parse_header(value) is not None and parse_header(value).timestamp == 1  # type: ignore[union-attr]
    assert parse_header(value).signatures == ("ab",)  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [None, "", "t=1", "v1=ab", "t=1,t=2,v1=ab", "t=x,v1=ab", "t=-1,v1=ab",
                                   "t=١,v1=ab", "t=1;v1=ab", "t=1,v1", "t=1," + ",".join(["v1=ab"] * 9),
                                   "t=1,v1=" + "a" * 3000, "t=" + "9" * 13 + ",v1=ab"])
def test_parse_header_refuses_malformed_headers(value: str | None) -> None:
    assert parse_header(value) is None


def test_refusal_reasons() -> None:
    body = b"{}"
    good = sign(SECRET, NOW, body)
    assert refusal(good, body, [SECRET], now=NOW) is None
    assert refusal(None, body, [SECRET], now=NOW) == "missing"
    assert refusal("t=1", body, [SECRET], now=NOW) == "malformed"
    assert refusal(good, body, [SECRET], now=NOW + 301) == "stale"
    assert refusal(good, body, [SECRET], now=NOW + 30, window_seconds=29) == "stale"
    assert refusal(good, body + b" ", [SECRET], now=NOW) == "mismatch"
    assert refusal(good, body, [OTHER_SECRET], now=NOW) == "mismatch"
    assert refusal(good, body, [OTHER_SECRET, SECRET], now=NOW) is None


# ── OpenAPI and fuzzing ──
def test_the_openapi_document_describes_the_signature_not_the_bearer_token(cb: Callbacks) -> None:
    doc = cb.client.get("/openapi.json").json()
    operation = doc["paths"]["/v1/host/completions/{provider}"]["post"]
    assert operation["security"] == [{"completionSignature": []}]
    scheme = doc["components"]["securitySchemes"]["completionSignature"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "Fencepost-Signature")
    assert set(operation["responses"]) >= {"200", "401", "404", "409", "422", "503"}
    assert operation["requestBody"]["content"]["application/json"]["schema"]["required"] == [
        "external_reference", "outcome"]


def _fuzz_app() -> FastAPI:
    import atexit
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="fencepost-fuzz-completions-"))
    atexit.register(shutil.rmtree, tmp, True)
    store = open_store(f"sqlite:///{tmp / 'fuzz.db'}", clock=ManualClock())
    store.migrate()
    atexit.register(store.close)
    ledger = Ledger()
    host = make_host(store, payout_action(), Scripted(ledger, *[accepted(f"po_{i}") for i in range(3)]))
    for i in range(3):  # parked handoffs, so that some generated references can settle
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=f"fuzz-{i}", mode=Inline())
    return create_app(store, api_token=TOKEN, host=host, completion_providers={VENDOR: SECRET},
                      signature_clock=lambda: float(NOW))


fuzz_schema = schemathesis.openapi.from_asgi("/openapi.json", _fuzz_app()).include(
    path="/v1/host/completions/{provider}")


@fuzz_schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_the_completion_endpoint_signed_and_unsigned(case: schemathesis.Case) -> None:
    """No 500, and every answer matches the documented status, content type and schema. Most cases are signed as
    the provider would sign them (the bytes sent are the bytes signed); the rest keep their generated provider and
    no signature (401)."""
    # Only a positive case may name a parked handoff: a negative one rewritten to a valid body would be accepted
    # while schemathesis still expects its refusal (CI saw a 200 for a case it had generated with an empty reference).
    negative = case.meta is not None and case.meta.generation.mode is GenerationMode.NEGATIVE
    if not negative and isinstance(case.body, dict) and isinstance(case.body.get("external_reference"), str) and \
            len(repr(case.body)) % 3 == 0:
        case.body = {**case.body, "external_reference": "po_0"}  # a parked handoff: settled, then absorbed or not
    raw = json.dumps(case.body).encode() if isinstance(case.body, (dict, list, str, int, float, bool)) else b"null"
    signed = len(raw) % 4 != 0  # (schemathesis also drops the declared signature header from some cases: 401)
    headers = {"Content-Type": "application/json"}
    if signed:
        case.path_parameters = {"provider": VENDOR}
        headers["Fencepost-Signature"] = sign(SECRET, NOW, raw)
    # positive_data_acceptance is left out: a schema-valid body may name no handoff (404) or a settled one.
    response = case.call_and_validate(headers=headers, data=raw, json=None,
                                      excluded_checks=[positive_data_acceptance])
    assert response.status_code != 500
    if not signed:
        assert response.status_code != 200, response.text
