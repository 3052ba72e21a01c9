"""The demo's adapter for SimPay: ``HttpAdapter`` with SimPay's operations and its per-request failure mode.

The step's input may carry ``mode`` (one of ``fencepost.demo.simpay.MODES``). It is sent as the
``X-SimPay-Mode`` header and left out of the body, so a retry in another mode is the same request for the
provider's idempotency check.
"""

from __future__ import annotations

from typing import Any

from fencepost.demo.simpay import MODE_HEADER
from fencepost.host.adapter import AdapterCall
from fencepost.host.http_adapter import HttpAdapter, HttpOperation, HttpTimeouts

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
        super().__init__(base_url, vendor="simpay", operations=SIMPAY_OPERATIONS, timeouts=timeouts,
                         trust_env=False)  # SimPay is on loopback: no proxy from the environment

    def headers(self, call: AdapterCall) -> dict[str, str]:
        """The ``X-SimPay-Mode`` of the call's ``mode`` input, when it has one."""
        mode = call.input.get("mode")
        return {MODE_HEADER: mode} if isinstance(mode, str) else {}

    def body(self, call: AdapterCall) -> dict[str, Any]:
        """The call's input without ``mode``."""
        return {key: value for key, value in call.input.items() if key != "mode"}
