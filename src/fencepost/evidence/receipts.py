"""Evidence sealing and integrity verification.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Attempt Comparison": the raw
``evidence_fingerprint`` is the per-Attempt integrity check. Evidence is stored as canonical JSON text;
its fingerprint is SHA-256 in the ``receipt-evidence/v1`` domain.

Issue 11 item 7 (ADR 0064): a plain fingerprint can be recomputed by whoever edits the evidence, so the
evidence also carries a **seal**: ``"seal": {"alg": "hmac-sha256", "key_id", "mac"}``, the HMAC-SHA-256 under
a key kept outside the control database (``evidence.sealing``) of the fingerprint of the evidence without its
seal. The stored fingerprint is that of the whole sealed text (it stays the raw value compared across
Attempts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.core.errors import InvalidInput
from fencepost.core.fingerprint import fingerprint
from fencepost.evidence.sealing import SEAL_ALGORITHM, SealKeys, load_seal_keys
from fencepost.store.records import ReceiptRecord

EVIDENCE_DOMAIN = "receipt-evidence/v1"
#: The top-level evidence field that holds the seal (never part of the semantic comparison).
SEAL_FIELD = "seal"


def seal(evidence: dict[str, Any], keys: SealKeys | None = None) -> tuple[str, str]:
    """Seal ``evidence`` under the active key, canonicalize it and fingerprint the sealed whole.

    Args:
        evidence: the Receipt's evidence (any ``"seal"`` field in it is replaced).
        keys: the seal keys (``load_seal_keys()`` when None: the process's configured keys).
    Returns:
        ``(canonical_text, "sha256:<hex>")``: the text holds the ``"seal"`` field.
    Raises:
        TypeError: ``evidence`` is not plain JSON data.
        InvalidInput: no usable seal key (``load_seal_keys`` says why).
    """
    keys = load_seal_keys() if keys is None else keys
    body = {k: v for k, v in evidence.items() if k != SEAL_FIELD}
    sealed = {**body, SEAL_FIELD: keys.seal(fingerprint(EVIDENCE_DOMAIN, body))}
    return canonical_json(sealed), fingerprint(EVIDENCE_DOMAIN, sealed)


@dataclass(frozen=True)
class ReceiptIntegrity:
    """Outcome of verifying one Receipt, with the reason.

    ``status``: ``ok`` (fingerprint and seal verify); ``tampered`` (they do not, or the evidence belongs
    elsewhere); ``missing`` (no evidence yet); ``unsealed`` (valid fingerprint but no seal: recorded before
    sealing existed, or the seal was stripped, which cannot be told apart); ``unverifiable`` (sealed with a key
    id this process does not hold).
    """

    receipt_id: str
    position: int
    scenario: str
    status: str  # "ok" | "tampered" | "missing" | "unsealed" | "unverifiable"
    reason: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def verify_receipt(receipt: ReceiptRecord, *, content_digest: str | None = None,
                   keys: SealKeys | None = None) -> ReceiptIntegrity:
    """Recompute the fingerprint of a Receipt's stored evidence, check its seal and that it is this Receipt's.

    A fingerprint alone proves only that text and digest agree; evidence copied from another Receipt,
    Attempt or package would still verify. So the evidence envelope must also name this Receipt's
    scenario, position, status and delivery, its Attempt, and (when given) its Run's package content.

    Args:
        receipt: the stored Receipt.
        content_digest: the Run's package content digest the evidence must name, if known.
        keys: the seal keys (``load_seal_keys()`` when None; keys that cannot be loaded make a sealed Receipt
            ``unverifiable``).
    Returns:
        ``ok`` when all of that holds; ``missing`` when the Receipt has no evidence; ``unsealed`` or
        ``unverifiable`` (see ``ReceiptIntegrity``); ``tampered`` otherwise, with the reason (never raises on
        bad data).
    """

    def result(status: str, reason: str) -> ReceiptIntegrity:
        return ReceiptIntegrity(receipt.id, receipt.position, receipt.scenario, status, reason)

    if receipt.evidence is None or receipt.evidence_fingerprint is None:
        return result("missing", "no evidence recorded")
    try:
        value = parse_json(receipt.evidence)
    except ValueError:
        return result("tampered", "stored evidence is not valid JSON")
    try:
        text, expected = ((canonical_json(value), fingerprint(EVIDENCE_DOMAIN, value)) if isinstance(value, dict)
                          else ("", ""))
    except TypeError:
        return result("tampered", "stored evidence is not plain JSON data")
    if not expected:
        return result("tampered", "stored evidence is not a JSON object")
    if expected != receipt.evidence_fingerprint:
        return result("tampered", "evidence fingerprint does not match the stored evidence")
    if text != receipt.evidence:
        return result("tampered", "stored evidence text is not in canonical form")
    assert isinstance(value, dict)
    mismatch = _binding_mismatch(value, receipt, content_digest)
    if mismatch:
        return result("tampered", f"evidence belongs elsewhere: {mismatch}")
    return _check_seal(value, keys, result)


def _check_seal(evidence: dict[str, Any], keys: SealKeys | None,
                result: Callable[[str, str], ReceiptIntegrity]) -> ReceiptIntegrity:
    stamp = evidence.get(SEAL_FIELD)
    if stamp is None:
        return result("unsealed", "the fingerprint verifies but the evidence carries no seal (recorded before "
                                  "sealing, or its seal was removed): not proof against a recomputed fingerprint")
    if not isinstance(stamp, dict) or stamp.get("alg") != SEAL_ALGORITHM \
            or not isinstance(stamp.get("key_id"), str) or not isinstance(stamp.get("mac"), str):
        return result("tampered", "the evidence seal is malformed")
    if keys is None:
        try:
            keys = load_seal_keys(create=False)
        except InvalidInput as error:
            return result("unverifiable", f"the seal keys cannot be loaded: {error}")
    body = {k: v for k, v in evidence.items() if k != SEAL_FIELD}
    matched = keys.matches(stamp["key_id"], fingerprint(EVIDENCE_DOMAIN, body), stamp["mac"])
    if matched is None:
        return result("unverifiable", f"sealed with key {stamp['key_id']!r}, which is not among the seal keys "
                                      f"of {keys.source}")
    if not matched:
        return result("tampered", "the evidence seal does not match: the evidence was changed after sealing")
    return result("ok", f"fingerprint and seal verified (key {stamp['key_id']})")


def _binding_mismatch(evidence: dict[str, Any], receipt: ReceiptRecord, content_digest: str | None) -> str | None:
    raw_execution, raw_package = evidence.get("execution"), evidence.get("package")
    execution: dict[str, Any] = raw_execution if isinstance(raw_execution, dict) else {}
    package: dict[str, Any] = raw_package if isinstance(raw_package, dict) else {}
    checks = [("scenario", evidence.get("scenario"), receipt.scenario),
              ("position", evidence.get("position"), receipt.position),
              ("status", evidence.get("status"), str(receipt.status)),
              ("execution.attempt_id", execution.get("attempt_id"), receipt.attempt_id),
              ("execution.delivery", execution.get("delivery"), receipt.delivery)]
    if content_digest is not None:
        checks.append(("package.content_digest", package.get("content_digest"), content_digest))
    for name, found, expected in checks:
        if found != expected:
            return f"{name} is {found!r}, the receipt's is {expected!r}"
    return None
