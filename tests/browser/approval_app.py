"""A small application for the approvals browser test: one SimPay charge that a policy holds until the ``ops``
authority approves it (host-spec P; ADR 0052). ``fencepost serve --app browser.approval_app:approval_host``
loads it (``tests`` on ``PYTHONPATH``); SimPay's URL comes from ``FENCEPOST_DEMO_SIMPAY_URL``, as for the demo."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from fencepost.demo.payments import SIMPAY_URL_ENV
from fencepost.demo.simpay_adapter import SimPayAdapter
from fencepost.host import Action, AdapterStep, Host, PolicyContext, RequireApproval
from fencepost.host.action import HandlerContext, RetryPolicy, StepInputContext
from fencepost.store.base import Store


class Refund(BaseModel):
    """A refund paid out as a SimPay charge: which order and how much (cents)."""

    order_id: str = Field(min_length=1, max_length=100)
    amount: int = Field(gt=0, le=10_000_000)


class OpsApproval:
    """Every refund needs a person holding the ``ops`` authority."""

    name = "refund-approval"

    def evaluate(self, ctx: PolicyContext) -> RequireApproval:
        return RequireApproval("ops", expires_in=timedelta(hours=1), reason="refunds need an operator's approval")


def _handler(ctx: HandlerContext, params: Refund) -> dict[str, Any]:
    return {"order_id": params.order_id, "refunded": params.amount}


def _charge_input(ctx: StepInputContext, params: Refund) -> dict[str, Any]:
    return {"amount": params.amount, "currency": "eur", "order_id": params.order_id, "mode": "ok"}


REFUND = Action(id="shop.refund", version=1, params=Refund, handler=_handler, policies=(OpsApproval(),),
                steps=(AdapterStep(name="charge", adapter=SimPayAdapter.type, operation="charge", input=_charge_input,
                                   timeout=timedelta(seconds=5), retry=RetryPolicy(max_attempts=1)),))


def approval_host(store: Store) -> Host:
    """``--app`` entry point: the refund action over the SimPay at ``FENCEPOST_DEMO_SIMPAY_URL``."""
    return Host(store, actions=[REFUND], adapters=[SimPayAdapter(os.environ[SIMPAY_URL_ENV])])
