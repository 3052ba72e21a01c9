"""``fencepost audit``: is this control database sound?

Combines the store-level audit (schema version, SQLite ``integrity_check`` and ``foreign_key_check``, the
outbox and rehearsal invariants) with evidence checks that need Python: every Receipt's fingerprint is
recomputed and its seal checked (ADR 0064), and every frozen package file's digest re-verified.
"""

from __future__ import annotations

from fencepost.core.errors import IntegrityViolation, InvalidInput
from fencepost.core.fingerprint import sha256_bytes
from fencepost.evidence.receipts import verify_receipt
from fencepost.evidence.sealing import SealKeys, load_seal_keys
from fencepost.store.audit import CORRUPT, Finding, audit_store
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork

#: Receipt integrity status -> finding check (``tampered`` and anything else: ``evidence_fingerprint``).
_CHECKS = {"unsealed": "evidence_unsealed", "unverifiable": "evidence_seal_key"}


def audit(store: Store, keys: SealKeys | None = None) -> list[Finding]:
    """All findings for ``store`` (empty when sound). Never raises on bad data: bad data is a finding.

    Args:
        keys: the seal keys Receipts are verified with (the configured ones when None, never created here:
            keys that cannot be loaded make every sealed Receipt an ``evidence_seal_key`` finding).
    Returns:
        The store-level findings, then one per Receipt that does not verify: ``evidence_fingerprint``
        (tampered), ``evidence_unsealed`` (no seal: recorded before sealing, or stripped; ADR 0064),
        ``evidence_seal_key`` (sealed under a key not held), and ``frozen_file`` per changed package file.
    """
    findings = audit_store(store)
    if any(f.check == "schema" or f.subject == CORRUPT for f in findings):
        return findings
    if keys is None:
        try:
            keys = load_seal_keys(create=False)
        except InvalidInput:
            keys = None  # verify_receipt reports each sealed Receipt unverifiable, with the reason

    def evidence(tx: UnitOfWork) -> list[Finding]:
        found = []
        for receipt, content_digest in tx.audit.sealed_receipts():
            check = verify_receipt(receipt, content_digest=content_digest, keys=keys)
            if not check.ok:
                found.append(Finding(_CHECKS.get(check.status, "evidence_fingerprint"), receipt.id,
                                     f"receipt {receipt.position} of {receipt.attempt_id}: {check.reason}"))
        for file in tx.audit.frozen_files():
            if sha256_bytes(file.content) != file.sha256:
                found.append(Finding("frozen_file", f"{file.run_id}:{file.path}",
                                     "file bytes do not match the recorded digest"))
        return found

    try:
        findings.extend(store.read(evidence))
    except IntegrityViolation as error:  # a page of the file is damaged: the audit reports it, never crashes
        findings.append(Finding("integrity", CORRUPT, str(error)))
    return findings
