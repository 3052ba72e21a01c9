"""Store-level audit: schema readiness, physical integrity and every port's invariants.

Used by ``fencepost audit`` and the crash harness. Each finding names the check, the subject (a row id)
and what is wrong; an empty list means the database is sound.
"""

from __future__ import annotations

from fencepost.core.errors import IntegrityViolation, SchemaNotReady
from fencepost.store.base import Store
from fencepost.store.records import Finding

__all__ = ["CORRUPT", "Finding", "audit_store"]

#: The subject of the finding for a database file that cannot be read at all.
CORRUPT = "database file"


def audit_store(store: Store) -> list[Finding]:
    """Run every store-level check.

    Returns:
        Findings: ``schema`` (version mismatch: nothing else is checked then), ``integrity`` and
        ``foreign_keys`` (SQLite's ``integrity_check``/``foreign_key_check``), one per violated invariant
        (``AuditPort.invariant_findings``), and ``migration_checksum`` for an applied migration that differs
        from the one shipped. A database file too damaged to read is one ``integrity`` finding on ``database
        file`` (``CORRUPT``; nothing else is checked then), not an error (issue 11 item 8).
    """
    try:
        store.require_schema()
    except SchemaNotReady as error:
        return [Finding("schema", "fencepost_schema", str(error))]
    except IntegrityViolation as error:
        return [Finding("integrity", CORRUPT, str(error))]
    try:
        findings = [Finding(check, subject, detail) for check, subject, detail in store.physical_checks()]
    except IntegrityViolation as error:
        return [Finding("integrity", CORRUPT, str(error))]
    try:
        findings.extend(store.read(lambda tx: tx.audit.invariant_findings()))
    except IntegrityViolation as error:
        findings.append(Finding("integrity", CORRUPT, str(error)))
        return findings
    shipped = {m.version: m for m in store.migrations()}
    for version, checksum in store.read(lambda tx: tx.audit.schema_checksums()):
        step = shipped.get(version)
        if step is None or step.checksum != checksum:
            findings.append(Finding("migration_checksum", f"migration {version:04d}",
                                    "recorded checksum differs from the migration shipped with this fencepost"))
    return findings
