"""Atomic admission of a workflow plan (ADR-0224, decisions 2 and 3).

``admit(store, plan)``:

1. normalizes the plan and derives the deterministic bundle before any transaction;
2. in ONE write transaction (SQLite ``BEGIN IMMEDIATE``; PostgreSQL with the package's advisory lock, so
   no guard change can commit between the check and the COMMIT):
   a. exact replay first: an admission with this plan id is verified row by row against the re-derived
      bundle and its original receipt is returned (``existing``), even if the package was later withdrawn
      or quarantined; the same plan id with another plan is a conflict; corrupt evidence fails closed;
   b. the guards: publication head active and matching, installation active with the matching lock,
      lifecycle disposition active (or absent), no quarantine of this exact installation and lock;
   c. the workflow definition digest and every step's task digest against the publication;
   d. every insert (Run, ``workflow.admitted``, StepRuns, ``step.created``, mutations, admission ledger,
      receipt), or nothing: any failure rolls the whole transaction back.

No network, file or user callback runs while the transaction is open. Crash points
``workflow.admit:after-insert-<n>`` follow each insert; ``workflow.admit:before-commit`` and
``:after-commit`` surround COMMIT.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fencepost.catalog.definitions import workflow_digest
from fencepost.catalog.digests import definition_digest, lock_digest
from fencepost.catalog.lifecycle import not_allowed
from fencepost.core.canonical import canonical_json, parse_json
from fencepost.core.clock import to_iso
from fencepost.core.crashpoints import crashpoint
from fencepost.core.errors import Conflict, IntegrityViolation, InvalidPlan
from fencepost.core.fingerprint import fingerprint
from fencepost.core.statuses import Disposition, InstallationStatus, PublicationStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import (
    AdmissionReceiptRow,
    AdmissionRow,
    InstallationRecord,
    PublicationRecord,
    StepMutationRow,
    StepRunRow,
)
from fencepost.workflows.bundle import RECEIPT_DOMAIN, AdmissionBundle, derive_bundle
from fencepost.workflows.plan import NormalizedPlan, normalize_plan


@dataclass(frozen=True)
class AdmissionResult:
    """``outcome`` is ``"created"`` or ``"existing"``; ``receipt`` is the original receipt either way."""

    outcome: str
    run_id: str
    receipt: dict[str, Any]


def admit(store: Store, raw_plan: Any) -> AdmissionResult:
    """Admit ``raw_plan`` atomically (see module docstring).

    Raises:
        InvalidPlan: the plan breaks a normalization rule (nothing was opened).
        Conflict: the plan id is bound to another plan, an identity is taken, or the plan drifted from
            the publication's workflow or task definitions.
        NotAllowed: a start guard is false; ``guard`` names it.
        IntegrityViolation: stored evidence (admission rows, publication, lock) is corrupt.
        StoreUnavailable: the store failed or stayed busy past the bounded retry.
    """
    plan = normalize_plan(raw_plan)
    bundle = derive_bundle(plan)

    def unit(tx: UnitOfWork) -> AdmissionResult:
        tx.catalog.lock_package(str(plan.data["package"]))
        existing = tx.admission.get(plan.plan_id)
        if existing is not None:
            return _replay(tx, existing, bundle)
        publication, installation = check_guards(tx, plan)
        check_definitions(publication, installation, plan)
        admitted_at = tx.now()
        for number, record in enumerate(bundle.records(admitted_at), start=1):
            tx.admission.insert(record)
            crashpoint(f"workflow.admit:after-insert-{number}")
        return AdmissionResult("created", bundle.run_id, bundle.receipt(admitted_at))

    return store.transact(unit, name="workflow.admit")


def check_guards(tx: UnitOfWork, plan: NormalizedPlan) -> tuple[PublicationRecord, InstallationRecord]:
    """Re-check every start guard inside the admission transaction (ADR-0224 decision 2, step 3)."""
    package = str(plan.data["package"])
    head = tx.catalog.get_head(package)
    if head is None or head.publication_id != plan.data["publication_id"]:
        current = head.publication_id if head else "none"
        raise not_allowed("publication_head", f"the publication head of {package} is {current}, not the plan's "
                                              f"{plan.data['publication_id']}")
    publication = tx.catalog.get_publication(head.publication_id)
    if publication is None or publication.package_name != package:
        raise not_allowed("publication_head", f"the publication head of {package} names no publication of it")
    if publication.status is not PublicationStatus.ACTIVE:
        raise not_allowed("publication_active", f"publication {publication.id} of {package} is {publication.status}")
    installation = tx.catalog.get_installation(package)
    if (installation is None or installation.status is not InstallationStatus.ACTIVE
            or installation.id != plan.data["installation_id"]):
        raise not_allowed("installation_active", f"{package} has no active installation {plan.data['installation_id']}")
    if installation.lock_digest != plan.data["lock"] or installation.publication_id != publication.id:
        raise not_allowed("installation_lock",
                          f"installation {installation.id} is locked to another publication than the plan's")
    disposition = tx.catalog.get_disposition(installation.id)
    if disposition is not None and disposition.disposition is not Disposition.ACTIVE:
        raise not_allowed("lifecycle_disposition", f"installation {installation.id} is {disposition.disposition}")
    quarantine = tx.catalog.open_quarantine(installation.id, installation.lock_digest)
    if quarantine is not None:
        raise not_allowed("quarantine",
                          f"installation {installation.id} at this lock is quarantined: {quarantine.reason}")
    if plan.target_id is not None:
        target = tx.delivery.get_target(plan.target_id)
        if target is None or target.removed_at is not None:
            raise not_allowed("target_live", f"target {plan.target_id} of the plan is not a live delivery target")
    return publication, installation


def check_definitions(publication: PublicationRecord, installation: InstallationRecord, plan: NormalizedPlan) -> None:
    """Recompute the publication, lock and workflow digests and compare every step's task digest."""
    definition = publication.definition
    if (definition_digest(definition) != publication.definition_digest
            or canonical_json(definition) != publication.definition_text):
        raise IntegrityViolation(f"publication {publication.id}: stored definition does not match its digest")
    expected_lock = lock_digest(publication.id, publication.content_digest, publication.definition_digest)
    if expected_lock != installation.lock_digest:
        raise IntegrityViolation(f"installation {installation.id}: lock does not match publication {publication.id}")
    workflow_id = str(plan.data["workflow_id"])
    workflow = definition.get("workflows", {}).get(workflow_id)
    if not isinstance(workflow, dict):
        raise Conflict(f"publication {publication.id} has no workflow {workflow_id!r}")
    if workflow_digest(workflow_id, workflow["steps"]) != workflow["digest"]:
        raise IntegrityViolation(f"publication {publication.id}: workflow {workflow_id} does not match its digest")
    if workflow["digest"] != plan.data["workflow_digest"]:
        raise Conflict(f"workflow {workflow_id} drifted: the plan was built for {plan.data['workflow_digest']}, "
                       f"the publication has {workflow['digest']}")
    planned = [{"key": s["key"], "task": s["task"], "needs": s["needs"]} for s in plan.steps]
    if planned != workflow["steps"]:
        raise Conflict(f"the plan's steps differ from workflow {workflow_id} of publication {publication.id}")
    tasks = definition.get("tasks", {})
    for step in plan.steps:
        task = tasks.get(step["task"])
        if not isinstance(task, dict) or task.get("digest") != step["task_digest"]:
            raise Conflict(f"task {step['task']} of step {step['key']!r} drifted from publication {publication.id}")


