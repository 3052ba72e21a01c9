"""``fencepost audit``: check a control database and exit non-zero on any finding."""

from __future__ import annotations

import typer

from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.rehearsal.audit import audit as run_audit
from fencepost.store.url import DEFAULT_URL
from fencepost.workflows.audit import audit_admissions


def audit(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Check schema version, SQLite integrity and foreign keys, outbox and rehearsal invariants, every
    Receipt fingerprint, every frozen file digest, and every workflow admission against its re-derived
    Run, StepRuns, events, mutations and receipt. Exit 0 when sound, 1 on any finding."""
    with opened(database, require_schema=False, create=False) as store, handled():
        findings = run_audit(store)
        if not any(f.check == "schema" for f in findings):
            findings += audit_admissions(store)
        version = store.schema_version()
    data = {"sound": not findings, "schema_version": version,
            "findings": [{"check": f.check, "subject": f.subject, "detail": f.detail} for f in findings]}

    def text() -> None:
        if not findings:
            typer.echo(f"audit: sound (schema version {version}; integrity, foreign keys, invariants, "
                       "fingerprints all clean)")
        for f in findings:
            typer.echo(f"FINDING {f.check}: {f.subject}: {f.detail}")

    emit(json, data, text)
    if findings:
        raise typer.Exit(1)
