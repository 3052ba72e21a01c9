"""One crash, two systems: ``bash bench/run crash-compare`` (docs/benchmarks.md, "Crash compare").

For each system and variant, a fresh SimPay (``fencepost.demo.simpay``, a real loopback HTTP provider with a
ground-truth ledger) runs in this process, and a worker subprocess runs one payment against it:

- DBOS: a workflow ``pay`` with one step ``charge`` that POSTs the charge with httpx (no Idempotency-Key, or the
  workflow id as the Idempotency-Key), started by the worker with a fixed workflow id;
- fencepost: the demo's action ``demo.charge`` (``idempotent=False``) or ``demo.charge-idempotent``
  (``idempotent=True``), one HTTP adapter step, dispatched and run by ``fencepost worker``.

Every charge is sent in SimPay's ``slow-after-charge`` mode with a long sleep: SimPay records the charge, then holds
its reply. This process watches SimPay's ledger and SIGKILLs the worker as soon as the charge is there, so the
worker dies after the provider charged and before it could record anything, in both systems alike. SimPay then
answers at once (``slow_seconds`` = 0) and a fresh worker process recovers: DBOS by its recovery at launch (same
executor id, ``local``), fencepost by a worker taking the invocation over when the lease expires.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, scratch_dir

#: SimPay's hold of the first reply; the kill comes long before it ends.
HOLD_SECONDS = 60.0
#: fencepost worker lease (the demo's): the takeover waits for it to expire.
LEASE_SECONDS = 3.0
WAIT_SECONDS = 60.0
AMOUNT = 1299


@dataclass
class Outcome:
    system: str
    variant: str
    charges: int
    calls: int
    final: str
    told: str
    killed: bool


def _wait_for_charge(simpay: Any, proc: subprocess.Popen[bytes], timeout: float = WAIT_SECONDS) -> bool:
    """Poll SimPay's ledger until a charge exists (or the worker died, or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if simpay.ledger.charges():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def _kill(proc: subprocess.Popen[bytes]) -> bool:
    proc.send_signal(signal.SIGKILL)
    return proc.wait(10) == -signal.SIGKILL


def _ledger(simpay: Any) -> tuple[int, int]:
    charges = len(simpay.ledger.charges())
    calls = len([c for c in simpay.ledger.calls() if c["path"] == "/v1/charges"])
    return charges, calls


# ───────────────────────────── DBOS ─────────────────────────────

def dbos_worker(db: str, simpay_url: str, workflow_id: str, keyed: bool, start: bool) -> None:
    """Subprocess body. ``start``: launch DBOS and start workflow ``workflow_id``; otherwise launch (DBOS recovers
    this executor's pending workflows at launch) and wait for it. Prints ``{"status", "result", "error"}``."""
    import logging

    import httpx
    from dbos import DBOS, SetWorkflowID

    logging.getLogger("dbos").setLevel(logging.ERROR)
    DBOS(config={"name": "fencepost-crash-compare", "system_database_url": f"sqlite:///{db}",
                 "log_level": "ERROR", "run_admin_server": False})  # type: ignore[typeddict-unknown-key]

    @DBOS.step(name="charge")
    def charge(order_id: str) -> str:
        headers = {"X-SimPay-Mode": "slow-after-charge"}
        if keyed:
            headers["Idempotency-Key"] = DBOS.workflow_id or ""
        reply = httpx.post(f"{simpay_url}/v1/charges", json={"amount": AMOUNT, "currency": "eur",
                                                              "order_id": order_id},
                           headers=headers, timeout=HOLD_SECONDS * 2, trust_env=False)
        reply.raise_for_status()
        return str(reply.json()["id"])

    @DBOS.workflow(name="pay")
    def pay(order_id: str) -> str:
        return charge(order_id)

    DBOS.launch()
    if start:
        with SetWorkflowID(workflow_id):
            handle = DBOS.start_workflow(pay, "order-1")
    else:
        handle = DBOS.retrieve_workflow(workflow_id)
    try:
        result, error = handle.get_result(), None
    except Exception as failed:  # the workflow's own error is its final state, reported
        result, error = None, f"{type(failed).__name__}: {failed}"
    status = handle.get_status().status
    print(json.dumps({"status": status, "result": result, "error": error}), flush=True)
    DBOS.destroy()


def run_dbos(keyed: bool) -> Outcome:
    from fencepost.demo.simpay import SimPay

    variant = "step passes workflow id as Idempotency-Key" if keyed else "step without Idempotency-Key"
    with scratch_dir("crashcmp-dbos") as d:
        simpay = SimPay(d / "ledger.db", slow_seconds=HOLD_SECONDS).start()
        try:
            db = str(d / "dbos.sqlite")
            wid = "pay-order-1"

            def worker(start: bool) -> subprocess.Popen[bytes]:
                return subprocess.Popen([sys.executable, "-m", "bench.crash_compare", "dbos-worker", db, simpay.url,
                                         wid, "--keyed" if keyed else "--no-keyed",
                                         "--start" if start else "--recover"],
                                        cwd=ROOT, stdout=subprocess.PIPE)

            first = worker(True)
            charged = _wait_for_charge(simpay, first)
            killed = charged and _kill(first)
            if not killed:
                first.kill()
            simpay.slow_seconds = 0.0
            second = worker(False)
            out, _ = second.communicate(timeout=WAIT_SECONDS)
            lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
            got = json.loads(lines[-1]) if lines else {"status": f"no report (exit {second.returncode})"}
            charges, calls = _ledger(simpay)
            ids = [c["id"] for c in simpay.ledger.charges()]
        finally:
            simpay.stop()
    result = got.get("result")
    which = f" (charge {ids.index(result) + 1} of {len(ids)})" if result in ids else ""
    final = f"workflow {got['status']}, result {result!r}{which}" + (
        f", error {got['error']}" if got.get("error") else "")
    if got["status"] == "SUCCESS":
        told = "no: SUCCESS, the first charge is in no DBOS record" if charges > 1 else "nothing to tell: one charge"
    else:
        told = f"only by status {got['status']}"
    return Outcome("DBOS", variant, charges, calls, final, told, killed)


