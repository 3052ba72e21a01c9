"""Identifiers.

Two kinds: random ids for new records (``new_id``) and deterministic ids derived from the canonical
JSON of an identity (``derived_id``), used wherever a retry after a lost COMMIT response must find the
durable winner instead of creating a twin (DESIGN.md, invariants).
"""

from __future__ import annotations

import secrets

from fencepost.core.canonical import JSONValue
from fencepost.core.fingerprint import fingerprint


def new_id(prefix: str) -> str:
    """A fresh random id such as ``"att_5f2c..."`` (prefix, underscore, 26 hex chars = 104 bits)."""
    return f"{prefix}_{secrets.token_hex(13)}"


def derived_id(prefix: str, domain: str, identity: JSONValue) -> str:
    """A deterministic id: the same ``(domain, identity)`` always yields the same id.

    Args:
        prefix: short type tag, e.g. ``"run"``.
        domain: fingerprint domain, e.g. ``"workflow-run/v1"``.
        identity: plain JSON data that identifies the record.
    Returns:
        ``"<prefix>_<32 hex>"`` (128 bits of the domain-separated SHA-256).
    """
    return f"{prefix}_{fingerprint(domain, identity)[7:39]}"
