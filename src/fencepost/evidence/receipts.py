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


def verify_receipt(receipt: ReceiptRecord) -> ReceiptIntegrity:
    """Recompute the fingerprint of a Receipt's stored evidence.

    Returns:
        ``ok`` when the stored text is canonical and its fingerprint matches; ``missing`` when the Receipt
        has no evidence; ``tampered`` otherwise, with the reason (never raises on bad data).
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
    return result("ok", "fingerprint verified")