# ─────────────────────────── fencepost ───────────────────────────

def run_fencepost(idempotent: bool) -> Outcome:
    from fencepost.demo.payments import SIMPAY_URL_ENV, WORKER_ENV, build_host
    from fencepost.demo.simpay import SimPay
    from fencepost.host import Dispatch
    from fencepost.store.open import open_store

    action = "demo.charge-idempotent" if idempotent else "demo.charge"
    variant = f"action idempotent={idempotent}"
    with scratch_dir("crashcmp-fp") as d:
        simpay = SimPay(d / "ledger.db", slow_seconds=HOLD_SECONDS).start()
        url = f"sqlite:///{d / 'fencepost.db'}"
        store = open_store(url)
        try:
            store.migrate()
            host = build_host(store, simpay.url)
            env = {**os.environ, SIMPAY_URL_ENV: simpay.url, WORKER_ENV: "1"}
            env.pop("FENCEPOST_CRASHPOINT", None)
            (d / "work").mkdir()

            def worker(name: str) -> subprocess.Popen[bytes]:
                return subprocess.Popen(
                    [sys.executable, "-m", "fencepost.cli", "worker", "--database", url,
                     "--app", "fencepost.demo.payments:demo_host", "--lease-seconds", str(LEASE_SECONDS),
                     "--poll-interval", "0.1", "--grace-period", "2", "--work-dir", str(d / "work"),
                     "--log-format", "text"], env={**env, "FENCEPOST_WORKER_ID": name}, cwd=ROOT,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

            first = worker("worker-1")
            view = host.submit(action, {"order_id": "order-1", "amount": AMOUNT, "mode": "slow-after-charge"},
                               actor="bench", idempotency_key="order-1", mode=Dispatch())
            charged = _wait_for_charge(simpay, first)
            killed = charged and _kill(first)
            if not killed:
                first.kill()
            simpay.slow_seconds = 0.0
            second = worker("worker-2")
            try:
                deadline = time.monotonic() + WAIT_SECONDS
                while not view.status.terminal and time.monotonic() < deadline:
                    time.sleep(0.1)
                    view = host.get(view.id)
            finally:
                second.send_signal(signal.SIGTERM)
                try:
                    second.wait(15)
                except subprocess.TimeoutExpired:
                    second.kill()
                    second.wait()
            charges, calls = _ledger(simpay)
        finally:
            store.close()
            simpay.stop()
    status = str(view.status)
    final = f"{status} (attempt {view.attempt_count})" + (f": {view.error}" if view.error else "")
    evidence = f", evidence {', '.join(sorted(view.reconciliation))}" if view.reconciliation else ", no evidence"
    told = (f"yes: verdict reconciliation_required{evidence}" if status == "reconciliation_required"
            else "nothing to tell: one charge, succeeded with its evidence" if status == "succeeded"
            else f"verdict {status}")
    return Outcome("fencepost", variant, charges, calls, final, told, killed)


def table(outcomes: list[Outcome]) -> str:
    rows = ["| system | variant | charges in SimPay's ledger | provider calls | final state | operator told |",
            "| --- | --- | ---: | ---: | --- | --- |"]
    for o in outcomes:
        kill = "" if o.killed else " (the worker was NOT killed in the window: run invalid)"
        rows.append(f"| {o.system} | {o.variant}{kill} | {o.charges} | {o.calls} | {o.final} | {o.told} |")
    return "\n".join(rows)


def run_all() -> str:
    """Run the four cases and return the markdown table."""
    import dbos

    outcomes = []
    for label, fn in (("DBOS, no key", lambda: run_dbos(False)), ("DBOS, keyed", lambda: run_dbos(True)),
                      ("fencepost, idempotent=False", lambda: run_fencepost(False)),
                      ("fencepost, idempotent=True", lambda: run_fencepost(True))):
        print(f"  {label} ...", flush=True)
        outcome = fn()
        print(f"    charges {outcome.charges}, calls {outcome.calls}, {outcome.final}; told: {outcome.told}",
              flush=True)
        outcomes.append(outcome)
    version = getattr(dbos, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("dbos")
    return (f"DBOS {version} (SQLite system database, default executor id `local`, step retries off: "
            f"DBOS's default); fencepost worker lease {LEASE_SECONDS:g} s.\n\n" + table(outcomes))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.crash_compare")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("dbos-worker")
    w.add_argument("db")
    w.add_argument("simpay_url")
    w.add_argument("workflow_id")
    w.add_argument("--keyed", action=argparse.BooleanOptionalAction, default=False)
    w.add_argument("--start", dest="start", action="store_true")
    w.add_argument("--recover", dest="start", action="store_false")
    sub.add_parser("run")
    args = parser.parse_args(argv)
    if args.cmd == "dbos-worker":
        dbos_worker(args.db, args.simpay_url, args.workflow_id, args.keyed, args.start)
    else:
        text = run_all()
        print("\n" + text)
        out = Path(ROOT) / "bench" / "results"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"crash-compare-{time.strftime('%Y-%m-%d-%H%M', time.gmtime())}.md").write_text(
            "# crash compare\n\n`bash bench/run crash-compare`\n\n" + text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
