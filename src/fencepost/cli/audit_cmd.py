"""``fencepost audit``: check a control database and exit non-zero on any finding."""

from __future__ import annotations

import typer

from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.core.errors import IntegrityViolation
from fencepost.rehearsal.audit import audit as run_audit
from fencepost.store.audit import CORRUPT, Finding
from fencepost.store.url import DEFAULT_URL
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.progress_audit import audit_progress


def audit(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Check schema version, SQLite integrity and foreign keys, outbox and rehearsal invariants, every
    Receipt fingerprint, every frozen file digest, and every workflow admission against its re-derived
    Run, StepRuns, events, mutations and receipt, and every Run's progress ledger (StepRun and Run mutations,
    events, start barriers, task verdicts). Exit 0 when sound, 1 on any finding (a database file too
    damaged to read is one: FINDING integrity: database file)."""
    with opened(database, require_schema=False, create=False) as store, handled():
        findings = run_audit(store)
        version: int | None = None
        try:
            if not any(f.check == "schema" or f.subject == CORRUPT for f in findings):
                findings += audit_admissions(store)
                findings += audit_progress(store)
            if not any(f.subject == CORRUPT for f in findings):
                version = store.schema_version()
        except IntegrityViolation as error:  # a damaged file is a finding, not a crash (issue 11 item 8)
            findings.append(Finding("integrity", CORRUPT, str(error)))
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
