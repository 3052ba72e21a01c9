"""Private result fields (host-spec A16; ADR 0070), on every backend: a field the result schema marks
``json_schema_extra={"private": True}`` may be set by the handler and by a settling completion, but it is never
stored: not in the raw database (the SQLite file and WAL, or a pg_dump), not in ``host.get()``, the events or the
API."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from fencepost.api import create_app
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import CompletionDisposition, InvocationStatus
from fencepost.host import Accepted, Action, AdapterStep, HandlerContext, Inline, RetryPolicy, Succeeded
from fencepost.host.private_fields import strip_private
from fencepost.store.base import Store
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Params, Scripted, events_of, make_host
from host.test_redaction import _database_bytes

VENDOR = "simpay-test"
#: Planted values, one per place a private field can come from; none may be stored anywhere.
MARKS = {"handler": "PRIVATE-handler-9f3a1c", "handler-nested": "PRIVATE-handler-nested-77b2",
         "completion": "PRIVATE-completion-4d8e0b", "completion-nested": "PRIVATE-completion-nested-c5e1"}
#: Public values beside them: the positive control that the same surfaces were really read.
PUBLIC = {"receipt": "RECEIPT-public-61aa", "payout": "PAYOUT-public-0e4f", "charge": "CHARGE-public-3b9d"}


class Receipt(BaseModel):
    number: str
    card_pan: str | None = Field(default=None, json_schema_extra={"private": True})


class PayoutResult(BaseModel):
    reserved: str
    payout_id: str | None = None
    receipt: Receipt | None = None
    steps: dict[str, Any] = {}
    provider_debug: dict[str, Any] | None = Field(default=None, json_schema_extra={"private": True})


def handler(ctx: HandlerContext, params: Params) -> dict[str, Any]:
    return {"reserved": params.order_id, "provider_debug": {"trace": MARKS["handler"]},
            "receipt": {"number": "pending", "card_pan": MARKS["handler-nested"]}}


def payout_action(action_id: str, *, handoff: bool) -> Action:
    return Action(id=action_id, version=1, params=Params, handler=handler, result=PayoutResult,
                  completion_deadline=timedelta(hours=1) if handoff else None,
                  steps=(AdapterStep(name="payout", adapter="pay", operation="payout",
                                     retry=RetryPolicy(max_attempts=1)),))


def test_private_result_fields_never_stored(store: Store, backend: StoreBackend, tmp_path: Path) -> None:
    """A16: the handler sets private fields (top level and nested) on a run that settles at once and on one that
    parks; the completion that settles the parked one sets them again. Neither invocation's row, parked
    result, completion record, adapter rows or events hold them; ``host.get()`` and the API do not show them;
    the public fields beside them are stored and shown."""
    ledger = Ledger()
    now = payout_action("shop.now", handoff=False)
    later = payout_action("shop.later", handoff=True)
    adapter = Scripted(ledger, Succeeded({"id": PUBLIC["charge"]}), Accepted("po_1", {"status": "pending"}))
    host = make_host(store, now, adapter)
    host.actions.register(later)
    settled = host.submit("shop.now", PARAMS, actor="u1", idempotency_key="now", mode=Inline())
    parked = host.submit("shop.later", {**PARAMS, "order_id": "o-2"}, actor="u1", idempotency_key="later",
                         mode=Inline())
    assert host.get(settled.id).status is InvocationStatus.SUCCEEDED
    waiting = store.read(lambda tx: tx.host.get_invocation(parked.id))
    assert waiting.status is InvocationStatus.RUNNING and waiting.parked_at is not None
    assert "provider_debug" not in waiting.pending_completion["result"]
    assert "card_pan" not in waiting.pending_completion["result"]["receipt"]
    receipt = host.complete(VENDOR, "po_1", "completed", result={
        "payout_id": PUBLIC["payout"], "provider_debug": {"raw": MARKS["completion"]},
        "receipt": {"number": PUBLIC["receipt"], "card_pan": MARKS["completion-nested"]}})
    assert receipt.disposition is CompletionDisposition.SETTLED and receipt.status is InvocationStatus.SUCCEEDED

    first, second = host.get(settled.id).result, host.get(parked.id).result
    assert first["reserved"] == "o-1" and first["receipt"] == {"number": "pending"}
    assert second["payout_id"] == PUBLIC["payout"] and second["receipt"] == {"number": PUBLIC["receipt"]}
    assert "provider_debug" not in first and "provider_debug" not in second
    events = repr([(e.type, e.payload) for i in (settled.id, parked.id) for e in events_of(store, i)])
    assert "ExternalOperationCompleted" in events and PUBLIC["payout"] in events
    app = create_app(store, api_token="t" * 32, host=host, on_work=lambda: None)
    with TestClient(app, raise_server_exceptions=False) as client:
        shown = "".join(client.get(f"/v1/host/invocations/{i}").text for i in (settled.id, parked.id))
    assert PUBLIC["payout"] in shown and PUBLIC["receipt"] in shown
    raw = _database_bytes(backend, tmp_path)
    assert PUBLIC["payout"].encode() in raw and PUBLIC["receipt"].encode() in raw
    for where, mark in MARKS.items():
        assert mark not in events, f"the {where} private field is in an event"
        assert mark not in shown, f"the {where} private field is shown by the API"
        assert mark.encode() not in raw, f"the {where} private field is in the {backend.name} database"
        assert mark not in repr(host.get(settled.id)) + repr(host.get(parked.id))


def test_required_private_field_is_refused() -> None:
    """A private field is always absent when the result is validated, so it must have a default."""

    class Bad(BaseModel):
        secret: str = Field(json_schema_extra={"private": True})

    class Outer(BaseModel):
        inner: list[Bad] = []

    for result in (Bad, Outer):
        with pytest.raises(InvalidInput, match="must have a default"):
            Action(id="shop.bad", version=1, params=Params, handler=handler, result=result)


def test_strip_private_walks_nested_models() -> None:
    """Lists and mappings of a nested model lose its private fields too; unknown keys and public values stay."""

    class Line(BaseModel):
        sku: str
        cost: int | None = Field(default=None, json_schema_extra={"private": True})

    class Order(BaseModel):
        lines: list[Line] = []
        by_sku: dict[str, Line] = {}
        note: str | None = None

    data = {"lines": [{"sku": "a", "cost": 3}], "by_sku": {"a": {"sku": "a", "cost": 3}}, "note": "n", "x": 1}
    assert strip_private(Order, data) == {"lines": [{"sku": "a"}], "by_sku": {"a": {"sku": "a"}}, "note": "n",
                                          "x": 1}
    assert data["lines"][0]["cost"] == 3  # the input is not changed
    assert strip_private(None, data) == data and strip_private(Order, None) is None
