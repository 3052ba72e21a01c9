"""The payments demo's application: four actions over SimPay and the ``Host`` that serves them.

The demo's worker subprocesses load it the way a user's workers load theirs:
``fencepost worker --app fencepost.demo.payments:demo_host``, and so does its completion endpoint:
``fencepost serve --no-worker --app fencepost.demo.payments:demo_host --completion-secret simpay=ENV_VAR``, which
finds SimPay's webhook parser in ``COMPLETION_PARSERS``. SimPay's URL comes from ``FENCEPOST_DEMO_SIMPAY_URL``.

Actions:
    ``demo.charge``             charge a card once, not idempotent: an interrupted charge is never sent again, it
                                ends ``reconciliation_required`` (host-spec G).
    ``demo.charge-idempotent``  the same charge declared idempotent: recovery sends it again under the same
                                ``adapter_invocation_id``, and SimPay's idempotency key makes it one charge.
    ``demo.payout``             an asynchronous payout: SimPay answers 202 (a handoff), the invocation parks, and
                                SimPay's signed webhook settles it; ``COMPLETION_DEADLINE_SECONDS`` after the
                                handoff the workers' sweep settles it ``reconciliation_required`` (host-spec N).
    ``demo.poison``             a handler that SIGKILLs the worker that runs it, at every claim, to show the recovery
                                budget ending it with a verdict (host-spec H).
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fencepost.core.errors import InvalidInput
from fencepost.demo.simpay import MODES
from fencepost.demo.simpay_adapter import VENDOR, SimPayAdapter, SimPayWebhookParser
from fencepost.host.action import Action, AdapterStep, HandlerContext, RetryPolicy, StepInputContext
from fencepost.host.service import Host, HostConfig
from fencepost.host.telemetry import Telemetry
from fencepost.store.base import Store

SIMPAY_URL_ENV = "FENCEPOST_DEMO_SIMPAY_URL"
#: Set in the demo's worker processes only: the poison action kills nothing else.
WORKER_ENV = "FENCEPOST_DEMO_WORKER"
#: Seconds a charge may take, retries included (the step deadline spans its attempts). SimPay's
STEP_TIMEOUT_SECONDS = 3.5
#: How long a payout's handoff waits for SimPay's webhook before the sweep gives up on it (the spec's 5 s).
COMPLETION_DEADLINE_SECONDS = 5.0
#: Claims an invocation gets (the first run and four recoveries); the sixth settles it.
RECOVERY_MAX_ATTEMPTS = 5


class ChargeParams(BaseModel):
    """A charge or a payout: which order, how much (in cents), and SimPay's failure mode for this request."""

    # Strict: an amount of money is a JSON integer, never a `true` read as 1 cent or a "10" read as 10 (a break-it
    # trial charged 1 cent for `"amount": true`). An application's own params model should be as strict.
    model_config = ConfigDict(strict=True)

    order_id: str = Field(min_length=1, max_length=100)
    amount: int = Field(gt=0, le=10_000_000)
    currency: str = Field(default="eur", min_length=3, max_length=3)
    mode: str = "ok"

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, mode: str) -> str:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        return mode


def _reserve(ctx: HandlerContext, params: ChargeParams) -> dict[str, Any]:
    return {"order_id": params.order_id}


def _charge_input(ctx: StepInputContext, params: ChargeParams) -> dict[str, Any]:
    return {"amount": params.amount, "currency": params.currency, "order_id": params.order_id, "mode": params.mode}


def _poison(ctx: HandlerContext, params: ChargeParams) -> dict[str, Any]:
    if os.environ.get(WORKER_ENV) != "1":
        raise RuntimeError("the poison action only runs in the demo's own workers")
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL is not delivered late")  # pragma: no cover


_PAYOUT = AdapterStep(name="payout", adapter=SimPayAdapter.type, operation="payout", input=_charge_input,
                      timeout=timedelta(seconds=STEP_TIMEOUT_SECONDS),
                      retry=RetryPolicy(max_attempts=3, initial=timedelta(seconds=0.2)))

_CHARGE = AdapterStep(name="charge", adapter=SimPayAdapter.type, operation="charge", input=_charge_input,
                      timeout=timedelta(seconds=STEP_TIMEOUT_SECONDS),
                      retry=RetryPolicy(max_attempts=3, initial=timedelta(seconds=0.2)))

ACTIONS = (
    Action(id="demo.charge", version=1, params=ChargeParams, handler=_reserve, steps=(_CHARGE,)),
    Action(id="demo.charge-idempotent", version=1, params=ChargeParams, handler=_reserve, steps=(_CHARGE,),
           idempotent=True),
    Action(id="demo.payout", version=1, params=ChargeParams, handler=_reserve, steps=(_PAYOUT,),
           completion_deadline=timedelta(seconds=COMPLETION_DEADLINE_SECONDS)),
    Action(id="demo.poison", version=1, params=ChargeParams, handler=_poison, steps=(_CHARGE,), idempotent=True),
)


def build_host(store: Store, simpay_url: str, *, telemetry: Telemetry | None = None) -> Host:
    """The demo's ``Host`` over ``store``, calling the SimPay at ``simpay_url``; ``telemetry``: the lifecycle sink
    (None: the host's default, log records)."""
    return Host(store, actions=ACTIONS, adapters=[SimPayAdapter(simpay_url)],
                config=HostConfig(recovery_max_attempts=RECOVERY_MAX_ATTEMPTS), telemetry=telemetry)


def demo_host(store: Store) -> Host:
    """``--app`` entry point: the demo's ``Host`` with SimPay's URL from ``FENCEPOST_DEMO_SIMPAY_URL``.

    Raises:
        InvalidInput: the variable is not set.
    """
    url = os.environ.get(SIMPAY_URL_ENV)
    if not url:
        raise InvalidInput(f"{SIMPAY_URL_ENV} is not set: the payments demo's workers need SimPay's URL")
    return build_host(store, url)


#: ``fencepost serve --app fencepost.demo.payments:demo_host`` reads this: SimPay's webhooks are SimPay-shaped, not
#: fencepost's JSON completion body (ADR 0036).
COMPLETION_PARSERS = {VENDOR: SimPayWebhookParser()}
