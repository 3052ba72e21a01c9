"""``fencepost audit``: is this control database sound?

Combines the store-level audit (schema version, SQLite ``integrity_check`` and ``foreign_key_check``, the
outbox and rehearsal invariants) with evidence checks that need Python: every Receipt's fingerprint is
recomputed and every frozen package file's digest re-verified.
"""

from __future__ import annotations

from fencepost.core.fingerprint import sha256_bytes
from fencepost.evidence.receipts import verify_receipt
from fencepost.store.audit import Finding, audit_store
from fencepost.store.base import Store, Transaction
from fencepost.store.rehearsal_ops import receipt_from_row


def audit(store: Store) -> list[Finding]:
    """All findings for ``store`` (empty when sound). Never raises on bad data: bad data is a finding."""
    findings = audit_store(store)
    if any(f.check == "schema" for f in findings):
        return findings

    def evidence(tx: Transaction) -> list[Finding]:
        found = []
        for row in tx._run("audit_evidence_rows", {}).rows:
            check = verify_receipt(receipt_from_row(row), content_digest=str(row["content_digest"]))
            if not check.ok:
                found.append(Finding("evidence_fingerprint", str(row["id"]),
                                     f"receipt {row['position']} of {row['attempt_id']}: {check.reason}"))
        for row in tx._run("audit_file_rows", {}).rows:
            if sha256_bytes(bytes(row["content"])) != row["sha256"]:
                found.append(Finding("frozen_file", f"{row['run_id']}:{row['path']}",
                                     "file bytes do not match the recorded digest"))
        return found

    findings.extend(store.read(evidence))
    return findings
