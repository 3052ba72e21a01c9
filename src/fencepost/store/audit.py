"""Store-level audit: schema readiness, physical integrity and the invariants in ``audit.sql``.

Used by ``fencepost audit`` and the crash harness. Each finding names the check, the subject (a row id)
and what is wrong; an empty list means the database is sound.
"""

from __future__ import annotations

from dataclasses import dataclass

from fencepost.core.errors import SchemaNotReady
from fencepost.store.base import Store, Transaction
from fencepost.store.queries import load_queries

INVARIANT_QUERIES = tuple(name for name in load_queries("fencepost.store.sqlite", "audit.sql")
                          if name.startswith("audit_") and not name.startswith(("audit_evidence", "audit_file")))


@dataclass(frozen=True)
class Finding:
    check: str
    subject: str
    detail: str


def audit_store(store: Store) -> list[Finding]:
    """Run every store-level check.

    Returns:
        Findings: ``schema`` (version mismatch: nothing else is checked then), ``integrity`` and
        ``foreign_keys`` (SQLite's ``integrity_check``/``foreign_key_check``), and one per invariant query.
    """
    try:
        store.require_schema()
    except SchemaNotReady as error:
        return [Finding("schema", "fencepost_schema", str(error))]
    findings = [Finding(check, subject, detail) for check, subject, detail in store.physical_checks()]

    def invariants(tx: Transaction) -> list[Finding]:
        found = []
        for name in INVARIANT_QUERIES:
            for row in tx._run(name, {}).rows:
                found.append(Finding(name.removeprefix("audit_"), str(row["subject"]), str(row["detail"])))
        return found

    findings.extend(store.read(invariants))
    shipped = {m.version: m for m in store.migrations()}
    for row in store.read(lambda tx: tx._run("schema_checksums", {}).rows):
        step = shipped.get(int(row["version"]))
        if step is None or step.checksum != row["checksum"]:
            findings.append(Finding("migration_checksum", f"migration {int(row['version']):04d}",
                                    "recorded checksum differs from the migration shipped with this fencepost"))
    return findings
