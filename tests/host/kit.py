"""Small adapters, actions and helpers of the host tests (``conftest.py`` holds their fixtures): a recording
provider ledger, scripted adapters that count their calls, a worker that runs host invocations once, and a
crash that nothing catches."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from fencepost.host import Action, AdapterCall, AdapterStep, Host, HostConfig, RetryPolicy, Succeeded
from fencepost.host.action import HandlerContext
from fencepost.host.handler import kind_of
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.worker import Worker, WorkerConfig
from fencepost.store.base import Store
from helpers.store_backends import StoreBackend


class Crash(BaseException):
    """Raised where a process would die: nothing in fencepost catches a ``BaseException`` as an outcome."""


class Params(BaseModel):
    order_id: str
    amount_cents: int = Field(gt=0)


@dataclass
class Ledger:
    """The provider's ground truth: charges by idempotency key (a repeated key charges nothing new)."""

    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def charge(self, key: str, amount: int) -> str:
        with self.lock:
            self.requests.append(key)
            if key not in self.charges:
                self.charges[key] = {"amount": amount, "id": f"ch_{len(self.charges) + 1}"}
            return str(self.charges[key]["id"])


class Scripted:
    """An adapter that charges the ledger and then answers from ``script`` (one item per call: a reply, an
    exception to raise, or a callable ``(call) -> reply``); after the script, ``Succeeded``."""

    def __init__(self, ledger: Ledger, *script: Any, type_: str = "pay", charges: bool = True,
                 before: Callable[[AdapterCall], None] | None = None) -> None:
        self.type, self.vendor = type_, "simpay-test"
        self.ledger, self.script, self.charges, self.before = ledger, list(script), charges, before
        self.calls: list[AdapterCall] = []

    def execute(self, call: AdapterCall) -> object:
        self.calls.append(call)
        if self.before is not None:
            self.before(call)
        reply: Any = self.script.pop(0) if self.script else None
        if isinstance(reply, BaseException):
            raise reply
        charge_id = (self.ledger.charge(call.adapter_invocation_id, int(call.input.get("amount_cents", 1)))
                     if self.charges else "none")
        if callable(reply):
            return reply(call)
        return reply if reply is not None else Succeeded({"charge_id": charge_id})


@dataclass
class Spy:
    """A handler that counts its calls and returns ``{"reserved": order_id}``; ``raises`` is raised when set."""

    calls: int = 0
    raises: BaseException | None = None
    emit: tuple[str, ...] = ()

    def __call__(self, ctx: HandlerContext, params: Params) -> dict[str, Any]:
        self.calls += 1
        for event_type in self.emit:
            ctx.emit(event_type, {"order": params.order_id})
        if self.raises is not None:
            raise self.raises
        return {"reserved": params.order_id}


def charge_action(handler: Spy, *, steps: tuple[str, ...] = ("charge",), idempotent: bool = False,
                  retry: int = 1, adapter: str = "pay", version: int = 1) -> Action:
    return Action(id="shop.charge", version=version, params=Params, handler=handler, idempotent=idempotent,
                  steps=tuple(AdapterStep(name=s, adapter=adapter, operation="create_charge",
                                          retry=RetryPolicy(max_attempts=retry, initial=timedelta(0)))
                              for s in steps))


PARAMS = {"order_id": "o-1", "amount_cents": 1299}


def make_host(store: Store, action: Action, *adapters: Any, recovery: int = 5, lease: float = 30.0) -> Host:
    return Host(store, actions=[action], adapters=adapters,
                config=HostConfig(recovery_max_attempts=recovery, lease_seconds=lease,
                                  retryable_execution_max_attempts=min(recovery, 5)))  # H1: not above the budget


def run_worker(host: Host, backend: StoreBackend, store: Store | None = None, *,
               serve: tuple[str, int] | None = None) -> int:
    """One claim of host invocation commands by a fresh worker, handled to their end; how many it claimed.

    ``serve``: also serve this ``(action id, version)`` with the host's handler even though the host does not
    define it (a worker whose registration outlived its action: the unknown-action and budget paths)."""
    registry = HandlerRegistry()
    host.register(registry)
    if serve is not None:
        registry.register(kind_of(*serve), host.handler(), max_deliveries=host.config.recovery_budget)
    worker = Worker(store or host.store, registry, WorkerConfig(poll_interval=0.01, lease_seconds=backend.short_lease,
                                                                grace_seconds=0))
    try:
        return worker.run_once()
    finally:
        worker.heartbeat.stop()


def events_of(store: Store, invocation_id: str) -> list[Any]:
    """Every event of the default space about the invocation or one of its adapter rows, in sequence order."""
    rows = store.read(lambda tx: tx.host.list_adapter_invocations(invocation_id))
    ids = {invocation_id, *(r.id for r in rows)}
    events = store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
    return [e for e in events if e.subject.subject_id in ids]
