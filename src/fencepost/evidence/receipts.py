"""Evidence sealing and integrity verification.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Attempt Comparison": the raw
``evidence_fingerprint`` is the per-Attempt integrity check. Evidence is stored as canonical JSON text;
its fingerprint is SHA-256 in the ``receipt-evidence/v1`` domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.core.fingerprint import fingerprint
from fencepost.store.records import ReceiptRecord

EVIDENCE_DOMAIN = "receipt-evidence/v1"


def seal(evidence: dict[str, Any]) -> tuple[str, str]:
    """Canonicalize ``evidence`` and fingerprint it.

    Returns:
        ``(canonical_text, "sha256:<hex>")``.
    Raises:
        TypeError: ``evidence`` is not plain JSON data.
    """
    return canonical_json(evidence), fingerprint(EVIDENCE_DOMAIN, evidence)


@dataclass(frozen=True)
class ReceiptIntegrity:
    """Outcome of verifying one Receipt: ``ok`` or ``tampered`` with the reason."""

    receipt_id: str
    position: int
    scenario: str
    status: str  # "ok" | "tampered" | "missing"
    reason: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def verify_receipt(receipt: ReceiptRecord, *, content_digest: str | None = None) -> ReceiptIntegrity:
    """Recompute the fingerprint of a Receipt's stored evidence and check the evidence is this Receipt's.

    A fingerprint alone proves only that text and digest agree; evidence copied from another Receipt,
    Attempt or package would still verify. So the evidence envelope must also name this Receipt's
    scenario, position, status and delivery, its Attempt, and (when given) its Run's package content.

    Args:
        receipt: the stored Receipt.
        content_digest: the Run's package content digest the evidence must name, if known.
    Returns:
        ``ok`` when all of that holds; ``missing`` when the Receipt has no evidence; ``tampered`` otherwise,
        with the reason (never raises on bad data).
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
        text, expected = seal(value) if isinstance(value, dict) else ("", "")
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
    return result("ok", "fingerprint verified")


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
