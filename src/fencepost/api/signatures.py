"""The ``Fencepost-Signature`` header of completion callbacks (ADR 0036; host-spec N, §1.Y-14).

A provider signs the raw request body with its shared secret::

    Fencepost-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, b"<t>." + body)>

The timestamp is inside the signed bytes, so a captured request cannot be re-dated; the server accepts it only
within a window around its own clock. A header may carry several ``v1=`` (a provider that rotates its secret
signs with the old and the new one); items of other schemes are ignored, so a later scheme can be added next to
``v1`` without breaking today's servers. Pure functions, no I/O: the endpoint decides what to answer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

HEADER = "Fencepost-Signature"
SCHEME = "v1"
DEFAULT_WINDOW_SECONDS = 300

#: A header longer than this, or with more signatures, is malformed: it bounds the work an unsigned request costs.
MAX_HEADER = 2048
MAX_SIGNATURES = 8


@dataclass(frozen=True)
class SignatureHeader:
    """A parsed header: the signed timestamp and every ``v1`` signature (lower-case hex, as sent)."""

    timestamp: int
    signatures: tuple[str, ...]


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``v1`` signature: lower-case hex HMAC-SHA256 of ``b"<timestamp>." + body`` under ``secret`` (UTF-8)."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secrets: str | Sequence[str], timestamp: int, body: bytes) -> str:
    """The header value a provider sends: ``t=<timestamp>,v1=<sig>`` with one ``v1`` per secret, in order.

    Args:
        secrets: one secret, or several while rotating. timestamp: unix seconds. body: the exact request bytes.
    """
    chosen = [secrets] if isinstance(secrets, str) else list(secrets)
    return ",".join([f"t={timestamp}", *(f"{SCHEME}={signature(s, timestamp, body)}" for s in chosen)])


def parse_header(value: str | None) -> SignatureHeader | None:
    """The header's timestamp and ``v1`` signatures, or None when it is missing or malformed (no or several ``t``,
    a ``t`` that is not decimal digits, no ``v1``, too long, too many signatures)."""
    if not value or len(value) > MAX_HEADER:
        return None
    timestamps: list[str] = []
    found: list[str] = []
    for item in value.split(","):
        key, sep, raw = item.strip().partition("=")
        if not sep:
            return None
        if key == "t":
            timestamps.append(raw)
        elif key == SCHEME:
            found.append(raw.lower())
    # isdigit() accepts other scripts' digits; an ASCII check keeps "t=١٢" out of int()
    if len(timestamps) != 1 or not (timestamps[0].isascii() and timestamps[0].isdigit()) or len(timestamps[0]) > 12:
        return None
    if not found or len(found) > MAX_SIGNATURES:
        return None
    return SignatureHeader(int(timestamps[0]), tuple(found))


def refusal(value: str | None, body: bytes, secrets: Sequence[str], *, now: float,
            window_seconds: float = DEFAULT_WINDOW_SECONDS) -> str | None:
    """Why the request is not authentic, or None when it is.

    Args:
        value: the ``Fencepost-Signature`` header (None when absent). body: the raw body bytes, before any parsing.
        secrets: the provider's accepted secrets (any one may match). now: the server's unix time.
        window_seconds: how far the signed timestamp may be from ``now``, either way.
    Returns:
        ``"missing"``, ``"malformed"``, ``"stale"`` (outside the window, past or future), ``"mismatch"`` or
        None. The reason is for the server's log only: the caller answers every refusal alike.
    """
    if not value:
        return "missing"
    header = parse_header(value)
    if header is None:
        return "malformed"
    if abs(now - header.timestamp) > window_seconds:
        return "stale"
    expected = [signature(secret, header.timestamp, body).encode() for secret in secrets]
    # Every pair is compared, in constant time each: no early exit tells a caller which signature came close.
    matched = False
    for given in header.signatures:
        for wanted in expected:
            matched |= hmac.compare_digest(given.encode("utf-8", "replace"), wanted)
    return None if matched else "mismatch"
