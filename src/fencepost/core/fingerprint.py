"""SHA-256 fingerprints with domain separation.

Each fingerprint hashes ``b"fencepost:" + domain + b"\\x00" + canonical JSON`` so that two kinds of
record with the same content can never share a fingerprint. Output is ``"sha256:" + 64 hex digits``.
"""

from __future__ import annotations

import hashlib
import re

from fencepost.core.canonical import JSONValue, canonical_bytes

PREFIX = "sha256:"
FINGERPRINT_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def fingerprint(domain: str, value: JSONValue) -> str:
    """Fingerprint ``value`` in ``domain``.

    Args:
        domain: a short stable name such as ``"receipt-evidence/v1"``; never empty.
        value: plain JSON data.
    Returns:
        ``"sha256:<64 hex>"``.
    Raises:
        ValueError: if ``domain`` is empty or contains a NUL byte.
        TypeError: if ``value`` is not plain JSON data.
    """
    if not domain or "\x00" in domain:
        raise ValueError("fingerprint domain must be a non-empty string without NUL")
    digest = hashlib.sha256()
    digest.update(b"fencepost:" + domain.encode("utf-8") + b"\x00")
    digest.update(canonical_bytes(value))
    return PREFIX + digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Plain SHA-256 of raw bytes (file contents), as ``"sha256:<64 hex>"``."""
    return PREFIX + hashlib.sha256(data).hexdigest()


def is_fingerprint(text: object) -> bool:
    """True when ``text`` has the ``sha256:<64 lowercase hex>`` shape."""
    return isinstance(text, str) and FINGERPRINT_RE.fullmatch(text) is not None
