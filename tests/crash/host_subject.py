"""A process that submits or works one action invocation, for the host's crash windows (``host_flow``,
``test_fallback_windows``).

Usage: ``python host_subject.py URL LEDGER_DIR submit|inline|work IDEMPOTENT(0|1) BEHAVIOUR [FAULTS]``.

The provider is in-process but its ground truth is on disk (``LEDGER_DIR``), written and fsynced before each
reply, so it survives the SIGKILL of this process: ``requests`` has a line per call, ``charges`` a line per
charge. A key charged once is never charged again (the provider honours the idempotency key). ``flaky``
answers the very first call for a key ``transient_failure``, then charges; ``decline`` always declines;
``timeout`` charges, then raises ``TimeoutError`` (the reply is lost after the effect: an unknown outcome).
``submit`` dispatches the invocation to workers; ``inline`` runs it in this process under a caller lease of
``LEASE_SECONDS`` (what a worker takes over once this process is dead), then prints its verdict as JSON;
``work`` runs a real worker's claims until the invocation has a verdict, then prints it as JSON.
``FAULTS`` (optional) is a JSON object ``{query name: [occurrences]}``: the store is then wrapped in a
``FaultInjectingStore`` with that plan, so the process meets the store errors that force a degraded path.
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

from fencepost.host import (
    Action,
    AdapterCall,
    AdapterStep,
    Host,
    HostConfig,
    Inline,
    PermanentFailure,
    RetryPolicy,
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


def handler(ctx: Any, params: Params) -> dict[str, Any]:
    return {"order": params.order_id}


def main(url: str, ledger: str, mode: str, idempotent: str, behaviour: str, faults: str | None = None) -> int:
    store: Store = open_store(url, create=False)
    if faults is not None:
        store = FaultInjectingStore(store, plan={query: set(occurrences)
                                                 for query, occurrences in json.loads(faults).items()})
    action = Action(id="shop.charge", version=1, params=Params, handler=handler, idempotent=idempotent == "1",
                    steps=(AdapterStep(name="charge", adapter="pay", operation="create_charge",
                                       retry=RetryPolicy(max_attempts=2, initial=timedelta(0))),))
    host = Host(store, actions=[action], adapters=[DiskProvider(Path(ledger))],
                config=HostConfig(lease_seconds=LEASE_SECONDS))
    params = {"order_id": "o-1", "amount_cents": 1299, "behaviour": behaviour}
    if mode == "submit":
        view = host.submit("shop.charge", params, actor="user:1", idempotency_key=KEY)
        print(json.dumps({"id": view.id, "status": str(view.status)}))
        return 0
    if mode == "inline":
        view = host.submit("shop.charge", params, actor="user:1", idempotency_key=KEY, mode=Inline())
        print(json.dumps({"id": view.id, "status": str(view.status), "error": view.error}))
        return 0
    registry = HandlerRegistry()
    host.register(registry)
    worker = Worker(store, registry, WorkerConfig(poll_interval=0.05, lease_seconds=LEASE_SECONDS, grace_seconds=0,
                                                  worker_id=f"subject-{os.getpid()}"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        worker.run_once()
        current = host.list()[0]
        if current.status.terminal:
            print(json.dumps({"id": current.id, "status": str(current.status), "error": current.error}))
            return 0
        time.sleep(0.1)
    print(json.dumps({"error": "no verdict within 60 s"}))
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))