# Columns that later progress may change (status, fence) are not admission facts: replay does not compare
# them with the bundle (each record type names its own, ``mutable``). A StepRun's status and fence must still
# equal its latest StepRun mutation's (every change of a StepRun writes a mutation), which replay checks; the
# Run's have no such ledger yet.


def verify_admission(tx: UnitOfWork, existing: AdmissionRow) -> AdmissionResult:
    """Re-derive an admission from its stored plan and verify every stored row (audit readiness check).

    Raises:
        IntegrityViolation: naming the first table, row and column that disagrees.
    """
    try:
        plan = normalize_plan(parse_json(existing.plan))
    except (ValueError, InvalidPlan) as error:
        raise IntegrityViolation(f"corrupt admission evidence: workflow_admissions row {existing.plan_id}: column plan "
                                 f"is not a valid plan: {error}") from None
    if plan.plan_id != existing.plan_id or plan.digest != existing.plan_digest:
        raise IntegrityViolation(f"corrupt admission evidence: workflow_admissions row {existing.plan_id}: column plan "
                                 "does not match its plan id and digest")
    return _replay(tx, existing, derive_bundle(plan))


def _replay(tx: UnitOfWork, existing: AdmissionRow, bundle: AdmissionBundle) -> AdmissionResult:
    plan = bundle.plan
    if existing.plan_digest != plan.digest:
        raise Conflict(f"plan id {plan.plan_id} is already bound to another plan ({existing.plan_digest})")
    expected = bundle.records(existing.admitted_at)
    admission_row = next(r for r in expected if isinstance(r, AdmissionRow))
    _compare(admission_row, existing, plan.plan_id)
    stored = tx.admission.stored(plan.plan_id, existing.run_id)
    _check_admitted_at(existing, stored.receipts)
    by_table: dict[str, list[Any]] = {}
    everything: list[Any] = [*stored.run, *stored.events, *stored.step_runs, *stored.mutations, *stored.steps,
                             *stored.receipts]
    for row in everything:
        by_table.setdefault(row.table, []).append(row)
    # Table by table, in the order the tables are first written (the first disagreement is the one named).
    order: list[str] = list(dict.fromkeys(r.table for r in expected))
    for row in sorted((r for r in expected if r is not admission_row), key=lambda r: order.index(r.table)):
        index = {_key(r): r for r in by_table.get(row.table, [])}
        found = index.get(_key(row))
        if found is None:
            raise IntegrityViolation(f"admission {plan.plan_id}: {row.table} row {_key(row)} is missing")
        _compare(row, found, _key(row))
    for table, rows in (("workflow_admission_steps", stored.steps), ("workflow_step_runs", stored.step_runs)):
        if len(rows) != len(plan.steps):
            raise IntegrityViolation(f"admission {plan.plan_id}: {table} has {len(rows)} rows for "
                                     f"{len(plan.steps)} steps")
    _check_step_run_states(stored.step_runs, stored.mutations)
    receipt_row = stored.receipts[0]
    receipt = parse_json(receipt_row.receipt)
    if fingerprint(RECEIPT_DOMAIN, receipt) != receipt_row.receipt_digest:
        raise IntegrityViolation(f"admission {plan.plan_id}: workflow_admission_receipts row {receipt_row.id} "
                                 "does not match its digest")
    return AdmissionResult("existing", existing.run_id, receipt)


