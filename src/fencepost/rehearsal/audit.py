"""``fencepost audit``: is this control database sound?

Combines the store-level audit (schema version, SQLite ``integrity_check`` and ``foreign_key_check``, the
outbox and rehearsal invariants) with evidence checks that need Python: every Receipt's fingerprint is
recomputed and every frozen package file's digest re-verified.
"""

from __future__ import annotations

from fencepost.core.fingerprint import sha256_bytes
from fencepost.evidence.receipts import verify_receipt
from fencepost.store.audit import Finding, audit_store
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork


def audit(store: Store) -> list[Finding]:
    """All findings for ``store`` (empty when sound). Never raises on bad data: bad data is a finding."""
    findings = audit_store(store)
    if any(f.check == "schema" for f in findings):
        return findings

    def evidence(tx: UnitOfWork) -> list[Finding]:
        found = []
        for receipt, content_digest in tx.audit.sealed_receipts():
            check = verify_receipt(receipt, content_digest=content_digest)
            if not check.ok:
                found.append(Finding("evidence_fingerprint", receipt.id,
                                     f"receipt {receipt.position} of {receipt.attempt_id}: {check.reason}"))
        for file in tx.audit.frozen_files():
            if sha256_bytes(file.content) != file.sha256:
                found.append(Finding("frozen_file", f"{file.run_id}:{file.path}",
                                     "file bytes do not match the recorded digest"))
        return found

    findings.extend(store.read(evidence))
    return findings
