"""Readiness cross-check of workflow admissions (ADR-0224 decision 4, issue 6).

Every admission must agree with its Run, StepRuns, events, mutations and receipt: each is re-derived from
the stored plan and verified row by row, exactly as an exact replay would.
"""

from __future__ import annotations

from fencepost.core.errors import Conflict, IntegrityViolation
from fencepost.store.audit import Finding
from fencepost.store.base import Store, Transaction
from fencepost.workflows.admission import verify_admission


def audit_admissions(store: Store) -> list[Finding]:
    """One ``admission`` finding per admission that fails verification (empty when all agree)."""

    def unit(tx: Transaction) -> list[Finding]:
        found = []
        for plan_id in tx.list_admission_plan_ids():
            row = tx.get_admission(plan_id)
            if row is None:  # pragma: no cover - listed in this same snapshot
                continue
            try:
                verify_admission(tx, row)
            except (IntegrityViolation, Conflict) as error:
                found.append(Finding("admission", plan_id, str(error)))
        return found

    return store.read(unit)
