"""Real HTTP servers on loopback for adapter tests: each request is answered by a scripted behaviour, and every
request the server read is recorded (method, path, headers, body) so a test can prove what was, or was not, sent."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    """One request a loopback server read completely."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Loopback:
    """A running server: its base URL, what it received, and an event that ends sleeping behaviours."""

    url: str
    received: list[Received] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)


Behaviour = Callable[[BaseHTTPRequestHandler, Loopback], None]


def reply(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Behaviour:
    """Answer ``status`` with ``body`` and ``headers``."""

    def behave(handler: BaseHTTPRequestHandler, server: Loopback) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return behave


def close_without_answer(handler: BaseHTTPRequestHandler, server: Loopback) -> None:
    """Read the request, then close the connection with no byte of an answer."""
    handler.close_connection = True


def reset_connection(handler: BaseHTTPRequestHandler, server: Loopback) -> None:
    """Read the request, then reset the connection (RST: SO_LINGER with a zero timeout)."""
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.connection.close()
    handler.close_connection = True


def not_http(handler: BaseHTTPRequestHandler, server: Loopback) -> None:
    """Answer bytes that are not an HTTP response (a protocol error for the client)."""
    handler.wfile.write(b"THIS IS NOT HTTP\r\n\r\n")
    handler.close_connection = True


def sleep_then(seconds: float, then: Behaviour) -> Behaviour:
    """Sleep ``seconds`` (cut short when the server stops), then behave as ``then``."""

    def behave(handler: BaseHTTPRequestHandler, server: Loopback) -> None:
        server.stopping.wait(seconds)
        with suppress(OSError):  # the client gave up and left
            then(handler, server)

    return behave


@contextmanager
def loopback_server(behaviour: Behaviour, protocol: str = "HTTP/1.0") -> Iterator[Loopback]:
    """A ThreadingHTTPServer on 127.0.0.1:0 in a thread, answering every request with ``behaviour``;
    ``protocol="HTTP/1.1"`` keeps connections open between requests."""
    state = Loopback(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = protocol

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.received.append(Received(self.command, self.path, dict(self.headers.items()), body))
            behaviour(self, state)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def full_backlog() -> Iterator[int]:
    """A loopback port whose listen queue is full: a new connection attempt hangs until its connect timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.05)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


class NeverReads:
    """A server that accepts connections and never reads them, so a large request blocks its writer."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(0.05)
        self.port = int(self.listener.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            self.accepted.append(conn)

    def __enter__(self) -> NeverReads:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self.accepted:
            conn.close()
        self.listener.close()
