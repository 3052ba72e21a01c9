"""An adapter over HTTP (httpx) that tells "nothing was sent" from "sent, outcome unknown" (host-spec §2.3, F14).

``HttpAdapter.execute`` never raises. A raised error means "definitely not applied" to the host (host-spec F14),
and an HTTP call can fail *after* its request left, so every transport failure is turned into a typed reply
here, where it is still known how far the request got:

=============================================================  ===================================================
what happened                                                  reply
=============================================================  ===================================================
the deadline passed before the call                            ``PermanentFailure`` (no call made, F18)
no request possible (unknown operation, bad input or URL)      ``PermanentFailure`` (no call made)
connect refused, DNS failure, connect or pool timeout          ``TransientFailure`` (nothing sent)
read or write timeout                                          ``TimedOut``
a reset, a close without an answer, a protocol error           ``Ambiguous``
2xx with a JSON object body (204: no body)                     ``Succeeded(output=body)``
2xx with any other body                                        ``Ambiguous("uninterpretable reply: ...")``
202 with an operation reference                                ``Accepted(external_reference)``
202 without one                                                ``Ambiguous``
408, 425, 429 (the request was not processed)                  ``TransientFailure(retry_after)``
409 (the idempotency key is in use: maybe by our own attempt)  ``Ambiguous``
other 4xx (a decline)                                          ``PermanentFailure(the provider's error text)``
503 with a Retry-After                                         ``TransientFailure(retry_after)``
other 5xx, 1xx, 3xx                                            ``Ambiguous``; ``TransientFailure`` for a 5xx of an
                                                               operation declared idempotent
=============================================================  ===================================================

Decisions behind the table: docs/decisions/0028-http-adapter-classification.md.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, ClassVar

import httpx

from fencepost.host.adapter import (
    Accepted,
    AdapterCall,
    Ambiguous,
    PermanentFailure,
    Reply,
    Succeeded,
    TimedOut,
    TransientFailure,
)

#: Transport errors raised before any byte of the request left: the provider cannot have acted.
_NOTHING_SENT: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: 4xx statuses that say the request was not processed and may be sent again.
_NOT_PROCESSED = frozenset({408, 425, 429})
_BODYLESS_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
_TEXT_LIMIT = 300  # characters of provider text kept in a reason


@dataclass(frozen=True)
class HttpOperation:
    """How one adapter operation maps onto the provider's HTTP API.

    Attributes:
        path: the path below the adapter's base URL (``"/v1/charges"``).
        method: the HTTP method. ``GET``, ``HEAD``, ``DELETE`` and ``OPTIONS`` send the call's input as query
            parameters; the others send it as a JSON body.
        idempotent: the provider declares this endpoint idempotent (repeating it is harmless), so a 5xx is
            a ``TransientFailure`` to retry instead of ``Ambiguous`` (host-spec §2.3).
        reference_field: the field of a 202 body that names the accepted operation; the ``Location`` header
            is used when the body has none.
    """

    path: str
    method: str = "POST"
    idempotent: bool = False
    reference_field: str = "id"


@dataclass(frozen=True)
class HttpTimeouts:
    """Per-phase timeouts in seconds (httpx's phases). Each is further bounded by the call's deadline.

    Attributes:
        connect: establishing the connection (nothing is sent before it ends).
        write: each write of the request.
        read: each read of the response (time to the first byte, then between chunks).
        pool: waiting for a free connection of the pool.
    """

    connect: float = 5.0
    write: float = 10.0
    read: float = 30.0
    pool: float = 5.0


class HttpAdapter:
    """An ``Adapter`` (``fencepost.host.adapter``) calling a provider's HTTP API with httpx.

    Each call sends ``call.input`` (JSON body, or query parameters for bodiless methods) and
    ``call.adapter_invocation_id`` as the ``Idempotency-Key`` header, and answers one typed reply (the table
    of the module docstring). Subclasses adjust a call with ``headers(call)`` and ``body(call)``.

    The adapter is safe to share between threads (one httpx client) and keeps no cookies, so a call depends only
    on its own input. By default it keeps no idle connection:
    a request written on a kept-alive connection that the server was closing fails with no answer, which is
    ``Ambiguous`` although nothing was processed (docs/decisions/0028-http-adapter-classification.md).

    Args:
        base_url: the provider's root (``"http://127.0.0.1:8080"``).
        vendor: the provider's name, recorded on each step's row.
        operations: operation name (``AdapterCall.operation``) -> ``HttpOperation``.
        timeouts: per-phase timeouts; each is bounded by the call's deadline.
        headers: headers sent with every request (authentication, for example).
        keep_alive: keep idle connections for reuse (see above).
        max_response_bytes: a longer response body is not read: ``Ambiguous``.
        trust_env: take proxies and certificates from the environment (``HTTPS_PROXY``, ``SSL_CERT_FILE``...),
            as httpx does; a provider on loopback should say False.
        transport: an httpx transport to use instead of the default (tests, proxies, TLS settings).
    """

    type: ClassVar[str] = "http"
    idempotency_header: ClassVar[str] = "Idempotency-Key"

    def __init__(self, base_url: str, *, vendor: str, operations: Mapping[str, HttpOperation],
                 timeouts: HttpTimeouts | None = None, headers: Mapping[str, str] | None = None,
                 keep_alive: bool = False, max_response_bytes: int = 1 << 20, trust_env: bool = True,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.vendor = vendor
        self.operations = dict(operations)
        self.timeouts = timeouts or HttpTimeouts()
        self.max_response_bytes = max_response_bytes
        limits = httpx.Limits(max_keepalive_connections=None if keep_alive else 0)
        no_cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))  # no state between calls
        self._client = httpx.Client(base_url=base_url, headers=dict(headers or {}), limits=limits,
                                    cookies=no_cookies, follow_redirects=False, trust_env=trust_env,
                                    transport=transport)

    def close(self) -> None:
        """Close the connection pool. Calls after it answer ``TransientFailure`` (nothing sent)."""
        self._client.close()

    def __enter__(self) -> HttpAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def headers(self, call: AdapterCall) -> dict[str, str]:
        """Extra headers for one call (none by default). The idempotency key is added after, and wins."""
        return {}

    def body(self, call: AdapterCall) -> dict[str, Any]:
        """What one call sends (``call.input`` by default): a JSON body, or query parameters."""
        return call.input

    def execute(self, call: AdapterCall) -> Reply:
        """Call the provider once and classify what happened (module docstring). Never raises.

        Args:
            call: the step's call; ``call.deadline`` (``time.monotonic()`` seconds) bounds every timeout, and a
                call whose deadline has already passed sends nothing and answers ``PermanentFailure`` (with
                ``sent=False``, as every refusal before the request left: ADR 0113).
        Returns:
            One of the typed replies of ``fencepost.host.adapter``.
        """
        operation = self.operations.get(call.operation)
        if operation is None:
            return PermanentFailure(f"no request sent: {self.vendor} has no HTTP operation {call.operation!r}",
                                    sent=False)
        timeout = self._timeout(call.deadline)
        if timeout is None:
            return PermanentFailure(f"no request sent: the step's deadline passed before calling {self.vendor}",
                                    sent=False)
        try:
            request = self._request(operation, call, timeout)
        except Exception as error:
            return PermanentFailure(f"no request sent: the request could not be built ({_describe(error)})", sent=False)
        try:
            response = self._client.send(request, stream=True)
        except httpx.UnsupportedProtocol as error:  # a misconfigured base URL: no retry can help
            return PermanentFailure(f"no request sent to {self.vendor}: {_describe(error)}", sent=False)
        except _NOTHING_SENT as error:
            return TransientFailure(f"nothing sent to {self.vendor}: {_describe(error)}")
        except RuntimeError as error:  # a closed client refuses before sending anything
            if self._client.is_closed:
                return TransientFailure(f"nothing sent to {self.vendor}: the adapter is closed")
            return Ambiguous(f"{self.vendor} call failed after it may have been sent: {_describe(error)}")
        except httpx.TimeoutException as error:  # read or write timeout: the request left, in part or whole
            return TimedOut(f"timed out waiting for {self.vendor}: {_describe(error)}")
        except Exception as error:  # a reset, a close without an answer, a protocol error, anything else
            return Ambiguous(f"no answer from {self.vendor} after the request was sent: {_describe(error)}")
        try:
            content = self._read(response)
        except _BodyTooLarge:
            return Ambiguous(f"unreadable reply: {self.vendor}'s HTTP {response.status_code} body is larger "
                             f"than {self.max_response_bytes} bytes")
        except httpx.TimeoutException as error:
            return TimedOut(f"timed out reading {self.vendor}'s HTTP {response.status_code} reply: "
                            f"{_describe(error)}")
        except Exception as error:
            return Ambiguous(f"{self.vendor}'s HTTP {response.status_code} reply broke off: {_describe(error)}")
        finally:
            response.close()
        return self._classify(operation, response, content)

    def _timeout(self, deadline: float | None) -> httpx.Timeout | None:
        """The timeouts bounded by the deadline; None when the deadline has passed."""
        t = self.timeouts
        if deadline is None:
            return httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        return httpx.Timeout(connect=min(t.connect, remaining), read=min(t.read, remaining),
                             write=min(t.write, remaining), pool=min(t.pool, remaining))

    def _request(self, operation: HttpOperation, call: AdapterCall, timeout: httpx.Timeout) -> httpx.Request:
        headers = {**self.headers(call), self.idempotency_header: call.adapter_invocation_id}
        method = operation.method.upper()
        payload = self.body(call)
        if method in _BODYLESS_METHODS:
            params = {key: _query_value(value) for key, value in payload.items()}
            return self._client.build_request(method, operation.path, params=params, headers=headers,
                                              timeout=timeout)
        content = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode("utf-8")
        headers["Content-Type"] = "application/json"
        return self._client.build_request(method, operation.path, content=content, headers=headers,
                                          timeout=timeout)

    def _read(self, response: httpx.Response) -> bytes:
        """The body, refusing one past ``max_response_bytes``. Each read is bounded by the read timeout, itself
        bounded by the deadline; a complete answer that arrives after the deadline is still the answer."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_response_bytes:
                raise _BodyTooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    def _classify(self, operation: HttpOperation, response: httpx.Response, content: bytes) -> Reply:
        status = response.status_code
        label = f"{self.vendor} HTTP {status}"
        if status == 202:
            reference = _reference(content, operation.reference_field) or response.headers.get("location")
            if reference:
                return Accepted(external_reference=reference, output=_object(content) or {})
            return Ambiguous(f"uninterpretable reply: {label} accepted the request without an operation "
                             f"reference ({operation.reference_field!r} or Location)")
        if status == 204:
            return Succeeded(output={})
        if 200 <= status < 300:
            body = _object(content)
            if body is None:
                return Ambiguous(f"uninterpretable reply: {label} body is {_kind(content)}, not a JSON object")
            return Succeeded(output=body)
        retry_after = _retry_after(response.headers.get("retry-after"))
        if status in _NOT_PROCESSED:
            return TransientFailure(f"{label}: {_error_text(content)}", retry_after=retry_after)
        if status == 409:
            return Ambiguous(f"{label} conflict: the idempotency key may already be in use by an earlier "
                             f"attempt: {_error_text(content)}")
        if 400 <= status < 500:
            return PermanentFailure(f"{label}: {_error_text(content)}")
        if status == 503 and retry_after is not None:
            return TransientFailure(f"{label}: {_error_text(content)}", retry_after=retry_after)
        if 500 <= status < 600 and operation.idempotent:
            return TransientFailure(f"{label} (idempotent endpoint): {_error_text(content)}",
                                    retry_after=retry_after)
        if 500 <= status < 600:
            return Ambiguous(f"{label}, the outcome is unknown: {_error_text(content)}")
        return Ambiguous(f"uninterpretable reply: unexpected {label}")


class _BodyTooLarge(Exception):
    pass


def _describe(error: BaseException) -> str:
    try:
        message = str(error)
    except Exception:
        message = ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _query_value(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def _parse(content: bytes) -> tuple[bool, object]:
    try:
        return True, json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False, None


def _object(content: bytes) -> dict[str, Any] | None:
    ok, value = _parse(content)
    return value if ok and isinstance(value, dict) else None


def _kind(content: bytes) -> str:
    if not content:
        return "empty"
    ok, value = _parse(content)
    if not ok:
        return "not JSON"
    return {list: "a JSON array", str: "a JSON string", bool: "a JSON boolean", type(None): "JSON null"}.get(
        type(value), "a JSON number")


def _reference(content: bytes, field: str) -> str | None:
    body = _object(content)
    value = body.get(field) if body is not None else None
    return value if isinstance(value, str) and value.strip() else None


def _error_text(content: bytes) -> str:
    """The provider's own words: ``error.message``, ``error``, ``message`` of a JSON body, or its text."""
    body = _object(content)
    if body is not None:
        error = body.get("error")
        candidates = [error.get("message") if isinstance(error, dict) else error, body.get("message")]
        for candidate in candidates:
            if isinstance(candidate, str) and candidate.strip():
                return candidate.strip()[:_TEXT_LIMIT]
    text = content.decode("utf-8", errors="replace").strip()
    return text[:_TEXT_LIMIT] if text else "no error text"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delay-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
