"""A process that submits or works one action invocation, for the host's crash windows (``host_flow``,
``test_fallback_windows``, ``completion_flow``).

Usage: ``python host_subject.py URL LEDGER_DIR submit|inline|work|complete|sweep|approve|expire IDEMPOTENT(0|1)
BEHAVIOUR [FAULTS]``.

The provider is in-process but its ground truth is on disk (``LEDGER_DIR``), written and fsynced before each
reply, so it survives the SIGKILL of this process: ``requests`` has a line per call, ``charges`` a line per
charge. A key charged once is never charged again (the provider honours the idempotency key). ``flaky``
answers the very first call for a key ``transient_failure``, then charges; ``decline`` always declines;
``timeout`` charges, then raises ``TimeoutError`` (the reply is lost after the effect: an unknown outcome).
``submit`` dispatches the invocation to workers; ``inline`` runs it in this process under a caller lease of
``LEASE_SECONDS`` (what a worker takes over once this process is dead), then prints its verdict as JSON;
``work`` runs a real worker's claims (its deadline sweep included) until the invocation has a verdict or has
parked, then prints it as JSON.

``payout`` and ``payout-due`` are the long-running action ``shop.payout`` (host-spec N; ADR 0035): step
``payout`` hands off (the provider answers ``Accepted(po-<key>)`` and writes ``payouts``, once per key; every
call is a line of ``payout-requests``), step ``notify`` then succeeds (``notices``); the action's
``completion_deadline`` is an hour for ``payout`` and one second (the least allowed) for ``payout-due``.
``complete`` is the provider calling back: it reads its one payout from ``payouts`` and sends ``completed``
with ``{"payout_id": <reference>}`` through ``Host.complete``, then prints the receipt as JSON; ``sweep`` runs
``Host.reconcile_overdue_completions`` once and prints ``{"swept": n}``.
``governed`` adds governance to ``shop.charge`` (ADRs 0043, 0045: a mutation footprint, a policy attaching the
obligation ``receipt_checked`` and an attestation extractor satisfying it); ``approval`` and ``approval-due``
add a policy requiring the ``ops`` authority's approval, expiring after an hour or a second (ADR 0044).
``approve`` approves the one invocation as ``alice`` and prints it as JSON; ``expire`` waits 1.2 s, runs
``Host.expire_approvals`` once and prints ``{"expired": n}``. ``work`` also stops at ``awaiting_approval``.
``FAULTS`` (optional) is a JSON object ``{query name: [occurrences]}``: the store is then wrapped in a
``FaultInjectingStore`` with that plan, so the process meets the store errors that force a degraded path.

Both actions are bound to the order's state (ADR 0077): ``shop.charge`` moves order ``o-1`` to ``charged`` and
``shop.payout`` to ``paid-out``, each guarded as a first transition (``from_state is None``), so every window
also checks that the ``StateTransitioned`` fact and the recorded state commit with the success (or the parking)
and with nothing else. ``domain`` is ``shop.charge`` whose handler writes a domain row (``shop_orders``, a table
the test creates) and declares an ``OrderCharged`` event (host-spec A17: the row commits with the handler, the
event with the finalization).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fencepost.core.statuses import InvocationStatus
from fencepost.host import (
    Accepted,
    Action,
    AdapterCall,
    AdapterStep,
    Attestation,
    Host,
    HostConfig,
    Inline,
    Obligations,
    PermanentFailure,
    RequireApproval,
    RetryPolicy,
    StateBinding,
    Succeeded,
    TransientFailure,
)
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.worker import Worker, WorkerConfig
from fencepost.store import Store, open_store
from fencepost.store.faults import FaultInjectingStore

KEY = "order-1"
#: The inline caller's lease and the worker's: short, so that a takeover after a crash comes quickly.
LEASE_SECONDS = 1.0
#: The payout provider's ``vendor``: the ``provider`` of its callbacks.
PAYOUT_VENDOR = "disk-payouts"
#: ``completion_deadline`` of ``shop.payout`` by behaviour: never due during a test, or due after a second.
PAYOUT_DEADLINES = {"payout": timedelta(hours=1), "payout-due": timedelta(seconds=1)}


class Params(BaseModel):
    order_id: str
    amount_cents: int
    behaviour: str


class DiskProvider:
    type, vendor = "pay", "disk-ledger"

    def __init__(self, root: Path) -> None:
        self.root = root

    def _lines(self, name: str) -> list[str]:
        path = self.root / name
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def _append(self, name: str, line: str) -> None:
        with open(self.root / name, "a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def execute(self, call: AdapterCall) -> object:
        with open(self.root / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            key = call.adapter_invocation_id
            first = key not in self._lines("requests")
            self._append("requests", key)
            if call.input["behaviour"] == "decline":
                return PermanentFailure("card declined")
            if call.input["behaviour"] == "flaky" and first:
                return TransientFailure("provider busy")
            charged = [line for line in self._lines("charges") if line.startswith(key + " ")]
            if not charged:
                self._append("charges", f"{key} {call.input['amount_cents']}")
            if call.input["behaviour"] == "timeout":
                raise TimeoutError("read timed out after the charge request was sent")
            return Succeeded({"charge": key[-8:]})


class DiskPayouts(DiskProvider):
    """The payout provider: ``payout`` accepts a long-running payout (a handoff), ``notify`` succeeds."""

    type, vendor = "payout", PAYOUT_VENDOR

    def execute(self, call: AdapterCall) -> object:
        with open(self.root / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            key = call.adapter_invocation_id
            if call.operation == "notify":
                self._append("notices", key)
                return Succeeded({"sent": True})
            self._append("payout-requests", key)
            reference = f"po-{key[-12:]}"
            if not any(line.startswith(key + " ") for line in self._lines("payouts")):
                self._append("payouts", f"{key} {reference}")
            return Accepted(reference, {"status": "pending"})


def order_state(target: str) -> StateBinding:
    """The binding to order ``params.order_id``, moved to ``target`` once (a first transition)."""
    return StateBinding("order", target, entity_id=lambda params: params.order_id,
                        guard=lambda before, params: before is None)


def payout_action(behaviour: str, idempotent: bool) -> Action:
    """``shop.payout``: a handoff step, then a step that runs before the invocation parks."""
    retry = RetryPolicy(max_attempts=1, initial=timedelta(0))
    return Action(id="shop.payout", version=1, params=Params, handler=handler, idempotent=idempotent,
                  completion_deadline=PAYOUT_DEADLINES[behaviour], state=order_state("paid-out"),
                  steps=(AdapterStep(name="payout", adapter="payout", operation="payout", retry=retry),
                         AdapterStep(name="notify", adapter="payout", operation="notify", retry=retry)))


def handler(ctx: Any, params: Params) -> dict[str, Any]:
    return {"order": params.order_id}


def domain_handler(ctx: Any, params: Params) -> dict[str, Any]:
    """The handler's own domain row (committed with its unit) and a declared event (committed at finalization)."""
    ctx.tx.execute_raw(f"INSERT INTO shop_orders (order_id) VALUES ('{params.order_id}') ON CONFLICT DO NOTHING")
    ctx.emit("OrderCharged", {"order": params.order_id})
    return {"order": params.order_id}


