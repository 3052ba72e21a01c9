"""Idempotency keys: the invocation id, the binding and the versioned params digest (host-spec B; ADR 0023).

A key is unique per ``(tenant, space, action_id, key)`` (B10) and the invocation id is derived from that
tuple, so a submitter whose COMMIT answer was lost finds the winner instead of creating a twin (B7). A new row
binds the key to the action version, the actor/authority binding and a **versioned** canonical digest of the
validated params (B1, B5, B6). A replay with an identical binding returns the existing invocation (B2); any
difference raises ``IdempotencyConflict`` naming the field, never echoing what is stored (B3, B4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fencepost.core.errors import IdempotencyConflict, IntegrityViolation
from fencepost.core.fingerprint import fingerprint
from fencepost.core.ids import derived_id
from fencepost.store.host_records import InvocationRecord

#: The canonicalization of new digests; stored digests keep naming their own (B5).
PARAMS_DIGEST_VERSION = "cp1"
BINDING_DIGEST_VERSION = "bd1"


def _cp1(params: dict[str, Any]) -> str:
    """cp1: SHA-256 over the canonical JSON of the validated params (``model_dump(mode="json")``), domain-separated."""
    return "cp1:" + fingerprint("fencepost.host.params/cp1", params)[len("sha256:"):]


#: Digest function by version: a row is compared with the canonicalization it was written with (B5).
DIGESTS: dict[str, Callable[[dict[str, Any]], str]] = {"cp1": _cp1}


def params_digest(params: dict[str, Any], version: str | None = None) -> str:
    """``<version>:<64 hex>`` of validated, JSON-mode params (key order and formatting do not matter, B6);
    ``version`` defaults to ``PARAMS_DIGEST_VERSION`` as it is when called.

    Raises:
        IntegrityViolation: an unknown canonicalization version (a row from a newer fencepost).
    """
    chosen = version or PARAMS_DIGEST_VERSION
    if chosen not in DIGESTS:
        raise IntegrityViolation(f"unknown parameter digest version {chosen!r}")
    return DIGESTS[chosen](params)


def binding_digest(action_version: int, actor: str, authority: str) -> str:
    """``bd1:<64 hex>`` of the action version and the actor/authority binding (B1)."""
    identity = {"action_version": action_version, "actor": actor, "authority": authority}
    return f"{BINDING_DIGEST_VERSION}:" + fingerprint("fencepost.host.binding/bd1", identity)[len("sha256:"):]


def invocation_id(tenant_id: str, space_id: str, action_id: str, idempotency_key: str) -> str:
    """The derived invocation id of a key in its scope (ADR 0023; host-spec §1.Y-9)."""
    return derived_id("inv", "host.invocation/v1", {"tenant": tenant_id, "space": space_id, "action": action_id,
                                                    "key": idempotency_key})


def check_replay(stored: InvocationRecord, *, action_version: int, actor: str, authority: str,
                 params: dict[str, Any]) -> None:
    """Whether a replay of ``stored``'s key may return it (B2-B5).

    Compared in this order: action version, actor, authority, then params under the stored digest's own version.

    Raises:
        IdempotencyConflict: ``field`` is ``action_version``, ``actor``, ``authority`` or ``parameters``.
        IntegrityViolation: the stored digest names an unknown version.
    """
    if stored.action_version != action_version:
        raise IdempotencyConflict("action_version")
    if stored.actor != actor:
        raise IdempotencyConflict("actor")
    if stored.authority != authority:
        raise IdempotencyConflict("authority")
    version = stored.params_digest.partition(":")[0]
    if params_digest(params, version) != stored.params_digest:
        raise IdempotencyConflict("parameters")
