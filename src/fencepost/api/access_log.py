"""One access log line per HTTP request (ADR 0068): method, path, status, bytes sent, duration and client.

Written to the ``fencepost.access`` logger, so it goes wherever ``fencepost serve``'s other log lines go (JSON or
text on stderr). What could carry a secret is never written: request headers (the bearer token travels in
``Authorization``) are not read, and a query parameter whose name says it holds a secret keeps its name only.
"""

from __future__ import annotations

import logging
import re
import time
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOGGER = logging.getLogger("fencepost.access")

#: A query parameter whose name matches is logged as ``name=[redacted]``.
SECRET_NAME = re.compile(r"token|secret|key|password|signature|auth", re.IGNORECASE)
REDACTED = "[redacted]"


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
            path = scope.get("path", "") + (f"?{query}" if query else "")
            client = scope.get("client")
            self.logger.info("%s %s %d", scope.get("method", ""), path, status,
                             extra={"method": scope.get("method", ""), "path": path, "status": status,
                                    "bytes": sent, "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                                    "client": f"{client[0]}:{client[1]}" if client else None})
