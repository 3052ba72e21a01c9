"""The event relay under load (issue 15): events published per second by ``fencepost relay`` worker processes to
RabbitMQ and to a webhook, against the sinks' own ceilings measured in the same run.

Imports only the standard library, httpx, pika and fencepost (all project dependencies).

A case: N events with ``pending`` outbox rows are appended to a fresh store (500 per transaction); then
``workers`` processes of the real CLI, ``fencepost relay --sink ...``, start together and drain them. The rate is
``(N - 1) / (last published_at - first published_at)``, read from the outbox rows (the store's clock), so that
the CLI's start-up (imports, connecting) is not counted; the relays are stopped with SIGTERM once every row is
``published``. After each case the outbox must hold N ``published`` rows, each claimed once (``attempts`` 1),
and the sink must have received every id at least once (RabbitMQ: the queue is drained and its ``message_id``s
counted; webhook: the receiver's id set).

The ceilings are plain client loops over the same envelope bytes, in ``workers`` processes released together
(``release_and_collect``), each publishing its share:

- RabbitMQ: a pika ``BlockingConnection`` with ``confirm_delivery()``, one persistent, mandatory
  ``basic_publish`` at a time, each waiting for its confirm: the sink's mode (``AmqpSink``).
- Webhook: an ``httpx.Client`` POSTing each envelope with the sink's headers, one at a time (``WebhookSink``).

The receiver is a ``ThreadingHTTPServer`` (HTTP/1.1 keep-alive) in its own process that answers 204 and keeps
every ``Fencepost-Event-Id``; the httpx ceiling at 4 processes is also the receiver's measured ceiling, so a
webhook relay rate well under it is not the receiver's limit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from bench.common import ROOT, release_and_collect
from fencepost.events.relay import envelope_bytes
from fencepost.events.sinks import EVENT_ID_HEADER
from fencepost.store.base import Store
from fencepost.store.host_records import EventOutboxRecord, EventRecord, NewEvent, Subject
from fencepost.store.open import open_store

AMQP_URL = os.environ.get("FENCEPOST_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
#: The relay's default claim size (``fencepost relay --batch-size``), kept: the benchmark measures the defaults.
RELAY_BATCH = 50
SEED_CHUNK = 500


# ── seeding and verification ──

def seed(store: Store, n: int) -> list[str]:
    """Append ``n`` events with outbox rows (destination ``bench``), ``SEED_CHUNK`` per transaction; their ids."""
    ids = [f"ev-{i:06d}" for i in range(n)]
    for start in range(0, n, SEED_CHUNK):
        def fn(tx: Any, part: list[str] = ids[start:start + SEED_CHUNK]) -> None:
            for event_id in part:
                if not tx.events.append_event_with_outbox(NewEvent(
                        id=event_id, tenant_id="acme", space_id="shop",
                        subject=Subject("ActionInvocation", event_id), type="StateTransitioned",
                        payload={"id": event_id, "state": "succeeded"}), destination="bench"):
                    raise RuntimeError(f"event {event_id} was already stored")
        store.transact(fn)
    return ids


def envelopes(store: Store, ids: list[str]) -> list[tuple[str, bytes]]:
    """The exact bytes the sinks send for ``ids`` (``envelope_bytes`` of each stored event and row)."""
    def fn(tx: Any) -> list[tuple[str, bytes]]:
        out = []
        for event_id in ids:
            event: EventRecord | None = tx.events.get_event(event_id)
            row: EventOutboxRecord | None = tx.events.get_event_outbox(event_id)
            assert event is not None and row is not None
            out.append((event_id, envelope_bytes(event, row)))
        return out

    return store.read(fn)


def _instant(value: Any) -> float:
    return (value if isinstance(value, datetime) else datetime.fromisoformat(str(value))).timestamp()


def outbox_state(store: Store) -> dict[str, Any]:
    """Rows by ``status/attempts`` and the first and last ``published_at`` (epoch seconds)."""
    def fn(tx: Any) -> dict[str, Any]:
        rows = tx.execute_raw("SELECT status, attempts, count(*) FROM host_event_outbox GROUP BY 1, 2")
        span = tx.execute_raw("SELECT min(published_at), max(published_at) FROM host_event_outbox "
                              "WHERE status = 'published'")
        return {"rows": {f"{s}/{a}": int(k) for s, a, k in rows}, "span": list(span[0]) if span else [None, None]}

    return store.read(fn)


def published_count(store: Store) -> int:
    summary = store.read(lambda tx: tx.events.summarize_event_outbox())
    return int(summary.counts.get("published", 0))


# ── the receiver (its own process) ──

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: httpx reuses one connection, as it does against a real receiver
    # Shared by every request thread of the one server in this process (the class is the server's handler).
    ids: ClassVar[set[str]] = set()
    total: ClassVar[list[int]] = [0]
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        event_id = self.headers.get(EVENT_ID_HEADER, "")
        with self.lock:
            self.ids.add(event_id)
            self.total[0] += 1
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would cost more than the request


def receiver_main() -> None:
    """Subprocess body: serve on a free port (printed as JSON); each ``drain`` line on stdin prints the ids
    received since the last one (distinct, sorted) and the request count, then forgets them; EOF stops."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    for line in sys.stdin:
        if line.strip() == "drain":
            with _Handler.lock:
                ids, total = sorted(_Handler.ids), _Handler.total[0]
                _Handler.ids.clear()
                _Handler.total[0] = 0
            print(json.dumps({"requests": total, "ids": ids}), flush=True)
    server.shutdown()


