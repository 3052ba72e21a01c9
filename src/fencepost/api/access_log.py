"""One access log line per HTTP request (ADR 0068): method, path, status, bytes sent, duration and client.

Written to the ``fencepost.access`` logger, so it goes wherever ``fencepost serve``'s other log lines go (JSON or
text on stderr). What could carry a secret is never written: request headers (the bearer token travels in
``Authorization``) are not read, and a query parameter whose name says it holds a secret keeps its name only.
"""

from __future__ import annotations

import logging
import re
import time
from urllib.parse import parse_qsl, quote, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOGGER = logging.getLogger("fencepost.access")

#: A query parameter whose name matches is logged as ``name=[redacted]``.
SECRET_NAME = re.compile(r"token|secret|key|password|signature|auth", re.IGNORECASE)
REDACTED = "[redacted]"


#: Characters a decoded request path may hold that would break a log line: C0 and C1 controls (a newline
#: starts a forged line, an escape sequence rewrites the terminal) and the Unicode line and paragraph separators.
_UNSAFE_IN_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def loggable_path(path: str) -> str:
    """``path`` (already percent-decoded by the server) with each control character percent-encoded again, so
    that a client cannot write a line of its own, or terminal escapes, into the access log."""
    return _UNSAFE_IN_LINE.sub(lambda m: quote(m.group(), safe=""), path)


def loggable_query(query: str) -> str:
    """``query`` (``a=1&token=x``) with the values of secret-named parameters replaced by ``[redacted]``."""
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, REDACTED if SECRET_NAME.search(k) else v) for k, v in pairs], safe="/:,[]")


class AccessLog:
    """ASGI middleware: after each HTTP response, log ``METHOD path status`` with ``status``, ``bytes``,
    ``duration_ms`` and ``client`` fields (a request the client dropped before a response logs status 0)."""

    def __init__(self, app: ASGIApp, logger: logging.Logger = LOGGER) -> None:
        self.app = app
        self.logger = logger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, sent = 0, 0

        async def counting(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            query = loggable_query(scope.get("query_string", b"").decode("latin-1"))
            path = loggable_path(scope.get("path", "")) + (f"?{query}" if query else "")
            client = scope.get("client")
            self.logger.info("%s %s %d", scope.get("method", ""), path, status,
                             extra={"method": scope.get("method", ""), "path": path, "status": status,
                                    "bytes": sent, "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                                    "client": f"{client[0]}:{client[1]}" if client else None})
