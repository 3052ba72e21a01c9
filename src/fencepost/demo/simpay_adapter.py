"""The demo's adapter for SimPay: ``HttpAdapter`` with SimPay's operations and its per-request failure mode.

The step's input may carry ``mode`` (one of ``fencepost.demo.simpay.MODES``). It is sent as the
``X-SimPay-Mode`` header and left out of the body, so a retry in another mode is the same request for the
provider's idempotency check.

A payout answers 202 with its ``po_...`` id, which the adapter returns as ``Accepted(external_reference)``: a
handoff. SimPay's webhook then reaches ``POST /v1/host/completions/simpay`` (``simpay`` is the adapter's
``vendor``), where ``SimPayWebhookParser`` maps SimPay's own event body to a completion.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import CompletionOutcome
from fencepost.demo.simpay import MODE_HEADER
from fencepost.host.adapter import AdapterCall
from fencepost.host.http_adapter import HttpAdapter, HttpOperation, HttpTimeouts
from fencepost.host.webhooks import CompletionFields

VENDOR = "simpay"

#: SimPay's operations: a charge and a payout are not idempotent endpoints (a 5xx is ambiguous); the lookup is.
SIMPAY_OPERATIONS = {
    "charge": HttpOperation("/v1/charges"),
    "payout": HttpOperation("/v1/payouts"),
    "lookup": HttpOperation("/v1/charges", method="GET", idempotent=True),
}


class SimPayAdapter(HttpAdapter):
    """``HttpAdapter`` for a SimPay at ``base_url`` (operations ``charge``, ``payout``, ``lookup``).

    Args:
        base_url: SimPay's URL (``SimPay.url``).
        timeouts: per-phase timeouts; the demo's read timeout is what ``slow-after-charge`` sleeps past.
    """

    def __init__(self, base_url: str, *, timeouts: HttpTimeouts | None = None) -> None:
        super().__init__(base_url, vendor=VENDOR, operations=SIMPAY_OPERATIONS, timeouts=timeouts,
                         trust_env=False)  # SimPay is on loopback: no proxy from the environment

    def headers(self, call: AdapterCall) -> dict[str, str]:
        """The ``X-SimPay-Mode`` of the call's ``mode`` input, when it has one."""
        mode = call.input.get("mode")
        return {MODE_HEADER: mode} if isinstance(mode, str) else {}

    def body(self, call: AdapterCall) -> dict[str, Any]:
        """The call's input without ``mode``."""
        return {key: value for key, value in call.input.items() if key != "mode"}


class SimPayWebhookParser:
    """Maps SimPay's webhook body, ``{"type": "payout.paid" | "payout.failed", "data": {payout}}``, to a completion
    (a ``fencepost.host.webhooks.CompletionParser``).

    ``payout.paid`` is ``completed`` with result ``{"payout": {"id", "status", "amount", "currency"}}``;
    ``payout.failed`` is ``failed`` with an error naming the payout. Only fields that a re-sent delivery repeats
    are used, so a re-sent webhook digests the same and is absorbed (ADR 0036); the evidence is the event type.
    """

    def parse(self, body: bytes, headers: Mapping[str, str]) -> CompletionFields:
        """Returns the completion of one delivery. Raises ``InvalidInput`` for a body that is not a SimPay payout
        event (the endpoint answers 422)."""
        try:
            event = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise InvalidInput("a SimPay webhook is a JSON object") from None
        data = event.get("data") if isinstance(event, dict) else None
        kind = event.get("type") if isinstance(event, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
            raise InvalidInput("a SimPay webhook carries the payout in data, with its id")
        payout = {name: data.get(name) for name in ("id", "status", "amount", "currency")}
        if kind == "payout.paid":
            return CompletionFields(data["id"], CompletionOutcome.COMPLETED, result={"payout": payout},
                                    evidence={"simpay_event": kind})
        if kind == "payout.failed":
            return CompletionFields(data["id"], CompletionOutcome.FAILED, error=f"SimPay: payout {data['id']} failed",
                                    evidence={"simpay_event": kind})
        raise InvalidInput("a SimPay webhook's type is payout.paid or payout.failed")
