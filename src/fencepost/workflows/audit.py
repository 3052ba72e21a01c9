"""Readiness cross-check of workflow admissions (ADR-0224 decision 4, issue 6).

Every admission must agree with its Run, StepRuns, events, mutations and receipt: each is re-derived from
the stored plan and verified row by row, exactly as an exact replay would. Every publication's definition
and workflow digests, and every installation's lock, are recomputed too: admission trusts them.
"""

from __future__ import annotations

from fencepost.catalog.definitions import workflow_digest
from fencepost.catalog.digests import definition_digest, lock_digest
from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, IntegrityViolation
from fencepost.store.audit import Finding
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.workflows.admission import verify_admission


def audit_admissions(store: Store) -> list[Finding]:
    """One ``admission`` finding per admission that fails verification (empty when all agree)."""

    def unit(tx: UnitOfWork) -> list[Finding]:
        found = []
        for plan_id in tx.admission.plan_ids():
            row = tx.admission.get(plan_id)
            if row is None:  # pragma: no cover - listed in this same snapshot
                continue
            try:
                verify_admission(tx, row)
            except (IntegrityViolation, Conflict) as error:
                found.append(Finding("admission", plan_id, str(error)))
        return found

    def publications(tx: UnitOfWork) -> list[Finding]:
        found = []
        by_id = {}
        for pub in tx.catalog.all_publications():
            by_id[pub.id] = pub
            if (definition_digest(pub.definition) != pub.definition_digest
                    or canonical_json(pub.definition) != pub.definition_text):
                found.append(Finding("publication", pub.id, "stored definition does not match its digest"))
                continue
            for wid, workflow in pub.definition.get("workflows", {}).items():
                if not isinstance(workflow, dict) or workflow_digest(wid, workflow.get("steps", [])) != workflow.get(
                        "digest"):
                    found.append(Finding("publication", pub.id, f"workflow {wid} does not match its digest"))
        for inst in tx.catalog.all_installations():
            locked = by_id.get(inst.publication_id)
            if locked is None or lock_digest(locked.id, locked.content_digest,
                                             locked.definition_digest) != inst.lock_digest:
                found.append(Finding("installation", inst.id, "lock does not match its publication"))
        return found

    return store.read(unit) + store.read(publications)
