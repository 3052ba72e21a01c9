"""Idempotency keys: the invocation id, the binding and the versioned params digest (host-spec B; ADR 0023).

A key is unique per ``(tenant, space, action_id, key)`` (B10); a submitter whose COMMIT answer was lost finds the
winner by its key instead of creating a twin (B7). A new invocation's id is derived from that tuple and the
control database's identity (ADR 0108), so its provider keys are its database's own. A new row
binds the key to the action version, the actor/authority binding and a **versioned** canonical digest of the
validated params (B1, B5, B6). A replay with an identical binding returns the existing invocation (B2); any
difference raises ``IdempotencyConflict`` naming the field, never echoing what is stored (B3, B4).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import IdempotencyConflict, IntegrityViolation
from fencepost.core.fingerprint import fingerprint
from fencepost.core.ids import derived_id
from fencepost.store.host_records import InvocationRecord

#: The canonicalization of new digests; stored digests keep naming their own (B5). ``hk1`` when a key is given.
PARAMS_DIGEST_VERSION = "cp1"
KEYED_DIGEST_VERSION = "hk1"
BINDING_DIGEST_VERSION = "bd1"


def _cp1(params: dict[str, Any]) -> str:
    """cp1: SHA-256 over the canonical JSON of the validated params (``model_dump(mode="json")``), domain-separated."""
    return "cp1:" + fingerprint("fencepost.host.params/cp1", params)[len("sha256:"):]


#: Digest function by version: a row is compared with the canonicalization it was written with (B5).
DIGESTS: dict[str, Callable[[dict[str, Any]], str]] = {"cp1": _cp1}


def _hk1(params: dict[str, Any], key: bytes) -> str:
    """hk1: HMAC-SHA-256 under the host's ``params_digest_key`` over the same domain-separated canonical JSON as
    cp1, so a stored digest of low-entropy params (a card number) cannot be brute-forced without the key
    (host-spec §1.Y-9; ADR 0053)."""
    message = b"fencepost.host.params/hk1\x00" + canonical_json(params).encode("utf-8")
    return "hk1:" + hmac.new(key, message, hashlib.sha256).hexdigest()


def params_digest(params: dict[str, Any], version: str | None = None, *, key: bytes | None = None) -> str:
    """``<version>:<64 hex>`` of validated, JSON-mode params (key order and formatting do not matter, B6);
    ``version`` defaults to ``hk1`` when ``key`` is given (keyed, ADR 0053), else ``PARAMS_DIGEST_VERSION``.

    Raises:
        IntegrityViolation: an unknown canonicalization version (a row from a newer fencepost), or a keyed
            (``hk1``) digest to compare without the key.
    """
    chosen = version or (KEYED_DIGEST_VERSION if key is not None else PARAMS_DIGEST_VERSION)
    if chosen == KEYED_DIGEST_VERSION:
        if key is None:
            raise IntegrityViolation("this invocation's parameter digest is keyed (hk1): configure the host's "
                                     "HostConfig(params_digest_key=...) to compare a replay with it")
        return _hk1(params, key)
    if chosen not in DIGESTS:
        raise IntegrityViolation(f"unknown parameter digest version {chosen!r}")
    return DIGESTS[chosen](params)


def binding_digest(action_version: int, actor: str, authority: str) -> str:
    """``bd1:<64 hex>`` of the action version and the actor/authority binding (B1)."""
    identity = {"action_version": action_version, "actor": actor, "authority": authority}
    return f"{BINDING_DIGEST_VERSION}:" + fingerprint("fencepost.host.binding/bd1", identity)[len("sha256:"):]


def invocation_id(store_identity: str, tenant_id: str, space_id: str, action_id: str, idempotency_key: str) -> str:
    """The derived id of a new invocation of ``idempotency_key`` in its scope (ADR 0023; host-spec §1.Y-9, B10),
    in the control database whose identity is ``store_identity`` (``HostPort.store_identity``, ADR 0108).

    Every id of the invocation's records, and the key its steps send to a provider (``adapter_invocation_id``),
    is derived from this one, so two control databases using the same keys with one provider account never send
    it the same key. A replay is found by its key (``HostPort.find_invocation``), never by re-deriving the id:
    an invocation stored before version 17 keeps the id it was given (``host.invocation/v1``, without identity).
    """
    return derived_id("inv", "host.invocation/v2", {"store": store_identity, "tenant": tenant_id, "space": space_id,
                                                    "action": action_id, "key": idempotency_key})


def check_replay(stored: InvocationRecord, *, action_version: int, actor: str, authority: str,
                 params: dict[str, Any], key: bytes | None = None) -> None:
    """Whether a replay of ``stored``'s key may return it (B2-B5).

    Compared in this order: action version, actor, authority, then params under the stored digest's own version
    (``key``: the host's ``params_digest_key``, for an ``hk1`` digest).

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
    if not hmac.compare_digest(params_digest(params, version, key=key), stored.params_digest):
        raise IdempotencyConflict("parameters")