class NeedsReceipt:
    name = "receipts"

    def evaluate(self, ctx: Any) -> Obligations:
        return Obligations(("receipt_checked",))


class NeedsOps:
    name = "four-eyes"

    def __init__(self, expires_in: timedelta) -> None:
        self.expires_in = expires_in

    def evaluate(self, ctx: Any) -> RequireApproval:
        return RequireApproval("ops", expires_in=self.expires_in)


def attest(*, input: dict[str, Any], output: dict[str, Any], started_at: Any, completed_at: Any) -> Attestation:
    return Attestation(claims={"charge": output["charge"]}, satisfies_obligations=("receipt_checked",))


def governance(behaviour: str) -> dict[str, Any]:
    """The governance fields of ``shop.charge`` for ``behaviour`` (none for the plain behaviours)."""
    if behaviour == "governed":
        return {"policies": (NeedsReceipt(),), "mutation_governance": lambda ctx: {"writes": ["ledger"]},
                "extract_execution_attestation": attest}
    if behaviour in ("approval", "approval-due"):
        return {"policies": (NeedsOps(timedelta(hours=1) if behaviour == "approval" else timedelta(seconds=1)),)}
    return {}


def main(url: str, ledger: str, mode: str, idempotent: str, behaviour: str, faults: str | None = None) -> int:
    store: Store = open_store(url, create=False)
    if faults is not None:
        store = FaultInjectingStore(store, plan={query: set(occurrences)
                                                 for query, occurrences in json.loads(faults).items()})
    payout = behaviour in PAYOUT_DEADLINES
    if payout:
        action = payout_action(behaviour, idempotent == "1")
    else:
        action = Action(id="shop.charge", version=1, params=Params,
                        handler=domain_handler if behaviour == "domain" else handler, idempotent=idempotent == "1",
                        steps=(AdapterStep(name="charge", adapter="pay", operation="create_charge",
                                           retry=RetryPolicy(max_attempts=2, initial=timedelta(0))),),
                        state=order_state("charged"), **governance(behaviour))
    host = Host(store, actions=[action], adapters=[DiskPayouts(Path(ledger)) if payout else DiskProvider(Path(ledger))],
                config=HostConfig(lease_seconds=LEASE_SECONDS))
    params = {"order_id": "o-1", "amount_cents": 1299, "behaviour": behaviour}
    if mode == "complete":
        [line] = DiskPayouts(Path(ledger))._lines("payouts")
        reference = line.split(" ", 1)[1]
        receipt = host.complete(PAYOUT_VENDOR, reference, "completed", result={"payout_id": reference})
        print(json.dumps({"disposition": str(receipt.disposition), "id": receipt.invocation_id,
                          "status": None if receipt.status is None else str(receipt.status)}))
        return 0
    if mode == "sweep":
        print(json.dumps({"swept": host.reconcile_overdue_completions()}))
        return 0
    if mode == "approve":
        waiting = host.list()[0]
        view = host.approve(waiting.id, approver="alice", authority="ops", note="crash window")
        print(json.dumps({"id": view.id, "status": str(view.status), "error": view.error}))
        return 0
    if mode == "expire":
        time.sleep(1.2)
        print(json.dumps({"expired": host.expire_approvals()}))
        return 0
    if mode == "submit":
        view = host.submit(action.id, params, actor="user:1", idempotency_key=KEY)
        print(json.dumps({"id": view.id, "status": str(view.status)}))
        return 0
    if mode == "inline":
        view = host.submit(action.id, params, actor="user:1", idempotency_key=KEY, mode=Inline())
        print(json.dumps({"id": view.id, "status": str(view.status), "error": view.error}))
        return 0
    registry = HandlerRegistry()
    host.register(registry)
    worker = Worker(store, registry, WorkerConfig(poll_interval=0.05, lease_seconds=LEASE_SECONDS, grace_seconds=0,
                                                  worker_id=f"subject-{os.getpid()}"), sweeps=host.sweeps())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        worker.run_once()
        current = host.list()[0]
        stored = store.read(lambda tx, i=current.id: tx.host.get_invocation(i))
        parked = stored is not None and stored.parked_at is not None
        if current.status.terminal or parked or current.status is InvocationStatus.AWAITING_APPROVAL:
            print(json.dumps({"id": current.id, "status": str(current.status), "error": current.error,
                              "parked": parked}))
            return 0
        time.sleep(0.1)
    print(json.dumps({"error": "no verdict within 60 s"}))
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))
