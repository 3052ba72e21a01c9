"""Claim latency (enqueue commit to handler start, idle worker) and takeover latency (SIGKILL to re-claim).

Both use real worker processes (``python -m bench.latency worker``) whose handler prints the wall-clock
instant it starts; the benchmark compares it with the instant the producer's enqueue committed (claim
latency) or the instant the holding worker was killed (takeover). One machine, one clock.

Claim latency is measured three ways: SQLite and PostgreSQL with a worker polling every 50 ms
(``listen=False``: about half the poll interval plus one claim transaction), and PostgreSQL with
LISTEN/NOTIFY (ADR 0014) and the default 1 s poll interval, where the enqueue's NOTIFY wakes the worker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from bench.common import ROOT, percentile
from bench.fp_outbox import enqueue, make_worker, migrated
from fencepost.outbox.context import CommandContext
from fencepost.store.open import open_store

POLL_INTERVAL = 0.05
LISTEN_POLL_INTERVAL = 1.0  # the CLI default: with LISTEN/NOTIFY the wake-up comes from the NOTIFY


class _Lines:
    """Reads a worker's stdout lines on a thread, so the benchmark can wait with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.items: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._cond:
                self.items.append(json.loads(line))
                self._cond.notify_all()

    def wait_for(self, pred: Any, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for item in self.items:
                    if pred(item):
                        return item
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching report from the worker")
                self._cond.wait(left)


def _spawn(url: str, mode: str, lease: float, listen: bool = False) -> tuple[subprocess.Popen[str], _Lines]:
    proc = subprocess.Popen([sys.executable, "-m", "bench.latency", "worker", url, mode, "--lease", str(lease),
                             "--listen" if listen else "--no-listen"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    lines = _Lines(proc)
    lines.wait_for(lambda i: i.get("ready"), 60)
    return proc, lines


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def claim_latency(url: str, samples: int, listen: bool = False) -> list[float]:
    """Seconds from enqueue commit to handler start, ``samples`` times, one command at a time."""
    store = migrated(url)
    proc, lines = _spawn(url, "report", 30.0, listen)
    time.sleep(0.5)  # the worker has gone idle (and, listening, has its LISTEN in place)
    out: list[float] = []
    try:
        for i in range(samples):
            time.sleep(random.uniform(0, 2 * POLL_INTERVAL))  # land anywhere in the poll cycle
            enqueue(store, 1, payload={"i": i})
            committed = time.time()
            got = lines.wait_for(lambda item, i=i: item.get("i") == i, 30)
            out.append(got["t"] - committed)
    finally:
        _stop(proc)
        store.close()
    return out


def takeover_latency(url: str, lease: float) -> float:
    """Seconds from SIGKILL of the worker holding a command to another worker's handler start."""
    store = migrated(url)
    holder, holder_lines = _spawn(url, "hold", lease)
    enqueue(store, 1, payload={"i": 0})
    holder_lines.wait_for(lambda item: item.get("i") == 0, 30)
    taker, taker_lines = _spawn(url, "report", lease)
    try:
        time.sleep(random.uniform(0, lease))  # kill at any point of the heartbeat cycle
        holder.kill()
        killed = time.time()
        holder.wait()
        got = taker_lines.wait_for(lambda item: item.get("i") == 0, lease * 10 + 30)
        if got.get("delivery") != 2:
            raise RuntimeError("the command was not taken over")
        return float(got["t"]) - killed
    finally:
        _stop(taker)
        store.close()


def worker_main(url: str, mode: str, lease: float, listen: bool = False) -> None:
    """``report``: print each handler start; ``hold``: print it, then block (until killed)."""
    store = open_store(url)
    store.require_schema()

    def handler(ctx: CommandContext) -> None:
        print(json.dumps({"i": ctx.command.payload.get("i"), "t": time.time(), "delivery": ctx.delivery}),
              flush=True)
        if mode == "hold":
            threading.Event().wait()

    worker = make_worker(store, batch=1, lease=lease, poll=LISTEN_POLL_INTERVAL if listen else POLL_INTERVAL,
                         handler=handler, listen=listen)
    signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    worker.run()
    store.close()


def summarize(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.latency")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("url")
    w.add_argument("mode", choices=["report", "hold"])
    w.add_argument("--lease", type=float, default=30.0)
    w.add_argument("--listen", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args(argv)
    worker_main(args.url, args.mode, args.lease, args.listen)


if __name__ == "__main__":
    main()
