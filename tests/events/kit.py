"""What the relay tests share: a real local webhook receiver, RabbitMQ helpers, events in a real store."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pika

from fencepost.core.statuses import EventOutboxStatus
from fencepost.store.base import Store
from fencepost.store.host_records import NewEvent, Subject
from fencepost.store.ports import UnitOfWork

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def append(store: Store, count: int, *, prefix: str = "ev", space: str = "shop", start: int = 0) -> list[str]:
    """Append ``count`` events with outbox rows, 500 per transaction; returns their ids."""
    ids = [f"{prefix}-{i:05d}" for i in range(start, start + count)]
    for chunk in range(0, len(ids), 500):
        def fn(tx: UnitOfWork, part: list[str] = ids[chunk:chunk + 500]) -> None:
            for event_id in part:
                assert tx.events.append_event_with_outbox(NewEvent(
                    id=event_id, tenant_id="acme", space_id=space, subject=Subject("ActionInvocation", event_id),
                    type="StateTransitioned", payload={"id": event_id}))
        store.transact(fn)
    return ids


def statuses(store: Store) -> Counter[str]:
    summary = store.read(lambda tx: tx.events.summarize_event_outbox())
    return Counter(summary.counts)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def all_published(store: Store, total: int) -> Callable[[], bool]:
    return lambda: statuses(store).get(str(EventOutboxStatus.PUBLISHED), 0) == total


@dataclass
class Receiver:
    """A tiny real HTTP receiver on 127.0.0.1: answers ``fail_first`` requests with ``refuse_status`` (500), then
    200."""

    fail_first: int = 0
    delay: float = 0.0
    refuse_status: int = 500
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    @property
    def accepted_ids(self) -> Counter[str]:
        with self.lock:
            return Counter(h["Fencepost-Event-Id"] for h, _b in self.requests[self.fail_first:])


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a relay SIGKILLed mid-request leaves a broken pipe: expected in these tests, not worth a traceback


@contextmanager
def receiver(fail_first: int = 0, delay: float = 0.0, refuse_status: int = 500) -> Iterator[Receiver]:
    state = Receiver(fail_first=fail_first, delay=delay, refuse_status=refuse_status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if state.delay:
                time.sleep(state.delay)
            with state.lock:
                state.requests.append((dict(self.headers.items()), body))
                refuse = len(state.requests) <= state.fail_first
            self.send_response(state.refuse_status if refuse else 200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no" if refuse else b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _QuietServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/events"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def amqp_exchange(*, bind_queue: bool = True) -> Iterator[tuple[str, str | None]]:
    """A fresh fanout exchange (and a queue bound to it); both are deleted afterwards. No connection is held
    in between, so a test may have the broker close every client connection."""
    name = f"fencepost-test-{uuid.uuid4().hex[:12]}"
    queue = name + "-q" if bind_queue else None
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    channel.exchange_declare(name, exchange_type="fanout", durable=False)
    if queue is not None:
        channel.queue_declare(queue, durable=False)
        channel.queue_bind(queue, name)
    connection.close()
    try:
        yield name, queue
    finally:
        connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        channel = connection.channel()
        if queue is not None:
            channel.queue_delete(queue)
        channel.exchange_delete(name)
        connection.close()


def drain(queue: str) -> Counter[str]:
    """Consume every message now in ``queue`` with a real client; counts by message_id (checks the body's id)."""
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    seen: Counter[str] = Counter()
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        assert json.loads(body)["id"] == properties.message_id
        seen[properties.message_id] += 1
    connection.close()
    return seen


@dataclass
class FreezingProxy:
    """A real TCP proxy on 127.0.0.1 in front of RabbitMQ that can go silent: once ``freeze`` is called it keeps
    every connection open and forwards nothing more in either direction (a hung broker, or a path that drops
    packets without a reset)."""

    url: str = ""
    frozen: threading.Event = field(default_factory=threading.Event)

    def freeze(self) -> None:
        self.frozen.set()

    def thaw(self) -> None:
        self.frozen.clear()


@contextmanager
def freezing_amqp_proxy() -> Iterator[FreezingProxy]:
    """Forward 127.0.0.1:<port> to the broker at ``AMQP_URL`` until frozen (``FreezingProxy``)."""
    import socket

    state = FreezingProxy()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    state.url = f"amqp://guest:guest@127.0.0.1:{listener.getsockname()[1]}/%2F"
    stop = threading.Event()
    sockets: list[socket.socket] = []

    def pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while not stop.is_set():
                data = source.recv(65536)
                if not data:
                    return
                while state.frozen.is_set() and not stop.is_set():  # hold the bytes: never send, never close
                    time.sleep(0.05)
                target.sendall(data)
        except OSError:
            return

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", 5672))
            sockets.extend([client, upstream])
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(source, target), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
