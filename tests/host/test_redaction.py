"""The redaction hooks (host-spec Q, F19, N28, N29, §1.Y-18; ADR 0042), on every backend: each hook runs once
where its value originates, every later use carries the redacted value, a failing hook never lets the raw value
through, and the end-to-end leak test finds no planted secret in the database files, a PostgreSQL dump, the logs,
the CLI or the API."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel
from typer.testing import CliRunner

import fencepost
from fencepost.api import create_app
from fencepost.api.signatures import sign
from fencepost.cli.app import app as cli
from fencepost.core.errors import IdempotencyConflict, IntegrityViolation, InvalidInput
from fencepost.core.statuses import (
    AdapterStatus,
    CompletionDisposition,
    CompletionOutcome,
    InvocationStatus,
    ReconciliationKind,
)
from fencepost.host import (
    WITHHELD,
    Accepted,
    Action,
    AdapterStep,
    Ambiguous,
    DecisionRequired,
    ErrorSource,
    ErrorTextContext,
    Host,
    HostConfig,
    Inline,
    PermanentFailure,
    Redaction,
    RedactionFailed,
    RetryPolicy,
    StepInputContext,
    Succeeded,
)
from fencepost.host.action import HandlerContext
from fencepost.host.completion import FIXED_FAILURE, Completion
from fencepost.host.http_adapter import HttpAdapter, HttpOperation, HttpTimeouts
from fencepost.host.idempotency import params_digest
from fencepost.host.redaction import WITHHELD_ERROR_TEXT
from fencepost.store.base import Store
from helpers.loopback_http import Loopback, loopback_server
from helpers.store_backends import StoreBackend, postgres_url, schema_url
from host.kit import Crash, Ledger, Scripted, events_of, run_worker

ROOT = Path(__file__).resolve().parents[2]
REDACTED = "[redacted]"
SECRETS = {
    "params": "sk_params_4b1e9d",
    "input": "sk_input_72c0da",
    "output": "sk_output_9a3f1e",
    "handler": "sk_handler_e5d27b",
    "provider": "sk_provider_1c8b44",
    "result": "sk_result_6f2a03",
    "completion_error": "sk_cerror_d09e3c",
}
NO_RETRY = RetryPolicy(max_attempts=1, initial=timedelta(0))


class CardParams(BaseModel):
    order_id: str
    amount_cents: int
    card_token: str


CARD = {"order_id": "o-1", "amount_cents": 1299, "card_token": SECRETS["params"]}


def _clean(value: Any) -> Any:
    text = json.dumps(value)
    for secret in SECRETS.values():
        text = text.replace(secret, REDACTED)
    return json.loads(text)


@dataclass
class Scrub:
    """The five hooks, each replacing every planted secret with ``[redacted]`` and recording its calls."""

    calls: dict[str, list[tuple[Any, ...]]] = field(default_factory=lambda: defaultdict(list))
    withhold: bool = False

    def params(self, action_id: str, params: dict[str, Any]) -> dict[str, Any]:
        self.calls["params"].append((action_id, params))
        return dict(_clean(params))

    def input(self, action_id: str, adapter_type: str, operation: str, value: dict[str, Any]) -> dict[str, Any]:
        self.calls["input"].append((action_id, adapter_type, operation, value))
        return dict(_clean(value))

    def output(self, action_id: str, adapter_type: str, operation: str, value: dict[str, Any]) -> Any:
        self.calls["output"].append((action_id, adapter_type, operation, value))
        return WITHHELD if self.withhold else _clean(value)

    def error(self, context: ErrorTextContext, message: str) -> str:
        self.calls["error"].append((context, message))
        return str(_clean(message))

    def completion(self, action_id: str, provider: str, result: dict[str, Any]) -> dict[str, Any]:
        self.calls["completion"].append((action_id, provider, result))
        return dict(_clean(result))

    def redaction(self) -> Redaction:
        return Redaction(redact_action_parameters=self.params, redact_adapter_input=self.input,
                         redact_adapter_output=self.output, redact_error_text=self.error,
                         redact_external_completion_result=self.completion)


def _handler(ctx: HandlerContext, params: CardParams) -> dict[str, Any]:
    if params.order_id == "boom":
        raise RuntimeError(f"the vault refused key {SECRETS['handler']}")
    if params.order_id == "decide":
        raise DecisionRequired(f"manual review of {SECRETS['handler']}")
    if params.order_id == "emit":
        ctx.emit("OrderNoted", {"note": SECRETS["params"]})
    return {"reserved": params.order_id}


def _input(ctx: StepInputContext, params: CardParams) -> dict[str, Any]:
    if params.order_id == "bad-input":
        raise ValueError(f"no key for {SECRETS['input']}")
    return {"amount_cents": params.amount_cents, "order_id": params.order_id, "api_key": SECRETS["input"],
            "earlier": ctx.outputs}


def action(*steps: str, deadline: timedelta | None = None, idempotent: bool = False, adapter: str = "pay",
           operation: str = "create_charge", action_id: str = "shop.charge") -> Action:
    return Action(id=action_id, version=1, params=CardParams, handler=_handler, idempotent=idempotent,
                  completion_deadline=deadline,
                  steps=tuple(AdapterStep(name=s, adapter=adapter, operation=operation, retry=NO_RETRY, input=_input)
                              for s in steps or ("charge",)))


DIGEST_KEY = b"q9-test-params-digest-key-32bytes"  # ADR 0053: a params hook needs a keyed digest


def host_of(store: Store, act: Action, *adapters: Any, redaction: Redaction | None = None,
            lease: float = 30.0) -> Host:
    return Host(store, actions=[act], adapters=adapters, redaction=redaction,
                config=HostConfig(lease_seconds=lease, params_digest_key=DIGEST_KEY))


def card(order_id: str = "o-1") -> dict[str, Any]:
    return {**CARD, "order_id": order_id}


def stored(store: Store, invocation_id: str) -> Any:
    return store.read(lambda tx: tx.host.get_invocation(invocation_id))


def records(store: Store, invocation_id: str) -> list[Any]:
    return store.read(lambda tx: tx.host.list_reconciliations(invocation_id))


# ── Q1: params ──

def test_params_redacted_before_persist(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """Q1, §1.Y-9: the stored params (and what the worker's handler runs on) are the redacted ones; the digest is
    the unredacted params', so a replay with the same params returns the invocation; the hook runs once."""
    scrub = Scrub()
    seen: list[str] = []

    def handler(ctx: HandlerContext, params: CardParams) -> dict[str, Any]:
        seen.append(params.card_token)
        return {}

    act = Action(id="shop.charge", version=1, params=CardParams, handler=handler,
                 steps=(AdapterStep(name="charge", adapter="pay", operation="create_charge", retry=NO_RETRY),))
    host = host_of(store, act, Scripted(ledger), redaction=scrub.redaction())
    queued = host.submit("shop.charge", CARD, actor="u1", idempotency_key="k")
    record = stored(store, queued.id)
    assert record.params["card_token"] == REDACTED and queued.params["card_token"] == REDACTED
    assert record.params_digest == params_digest(CARD, key=DIGEST_KEY)  # keyed, over the unredacted params
    assert scrub.calls["params"] == [("shop.charge", CARD)]
    assert host.submit("shop.charge", CARD, actor="u1", idempotency_key="k").id == queued.id
    assert run_worker(host, backend) == 1
    assert seen == [REDACTED]
    assert host.get(queued.id).status is InvocationStatus.SUCCEEDED


def test_a_params_hook_needs_a_digest_key(store: Store, ledger: Ledger) -> None:
    """ADR 0053, §1.Y-9: a host with a params hook and no ``params_digest_key`` is refused at construction, since
    its stored digest would be a plain SHA-256 of the very params the hook hides."""
    with pytest.raises(InvalidInput, match="params_digest_key"):
        Host(store, actions=[action()], adapters=[Scripted(ledger)], redaction=Scrub().redaction())
    with pytest.raises(InvalidInput, match="at least 16"):
        HostConfig(params_digest_key=b"short")
    assert DIGEST_KEY.decode() not in repr(HostConfig(params_digest_key=DIGEST_KEY))  # a secret: never shown
    # a host without a params hook keeps the unkeyed digest it always had
    plain = Host(store, actions=[action()], adapters=[Scripted(ledger)])
    assert stored(store, plain.submit("shop.charge", card(), actor="u1", idempotency_key="plain").id
                  ).params_digest == params_digest(card())


def test_the_keyed_digest_gives_no_card_number_back(store: Store, ledger: Ledger) -> None:
    """ADR 0053: the stored digest of the unredacted params is ``hk1`` (HMAC-SHA-256 under the host's key), so
    trying every card number against it without the key finds nothing, while replays still compare exactly:
    the same params return the invocation, other params conflict, another key cannot confirm them, and a
    host with no key says it needs one."""
    host = host_of(store, action(), Scripted(ledger), redaction=Scrub().redaction())
    queued = host.submit("shop.charge", card(), actor="u1", idempotency_key="k")
    digest = stored(store, queued.id).params_digest
    assert digest.startswith("hk1:") and digest != params_digest(card())  # the unkeyed brute force misses
    assert host.submit("shop.charge", card(), actor="u1", idempotency_key="k").id == queued.id
    with pytest.raises(IdempotencyConflict) as other_params:
        host.submit("shop.charge", card("o-2"), actor="u1", idempotency_key="k")
    assert other_params.value.field == "parameters"
    rekeyed = Host(store, actions=[action()], adapters=[Scripted(ledger)], redaction=Scrub().redaction(),
                   config=HostConfig(params_digest_key=b"another-key-of-32-bytes-long-000"))
    with pytest.raises(IdempotencyConflict):
        rekeyed.submit("shop.charge", card(), actor="u1", idempotency_key="k")
    keyless = Host(store, actions=[action()], adapters=[Scripted(ledger)])
    with pytest.raises(IntegrityViolation, match="params_digest_key"):
        keyless.submit("shop.charge", card(), actor="u1", idempotency_key="k")


def test_params_hook_failure_stores_nothing(store: Store, ledger: Ledger) -> None:
    """Q1, ADR 0042: a raising hook, or one whose params no longer validate, refuses the submission; the
    message never quotes what the hook raised."""
    def raising(action_id: str, params: dict[str, Any]) -> dict[str, Any]:
        raise KeyError(SECRETS["params"])

    def dropping(action_id: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"order_id": params["order_id"]}

    for hook in (raising, dropping):
        host = host_of(store, action(), Scripted(ledger), redaction=Redaction(redact_action_parameters=hook))
        with pytest.raises(RedactionFailed) as refused:
            host.submit("shop.charge", CARD, actor="u1", idempotency_key="k", mode=Inline())
        assert SECRETS["params"] not in str(refused.value)
    assert host.list() == [] and ledger.requests == []


# ── Q2: adapter input ──

def test_adapter_input_redacted_in_row(store: Store, ledger: Ledger) -> None:
    """Q2: the provider is sent the input itself; the row and AdapterInvocationSucceeded keep the redacted one."""
    scrub = Scrub()
    adapter = Scripted(ledger)
    host = host_of(store, action(), adapter, redaction=Redaction(redact_adapter_input=scrub.input))
    view = host.submit("shop.charge", card(), actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.SUCCEEDED
    assert adapter.calls[0].input["api_key"] == SECRETS["input"]
    [row] = store.read(lambda tx: tx.host.list_adapter_invocations(view.id))
    assert row.input["api_key"] == REDACTED
    [event] = [e for e in events_of(store, view.id) if e.type == "AdapterInvocationSucceeded"]
    assert event.payload["input"] == row.input
    assert [c[:3] for c in scrub.calls["input"]] == [("shop.charge", "pay", "create_charge")]


def test_adapter_input_resend_recomputes_input(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """ADR 0042: a recovered idempotent step whose row holds the redacted input re-sends the recomputed input
    (the provider never receives ``[redacted]``)."""
    scrub = Scrub()
    adapter = Scripted(ledger, Crash("the process dies during the call"))
    host = host_of(store, action(idempotent=True), adapter, redaction=Redaction(redact_adapter_input=scrub.input),
                   lease=backend.short_lease)
    with pytest.raises(Crash):
        host.submit("shop.charge", card(), actor="u1", idempotency_key="k", mode=Inline())
    backend.expire()
    assert run_worker(host, backend) == 1
    [invocation] = host.list()
    assert host.get(invocation.id).status is InvocationStatus.SUCCEEDED
    assert [c.input["api_key"] for c in adapter.calls] == [SECRETS["input"], SECRETS["input"]]
    assert host.get(invocation.id).steps[0].output is not None


def test_adapter_input_hook_failure_fails_before_the_row(store: Store, ledger: Ledger) -> None:
    """ADR 0042: a raising input hook fails the step before its row is written and before any provider call."""
    def raising(action_id: str, adapter_type: str, operation: str, value: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError(value["api_key"])

    adapter = Scripted(ledger)
    host = host_of(store, action(), adapter, redaction=Redaction(redact_adapter_input=raising))
    view = host.submit("shop.charge", card(), actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.FAILED and view.steps == ()
    assert "redact_adapter_input" in (view.error or "") and SECRETS["input"] not in (view.error or "")
    assert adapter.calls == []


# ── Q3, G22, §1.Y-18: adapter output ──

def test_adapter_output_redacted_once_for_all_consumers(store: Store, ledger: Ledger) -> None:
    """Q3: the hook runs once per successful result; the row, AdapterInvocationSucceeded, the next step's input
    and the invocation result all carry the same redacted output."""
    scrub = Scrub()
    adapter = Scripted(ledger, Succeeded({"charge_id": "ch_1", "card": SECRETS["output"]}))
    host = host_of(store, action("charge", "notify"), adapter, redaction=Redaction(redact_adapter_output=scrub.output))
    view = host.submit("shop.charge", card(), actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.SUCCEEDED
    # once per step's successful result: the charge's, then the notify step's
    assert [c[:3] for c in scrub.calls["output"]] == [("shop.charge", "pay", "create_charge")] * 2
    assert scrub.calls["output"][0][3] == {"charge_id": "ch_1", "card": SECRETS["output"]}
    redacted = {"charge_id": "ch_1", "card": REDACTED}
    charge = view.steps[0]
    [event] = [e for e in events_of(store, view.id)
               if e.type == "AdapterInvocationSucceeded" and e.payload["step"] == "charge"]
    assert charge.output == event.payload["output"] == view.result["steps"]["charge"] == redacted
    assert adapter.calls[1].input["earlier"] == {"charge": redacted}


def test_handoff_accepted_output_redacted(store: Store, ledger: Ledger) -> None:
    """Q3: redaction comes before handoff handling: the handoff's accepted_output and the marker are redacted."""
    scrub = Scrub()
    adapter = Scripted(ledger, lambda call: Accepted("po_1", {"status": "pending", "note": SECRETS["output"]}))
    host = host_of(store, action(deadline=timedelta(hours=1)), adapter,
                   redaction=Redaction(redact_adapter_output=scrub.output))
    view = host.submit("shop.charge", card(), actor="u1", idempotency_key="k", mode=Inline())
    record = stored(store, view.id)
    assert record.parked_at is not None
    assert record.pending_completion["accepted_output"] == {"status": "pending", "note": REDACTED}
    assert view.steps[0].output == {"status": "pending", "note": REDACTED}
    assert len(scrub.calls["output"]) == 1


@pytest.mark.parametrize("how", ["withheld", "raises"])
def test_withheld_output_ends_applied_effect(store: Store, ledger: Ledger, how: str) -> None:
    """§1.Y-18, L5, ADR 0042: a withheld output (or a raising output hook) stores no output: the marker, the
    event (``output_withheld``) and the applied-effect record commit with a ``reconciliation_required``
    verdict; the next step never runs."""
    def raising(action_id: str, adapter_type: str, operation: str, value: dict[str, Any]) -> Any:
        raise RuntimeError(value["card"])

    hook = Scrub(withhold=True).output if how == "withheld" else raising
    adapter = Scripted(ledger, Succeeded({"charge_id": "ch_1", "card": SECRETS["output"]}))
    host = host_of(store, action("charge", "notify"), adapter, redaction=Redaction(redact_adapter_output=hook))
    view = host.submit("shop.charge", card(), actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert view.reconciliation is not None and view.reconciliation["kind"] == str(ReconciliationKind.APPLIED_EFFECT)
    assert [(s.name, s.status, s.output) for s in view.steps] == [("charge", AdapterStatus.SUCCEEDED, None)]
    [event] = [e for e in events_of(store, view.id) if e.type == "AdapterInvocationSucceeded"]
    assert event.payload["output_withheld"] is True and event.payload["output"] is None
    assert [r.kind for r in records(store, view.id)] == [ReconciliationKind.APPLIED_EFFECT]
    assert len(adapter.calls) == 1 and SECRETS["output"] not in json.dumps(view.as_json())


# ── Q4, Q5, F19: error text ──

def test_error_text_redacted_at_origin_everywhere(store: Store, ledger: Ledger) -> None:
    """Q4, F19: a provider's decline and an ambiguity reason are redacted where the reply is classified; the
    invocation error, the row error, the step and verdict events, the reconciliation record and the returned
    view all carry that one text."""
    scrub = Scrub()
    adapter = Scripted(ledger, PermanentFailure(f"declined for {SECRETS['provider']}"),
                       Ambiguous(f"reset after sending {SECRETS['provider']}"))
    host = host_of(store, action(), adapter, redaction=Redaction(redact_error_text=scrub.error))
    failed = host.submit("shop.charge", card(), actor="u1", idempotency_key="k1", mode=Inline())
    unknown = host.submit("shop.charge", card(), actor="u1", idempotency_key="k2", mode=Inline())
    assert failed.status is InvocationStatus.FAILED
    assert unknown.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert f"declined for {REDACTED}" in (failed.error or "")
    assert failed.steps[0].error == f"declined for {REDACTED}"
    assert f"reset after sending {REDACTED}" in (unknown.error or "")
    texts = [json.dumps(e.payload) for v in (failed, unknown) for e in events_of(store, v.id)]
    texts += [json.dumps(r.payload) for r in records(store, unknown.id)]
    texts += [json.dumps(host.get(v.id).as_json()) for v in (failed, unknown)]
    assert any(REDACTED in t for t in texts)
    assert not any(SECRETS["provider"] in t for t in texts)
    assert [c[1] for c in scrub.calls["error"]] == [f"declined for {SECRETS['provider']}",
                                                    f"reset after sending {SECRETS['provider']}"]


def test_handler_error_and_hook_failure(store: Store, ledger: Ledger) -> None:
    """Q4: a handler's exception and ``DecisionRequired`` reason are redacted at their origin; a raising error
    hook records Host's fixed text instead (ADR 0042)."""
    scrub = Scrub()
    host = host_of(store, action(), Scripted(ledger), redaction=Redaction(redact_error_text=scrub.error))
    boom = host.submit("shop.charge", card("boom"), actor="u1", idempotency_key="k1", mode=Inline())
    decide = host.submit("shop.charge", card("decide"), actor="u1", idempotency_key="k2", mode=Inline())
    assert boom.error == f"handler: RuntimeError: the vault refused key {REDACTED}"
    assert decide.error == f"handler: manual review of {REDACTED}"
    assert decide.status is InvocationStatus.RECONCILIATION_REQUIRED

    def raising(context: ErrorTextContext, message: str) -> str:
        raise ValueError(message)

    host = host_of(store, action(), Scripted(ledger), redaction=Redaction(redact_error_text=raising))
    view = host.submit("shop.charge", card("boom"), actor="u1", idempotency_key="k3", mode=Inline())
    assert view.error == f"handler: {WITHHELD_ERROR_TEXT}"


def test_error_context_sources(store: Store, ledger: Ledger) -> None:
    """Q5: each source is observed where its text arises: ``handler``, ``adapter`` (with type, operation, vendor
    and adapter invocation id), ``execution`` (a failing step input) and ``external_completion``."""
    scrub = Scrub()
    adapter = Scripted(ledger, PermanentFailure("declined"), lambda call: Accepted("po_1", {}))
    host = host_of(store, action(deadline=timedelta(hours=1)), adapter,
                   redaction=Redaction(redact_error_text=scrub.error))
    host.submit("shop.charge", card("boom"), actor="u1", idempotency_key="k1", mode=Inline())
    declined = host.submit("shop.charge", card(), actor="u1", idempotency_key="k2", mode=Inline())
    host.submit("shop.charge", card("bad-input"), actor="u1", idempotency_key="k3", mode=Inline())
    parked = host.submit("shop.charge", card(), actor="u1", idempotency_key="k4", mode=Inline())
    host.complete("simpay-test", "po_1", "failed", error="the bank refused")
    contexts = {c.source: c for c, _ in scrub.calls["error"]}
    assert list(contexts) == [ErrorSource.HANDLER, ErrorSource.ADAPTER, ErrorSource.EXECUTION,
                              ErrorSource.EXTERNAL_COMPLETION]
    assert contexts[ErrorSource.HANDLER] == ErrorTextContext("shop.charge", ErrorSource.HANDLER)
    assert contexts[ErrorSource.ADAPTER] == ErrorTextContext(
        "shop.charge", ErrorSource.ADAPTER, "pay", "create_charge", "simpay-test",
        declined.steps[0].adapter_invocation_id)
    assert contexts[ErrorSource.EXECUTION].adapter_type is None
    completion = contexts[ErrorSource.EXTERNAL_COMPLETION]
    assert (completion.vendor, completion.adapter_invocation_id) == ("simpay-test",
                                                                     parked.steps[0].adapter_invocation_id)


# ── Q6, N28, N29: completions ──

def _parked(store: Store, ledger: Ledger, redaction: Redaction, reference: str = "po_1") -> tuple[Host, str]:
    adapter = Scripted(ledger, lambda call: Accepted(reference, {"status": "pending"}))
    host = host_of(store, action(deadline=timedelta(hours=1)), adapter, redaction=redaction)
    view = host.submit("shop.charge", card(), actor="u1", idempotency_key=reference, mode=Inline())
    assert stored(store, view.id).parked_at is not None
    return host, view.id


def test_completion_result_redacted_once_before_digest(store: Store, ledger: Ledger) -> None:
    """N28, Q6: the supplied result is redacted once, after the match and before the digest: the record, its
    digest, the adapter output, ExternalOperationCompleted and the merged result carry the redacted value; an
    identical repeat is absorbed (its redacted digest is equal)."""
    scrub = Scrub()
    host, invocation_id = _parked(store, ledger, Redaction(redact_external_completion_result=scrub.completion))
    supplied = {"payout_id": "po_1", "receipt": SECRETS["result"]}
    receipt = host.complete("simpay-test", "po_1", "completed", result=supplied)
    assert receipt.disposition is CompletionDisposition.SETTLED
    assert scrub.calls["completion"] == [("shop.charge", "simpay-test", supplied)]
    redacted = {"payout_id": "po_1", "receipt": REDACTED}
    record = stored(store, invocation_id)
    assert record.external_completion["result"] == redacted
    assert record.external_completion["digest"] == Completion(
        "simpay-test", "po_1", CompletionOutcome.COMPLETED, redacted).digest
    view = host.get(invocation_id)
    assert view.steps[0].output == redacted and view.result["receipt"] == REDACTED
    [event] = [e for e in events_of(store, invocation_id) if e.type == "ExternalOperationCompleted"]
    assert event.payload["result"] == redacted
    again = host.complete("simpay-test", "po_1", "completed", result=supplied)
    assert again.disposition is CompletionDisposition.ABSORBED


def test_completion_error_redaction_and_fixed_message(store: Store, ledger: Ledger) -> None:
    """N29, Q6: a supplied error goes through the error hook (``external_completion``); a failed completion with
    no error records Host's fixed message, which no hook sees."""
    scrub = Scrub()
    host, invocation_id = _parked(store, ledger, scrub.redaction())
    host.complete("simpay-test", "po_1", "failed", error=f"bank said {SECRETS['completion_error']}",
                  result={"trace": SECRETS["result"]})
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.FAILED and view.error == f"bank said {REDACTED}"
    assert view.external_completion is not None and view.external_completion["result"] == {"trace": REDACTED}
    assert [c.source for c, _ in scrub.calls["error"]] == [ErrorSource.EXTERNAL_COMPLETION]

    host, invocation_id = _parked(store, ledger, scrub.redaction(), "po_2")
    host.complete("simpay-test", "po_2", "failed")
    assert host.get(invocation_id).error == FIXED_FAILURE
    assert len(scrub.calls["error"]) == 1


def test_completion_result_hook_failure_records_nothing(store: Store, ledger: Ledger) -> None:
    """ADR 0042: a raising completion-result hook refuses the callback; the invocation stays parked with nothing
    recorded, so the provider's retry can land once the hook is fixed."""
    def raising(action_id: str, provider: str, result: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError(result["receipt"])

    host, invocation_id = _parked(store, ledger, Redaction(redact_external_completion_result=raising))
    with pytest.raises(RedactionFailed) as refused:
        host.complete("simpay-test", "po_1", "completed", result={"receipt": SECRETS["result"]})
    assert SECRETS["result"] not in str(refused.value)
    record = stored(store, invocation_id)
    assert record.external_completion is None and record.status is InvocationStatus.RUNNING


# ── Q7: domain events ──

def test_domain_events_not_redacted(store: Store, ledger: Ledger) -> None:
    """Q7: the host does not redact the action's own domain events: a payload is stored as given even with every
    hook configured (the application owns their safety), and docs/host.md says so."""
    host = host_of(store, action(), Scripted(ledger), redaction=Scrub().redaction())
    view = host.submit("shop.charge", card("emit"), actor="u1", idempotency_key="k", mode=Inline())
    [event] = [e for e in store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
               if e.type == "OrderNoted"]
    assert view.status is InvocationStatus.SUCCEEDED and event.payload == {"note": SECRETS["params"]}
    docs = (ROOT / "docs" / "host.md").read_text(encoding="utf-8")
    assert "does not redact domain events" in docs


def test_redaction_names_are_exported() -> None:
    """Q5: the hook vocabulary is public from ``fencepost.host`` and ``fencepost``."""
    assert fencepost.Redaction is Redaction and fencepost.ErrorTextContext is ErrorTextContext
    assert fencepost.WITHHELD is WITHHELD and fencepost.ErrorSource is ErrorSource
    assert repr(WITHHELD) == "WITHHELD" and not WITHHELD


# ── Q9: end to end ──

WEBHOOK_SECRET = "whsec_redaction_test_0123456789"
VENDOR = "testpay"


def _provider(handler: BaseHTTPRequestHandler, server: Loopback) -> None:
    """A payment provider on loopback: charges of 402 cents are declined with text quoting the planted secret;
    other charges succeed with an output holding one; payouts are accepted with one in the accepted output."""
    body = json.loads(server.received[-1].body or b"{}")
    if handler.path == "/v1/payouts":
        status, answer = 202, {"id": f"po_{body['order_id']}", "status": "pending", "note": SECRETS["output"]}
    elif body.get("amount_cents") == 402:
        status, answer = 402, {"error": {"type": "card_error", "message": f"card declined: {SECRETS['provider']}"}}
    else:
        status, answer = 200, {"id": "ch_1", "fingerprint": SECRETS["output"]}
    data = json.dumps(answer).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _database_bytes(backend: StoreBackend, tmp_path: Path) -> bytes:
    """The raw database: the SQLite file with its WAL and journal, or a pg_dump of the test's schema."""
    if not backend.is_postgres:
        return b"".join(p.read_bytes() for p in sorted(tmp_path.glob("fencepost.db*")))
    pg_dump = shutil.which("pg_dump") or sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"))[-1]
    assert backend.schema is not None
    dumped = subprocess.run([str(pg_dump), "--no-owner", "-n", backend.schema, "-d", postgres_url()],
                            capture_output=True, timeout=60, check=True)
    assert b"CREATE TABLE" in dumped.stdout
    return dumped.stdout


@pytest.fixture
def provider() -> Iterator[Loopback]:
    with loopback_server(_provider) as server:
        yield server


@pytest.mark.default_backends("sqlite-wal", "postgres")
def test_no_secret_survives_redaction(store: Store, backend: StoreBackend, tmp_path: Path, provider: Loopback,
                                      caplog: pytest.LogCaptureFixture) -> None:
    """Q9: distinct secrets planted in params, adapter input, adapter output, the handler's exception, the
    provider's error text, a completion result and a completion error, with hooks that replace each: none is
    found in the raw database (SQLite file and WAL, or pg_dump), the logs, the CLI or the API."""
    caplog.set_level(logging.DEBUG)
    scrub = Scrub()
    operations = {"charge": HttpOperation("/v1/charges"), "payout": HttpOperation("/v1/payouts")}
    timeouts = HttpTimeouts(connect=2, write=2, read=5, pool=2)
    charge = action(adapter="http", operation="charge")
    payout = action(adapter="http", operation="payout", action_id="shop.payout", deadline=timedelta(hours=1))
    with HttpAdapter(provider.url, vendor=VENDOR, operations=operations, timeouts=timeouts) as http:
        host = Host(store, actions=[charge, payout], adapters=[http], redaction=scrub.redaction(),
                    config=HostConfig(lease_seconds=backend.long_lease, params_digest_key=DIGEST_KEY))
        ok = host.submit("shop.charge", card("o-ok"), actor="u1", idempotency_key="ok")  # by a worker
        assert run_worker(host, backend) == 1
        boom = host.submit("shop.charge", card("boom"), actor="u1", idempotency_key="boom", mode=Inline())
        declined = host.submit("shop.charge", {**card("o-402"), "amount_cents": 402}, actor="u1",
                               idempotency_key="402", mode=Inline())
        paid = host.submit("shop.payout", card("p1"), actor="u1", idempotency_key="p1", mode=Inline())
        refused = host.submit("shop.payout", card("p2"), actor="u1", idempotency_key="p2", mode=Inline())
    ids = [ok.id, boom.id, declined.id, paid.id, refused.id]
    assert [host.get(i).status for i in ids[:3]] == [InvocationStatus.SUCCEEDED, InvocationStatus.FAILED,
                                                     InvocationStatus.FAILED]
    assert SECRETS["input"].encode() in provider.received[0].body  # the provider was sent the real input

    responses: list[str] = []
    app = create_app(store, api_token="t" * 32, host=host, on_work=lambda: None,
                     completion_providers={VENDOR: WEBHOOK_SECRET}, signature_clock=lambda: 1_767_225_600)
    with TestClient(app, raise_server_exceptions=False) as client:
        for body in ({"external_reference": "po_p1", "outcome": "completed",
                      "result": {"receipt": SECRETS["result"]}},
                     {"external_reference": "po_p2", "outcome": "failed", "result": {"trace": SECRETS["result"]},
                      "error": f"bank said {SECRETS['completion_error']}"}):
            data = json.dumps(body).encode()
            answer = client.post(f"/v1/host/completions/{VENDOR}", content=data, headers={
                "Content-Type": "application/json", "Fencepost-Signature": sign(WEBHOOK_SECRET, 1_767_225_600, data)})
            assert answer.status_code == 200, answer.text
            responses.append(answer.text)
        for path in ("/v1/events/outbox", "/v1/events/outbox/summary", "/workers", "/health/ready"):
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.text)
            responses.append(answer.text)
    assert [host.get(i).status for i in ids[3:]] == [InvocationStatus.SUCCEEDED, InvocationStatus.FAILED]
    for name in ("params", "input", "output", "error", "completion"):
        assert scrub.calls[name], f"the {name} hook was never called"
    planted = json.dumps([list(map(str, c)) for calls in scrub.calls.values() for c in calls])
    assert all(secret in planted for secret in SECRETS.values())  # every secret reached its hook

    url = schema_url(backend.schema) if backend.is_postgres else backend.url
    runner = CliRunner()
    outputs = []
    commands = [["host", "list", "--database", url, "--json"], ["events", "list", "--database", url, "--json"],
                *(["host", "show", i, "--database", url, "--json"] for i in ids),
                *(["host", "show", i, "--database", url] for i in ids)]
    for command in commands:
        result = runner.invoke(cli, command)
        assert result.exit_code == 0, (command, result.output)
        outputs.append(result.output)
    assert all(i in "".join(outputs) for i in ids)

    logs = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "invocation status changed" in logs  # the LogTelemetry sink's records are among them
    places = {"database": _database_bytes(backend, tmp_path), "logs": logs.encode(),
              "cli": "\n".join(outputs).encode(), "api": "\n".join(responses).encode()}
    for place, blob in places.items():
        for name, secret in SECRETS.items():
            assert secret.encode() not in blob, f"the {name} secret survives in the {place}"
    assert REDACTED.encode() in places["database"]