class Receiver:
    """The receiver process, started and stopped by the benchmark."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.relay", "receiver"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{json.loads(self.proc.stdout.readline())['port']}/events"

    def drain(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("drain\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


# ── RabbitMQ ──

def fresh_queue() -> str:
    """Declare a new durable queue ``fencepost-bench-<hex>`` (persistent messages are written to disk, as in
    production); its name is the routing key on the default exchange."""
    import pika

    name = f"fencepost-bench-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        conn.channel().queue_declare(name, durable=True)
    finally:
        conn.close()
    return name


def drain_queue(name: str) -> dict[str, Any]:
    """Consume every message of queue ``name`` until it stays empty for 2 s, then delete it. Returns the message
    count and the distinct ``message_id``s."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1000)
        ids: set[str] = set()
        total = 0
        for _method, props, _body in channel.consume(name, auto_ack=True, inactivity_timeout=2.0):
            if props is None:
                break  # idle for the timeout: the queue is empty
            ids.add(props.message_id)
            total += 1
        channel.cancel()
        channel.queue_delete(name)
    finally:
        conn.close()
    return {"messages": total, "ids": ids}


# ── ceilings: plain client loops in worker processes ──

def ceiling_main(kind: str, target: str, path: str) -> None:
    """Subprocess body: load ``(id, body)`` pairs from the JSON file ``path``, say ready, wait for go, publish
    each with the sink's mode, report ``{"first", "last", "count"}`` (epoch seconds of the first and last
    accepted publish)."""
    with open(path, encoding="utf-8") as f:
        pairs = [(i, b.encode()) for i, b in json.load(f)]
    if kind == "amqp":
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        channel = conn.channel()
        channel.confirm_delivery()

        def send(event_id: str, body: bytes) -> None:
            props = pika.BasicProperties(message_id=event_id, type="StateTransitioned",
                                         content_type="application/json", delivery_mode=2,
                                         headers={"fencepost-event-id": event_id})
            channel.basic_publish("", target, body, props, mandatory=True)
        close: Any = conn.close
    else:
        import httpx

        client = httpx.Client(timeout=10.0)

        def send(event_id: str, body: bytes) -> None:
            response = client.post(target, content=body, headers={
                "Content-Type": "application/json", EVENT_ID_HEADER: event_id,
                "Fencepost-Event-Type": "StateTransitioned"})
            if not 200 <= response.status_code < 300:
                raise RuntimeError(f"receiver answered {response.status_code}")
        close = client.close
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    first = last = 0.0
    for index, (event_id, body) in enumerate(pairs):
        send(event_id, body)
        last = time.time()
        if index == 0:
            first = last
    close()
    print(json.dumps({"first": first, "last": last, "count": len(pairs)}), flush=True)