def _key(row: Any) -> str:
    return "/".join(str(getattr(row, k)) for k in row.key)


def _check_admitted_at(existing: AdmissionRow, receipts: list[AdmissionReceiptRow]) -> None:
    """The admission's ``admitted_at`` is the one sealed in its (self-consistent) receipt.

    Every other row is re-derived from ``admitted_at``, so without this check an edited ``admitted_at``
    would be reported as a disagreement of the Run instead of the admission row that was changed.
    """
    if not receipts:
        return  # reported as a missing receipt row
    receipt = parse_json(receipts[0].receipt)
    if not isinstance(receipt, dict) or fingerprint(RECEIPT_DOMAIN, receipt) != receipts[0].receipt_digest:
        return  # reported against the receipt row itself
    if receipt.get("admitted_at") != to_iso(existing.admitted_at):
        raise IntegrityViolation(f"corrupt admission evidence: workflow_admissions row {existing.plan_id}: column "
                                 "admitted_at differs from the one sealed in its receipt")


def _check_step_run_states(step_runs: list[StepRunRow], mutations: list[StepMutationRow]) -> None:
    """Every StepRun's status and fence are those of its latest mutation (the ledger of its changes)."""
    latest: dict[str, StepMutationRow] = {}
    for mutation in mutations:
        current = latest.get(mutation.step_run_id)
        if current is None or mutation.fence > current.fence:
            latest[mutation.step_run_id] = mutation
    for step_run in step_runs:
        last = latest.get(step_run.id)
        if last is None or (step_run.status, step_run.fence) != (last.to_status, last.fence):
            raise IntegrityViolation(f"corrupt admission evidence: workflow_step_runs row {step_run.id}: columns "
                                     "status and fence differ from its latest StepRun mutation")


def _compare(expected: Any, stored: Any, subject: str) -> None:
    """Field by field, except the columns progress may change; the first difference is named."""
    skip: frozenset[str] = getattr(expected, "mutable", frozenset())
    for field in dataclasses.fields(expected):
        if field.name in skip:
            continue
        if getattr(expected, field.name) != getattr(stored, field.name):
            raise IntegrityViolation(f"corrupt admission evidence: {expected.table} row {subject}: column "
                                     f"{field.name} differs from the re-derived admission")