def run_ceiling(kind: str, target: str, pairs: list[tuple[str, bytes]], workers: int, scratch: str) -> float:
    """The plain loop's rate over ``pairs`` split across ``workers`` processes: ``(N - 1) / (last - first)``
    over every process's first and last publish."""
    procs = []
    for k in range(workers):
        path = os.path.join(scratch, f"ceiling-{kind}-{k}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump([(i, b.decode()) for i, b in pairs[k::workers]], f)
        procs.append(subprocess.Popen([sys.executable, "-m", "bench.relay", "ceiling", kind, target, path], cwd=ROOT,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            for p in procs:
                p.kill()
            raise RuntimeError(f"a {kind} ceiling process failed to start")
    _go, reports = release_and_collect(procs, f"a {kind} ceiling process")
    first = min(r["first"] for r in reports)
    last = max(r["last"] for r in reports)
    return float((len(pairs) - 1) / (last - first))


# ── the relay itself ──

def run_relays(url: str, sink: str, extra: list[str], workers: int, store: Store, n: int,
               timeout: float = 1800.0) -> None:
    """Start ``workers`` ``fencepost relay`` processes on ``url``, wait until ``n`` rows are published (polling the
    outbox every 0.1 s), then SIGTERM them and wait for their exit.

    Raises:
        RuntimeError: a relay exited early, or the rows were not all published within ``timeout``.
    """
    fencepost = os.path.join(os.path.dirname(sys.executable), "fencepost")
    procs = [subprocess.Popen([fencepost, "relay", "--database", url, "--sink", sink, "--batch-size", str(RELAY_BATCH),
                               "--poll-interval", "0.05", "--log-format", "text", *extra],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(workers)]
    try:
        deadline = time.monotonic() + timeout
        while published_count(store) < n:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a relay exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}"
                                       if proc.stderr else "a relay exited early")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every event was published within {timeout:.0f} s")
            time.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass
class RelayResult:
    """Rates of one case (events/s), and what the verification found."""

    relay_per_s: float
    ceiling_per_s: float
    verified: dict[str, Any]


def run_case(url: str, sink: str, n: int, workers: int, scratch: str, receiver: Receiver | None = None,
             *, with_ceiling: bool = True) -> RelayResult:
    """One repetition of one case on a fresh database ``url``: seed, relay, verify, then the ceiling over the
    same envelopes. ``sink`` is ``amqp`` or ``webhook`` (``receiver`` required)."""
    store = open_store(url)
    store.migrate()
    try:
        ids = seed(store, n)
        pairs = envelopes(store, ids)
        if sink == "amqp":
            queue = fresh_queue()
            run_relays(url, AMQP_URL, ["--routing-key", queue], workers, store, n)
        else:
            assert receiver is not None
            receiver.drain()
            run_relays(url, f"webhook:{receiver.url}", [], workers, store, n)
        state = outbox_state(store)
    finally:
        store.close()
    if sink == "amqp":
        got = drain_queue(queue)
        delivered, ids_seen = got["messages"], got["ids"]
    else:
        assert receiver is not None
        got = receiver.drain()
        delivered, ids_seen = got["requests"], set(got["ids"])
    missing = len(set(ids) - ids_seen)
    verified = {"outbox": state["rows"], "delivered": delivered, "distinct_ids": len(ids_seen), "missing": missing,
                "ok": state["rows"] == {"published/1": n} and missing == 0}
    first, last = (_instant(v) for v in state["span"])
    relay_rate = (n - 1) / (last - first)
    ceiling = float("nan")
    if with_ceiling:
        if sink == "amqp":
            queue = fresh_queue()
            ceiling = run_ceiling("amqp", queue, pairs, workers, scratch)
            got = drain_queue(queue)
            verified["ceiling_missing"] = len(set(ids) - got["ids"])
        else:
            assert receiver is not None
            ceiling = run_ceiling("http", receiver.url, pairs, workers, scratch)
            verified["ceiling_missing"] = len(set(ids) - set(receiver.drain()["ids"]))
        verified["ok"] = verified["ok"] and verified["ceiling_missing"] == 0
    return RelayResult(relay_per_s=relay_rate, ceiling_per_s=ceiling, verified=verified)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.relay")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("receiver")
    c = sub.add_parser("ceiling")
    c.add_argument("kind", choices=["amqp", "http"])
    c.add_argument("target")
    c.add_argument("path")
    args = parser.parse_args(argv)
    if args.cmd == "receiver":
        receiver_main()
    else:
        ceiling_main(args.kind, args.target, args.path)


if __name__ == "__main__":
    main()
