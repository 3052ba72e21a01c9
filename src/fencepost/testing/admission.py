"""The admission contract (``AdmissionPort``): the admission ledger and every row one admission writes.

ADR-0224 decision 2: an admission writes its Run, its events, StepRuns, StepRun mutations, ledger rows and
receipt in one unit; replay reads them back exactly as stored (``stored``), typed, and a stored value
outside its vocabulary is corrupt evidence (``IntegrityViolation`` naming table, row and column).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pytest

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import IntegrityViolation
from fencepost.core.fingerprint import sha256_bytes
from fencepost.core.statuses import StepMutationKind, StepRunStatus, WorkflowEventType, WorkflowRunStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import (
    AdmissionReceiptRow,
    AdmissionRecord,
    AdmissionRow,
    AdmissionStepRow,
    StepMutationRow,
    StepRunRow,
    StoredAdmission,
    WorkflowEventRow,
    WorkflowRunRow,
)
from fencepost.testing.backend import ContractHarness, StoreContract
from fencepost.testing.catalog import LOCK_1, PACKAGE, publish, refused

WORKFLOW = "pipeline"
WORKFLOW_DIGEST = sha256_bytes(b"workflow pipeline")
#: The steps of every test admission, in plan order (``load`` needs ``extract``); not in key order on purpose.
STEPS: tuple[tuple[str, list[str]], ...] = (("load", ["extract"]), ("extract", []))
NOTHING = StoredAdmission(run=[], events=[], step_runs=[], mutations=[], steps=[], receipts=[])


@dataclass(frozen=True)
class Admission:
    """One admission's rows, in the order they are written (Run, events, StepRuns, mutations, ledger, receipt)."""

    plan_id: str
    run_id: str
    records: list[AdmissionRecord]

    def row(self) -> AdmissionRow:
        """Its ``workflow_admissions`` row."""
        (row,) = [r for r in self.records if isinstance(r, AdmissionRow)]
        return row

    def stored(self) -> StoredAdmission:
        """What ``AdmissionPort.stored`` must return for it: each table's rows in the port's order."""
        of = self.records
        return StoredAdmission(
            run=[r for r in of if isinstance(r, WorkflowRunRow)],
            events=sorted((r for r in of if isinstance(r, WorkflowEventRow)), key=lambda r: r.seq),
            step_runs=sorted((r for r in of if isinstance(r, StepRunRow)), key=lambda r: r.step_key),
            mutations=sorted((r for r in of if isinstance(r, StepMutationRow)), key=lambda r: (r.step_run_id, r.fence)),
            steps=sorted((r for r in of if isinstance(r, AdmissionStepRow)), key=lambda r: r.step_key),
            receipts=[r for r in of if isinstance(r, AdmissionReceiptRow)])


def admission(plan_id: str, at: datetime, *, publication_id: str = "pub1",
              installation_id: str = "inst1") -> Admission:
    """The rows of a consistent admission of plan ``plan_id`` at ``at`` (two steps, fence 1)."""
    run_id = f"run-{plan_id}"
    plan_digest = sha256_bytes(f"plan {plan_id}".encode())
    plan = canonical_json({"plan_id": plan_id, "digest": plan_digest, "package": PACKAGE,
                           "publication_id": publication_id, "installation_id": installation_id, "lock": LOCK_1,
                           "workflow_id": WORKFLOW, "workflow_digest": WORKFLOW_DIGEST,
                           "steps": [{"key": key, "needs": needs} for key, needs in STEPS]})
    records: list[AdmissionRecord] = [
        WorkflowRunRow(id=run_id, plan_id=plan_id, installation_id=installation_id, publication_id=publication_id,
                       workflow_id=WORKFLOW, status=WorkflowRunStatus.RUNNING, fence=1, created_at=at),
        WorkflowEventRow(id=f"ev-{plan_id}-1", run_id=run_id, step_run_id=None, seq=1,
                         type=WorkflowEventType.ADMITTED, payload=canonical_json({"run_id": run_id}), created_at=at)]
    for key, needs in STEPS:
        records.append(StepRunRow(id=f"sr-{plan_id}-{key}", run_id=run_id, step_key=key, task_id=key,
                                  task_digest=sha256_bytes(key.encode()), needs=canonical_json(needs),
                                  status=StepRunStatus.WAITING if needs else StepRunStatus.READY, fence=1,
                                  created_at=at))
    for seq, (key, _) in enumerate(STEPS, start=2):
        records.append(WorkflowEventRow(id=f"ev-{plan_id}-{seq}", run_id=run_id, step_run_id=f"sr-{plan_id}-{key}",
                                        seq=seq, type=WorkflowEventType.STEP_CREATED,
                                        payload=canonical_json({"run_id": run_id, "step_key": key}), created_at=at))
    for key, needs in STEPS:
        records.append(StepMutationRow(id=f"mu-{plan_id}-{key}", step_run_id=f"sr-{plan_id}-{key}", run_id=run_id,
                                       fence=1, kind=StepMutationKind.CREATE,
                                       to_status=StepRunStatus.WAITING if needs else StepRunStatus.READY,
                                       created_at=at))
    receipt_id = f"rc-{plan_id}"
    records.append(AdmissionRow(
        plan_id=plan_id, plan_digest=plan_digest, plan=plan, run_id=run_id, package_name=PACKAGE,
        publication_id=publication_id, installation_id=installation_id, lock_digest=LOCK_1, workflow_id=WORKFLOW,
        workflow_digest=WORKFLOW_DIGEST, step_count=len(STEPS), final_fence=1, receipt_id=receipt_id,
        admitted_at=at))
    for seq, (key, needs) in enumerate(STEPS, start=2):
        records.append(AdmissionStepRow(plan_id=plan_id, step_key=key, task_id=key,
                                        task_digest=sha256_bytes(key.encode()), needs=canonical_json(needs),
                                        step_run_id=f"sr-{plan_id}-{key}", mutation_id=f"mu-{plan_id}-{key}",
                                        event_id=f"ev-{plan_id}-{seq}"))
    receipt = canonical_json({"receipt_id": receipt_id, "plan_id": plan_id, "run_id": run_id})
    records.append(AdmissionReceiptRow(id=receipt_id, plan_id=plan_id, run_id=run_id, receipt=receipt,
                                       receipt_digest=sha256_bytes(receipt.encode())))
    return Admission(plan_id, run_id, records)


def admit(tx: UnitOfWork, plan_id: str) -> Admission:
    """Write the whole admission of ``plan_id`` in ``tx``, at the unit's instant."""
    written = admission(plan_id, tx.now())
    for record in written.records:
        tx.admission.insert(record)
    return written


def stored(store: Store, written: Admission) -> StoredAdmission:
    """``AdmissionPort.stored`` of ``written``'s plan and Run."""
    return store.read(lambda tx: tx.admission.stored(written.plan_id, written.run_id))


#: ``(table, column)`` of every vocabulary column replay reads back (each table is keyed by ``id``).
VOCABULARY_COLUMNS = (("workflow_events", "type"), ("workflow_runs", "status"), ("workflow_step_mutations", "kind"),
                      ("workflow_step_mutations", "to_status"), ("workflow_step_runs", "status"))


def store_outside_the_vocabulary(backend: ContractHarness, tx: UnitOfWork, table: str, column: str,
                                 row_id: str) -> None:
    """Store ``'bogus'`` in ``table.column`` of row ``row_id``, past the CHECK that would refuse it (a row edited
    by hand behind the store's back: SQLite ignores CHECKs for the statement, PostgreSQL drops the column's)."""
    update = f"UPDATE {table} SET {column} = 'bogus' WHERE id = '{row_id}'"
    if tx.backend == "sqlite":
        backend.inspect(tx, "PRAGMA ignore_check_constraints = ON")
        try:
            backend.inspect(tx, update)
        finally:
            backend.inspect(tx, "PRAGMA ignore_check_constraints = OFF")
    elif tx.backend == "postgres":
        # Every CHECK of the table that names the column (its vocabulary, and any cross-column rule such as
        # workflow_runs_settled, which a bogus status would break as well).
        checks = backend.inspect(tx, "SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid = "
                                     f"'{table}'::regclass AND pg_get_constraintdef(oid) LIKE '%{column}%'")
        for (name,) in checks:
            backend.inspect(tx, f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        backend.inspect(tx, update)
    else:
        pytest.skip(f"no known way past the CHECKs of a {tx.backend} store")


class AdmissionContract(StoreContract):
    """Every ``AdmissionPort`` operation on one backend (subclass as ``TestAdmission``)."""

    @pytest.fixture
    def installed(self, store: Store) -> Store:
        """A store with publication ``pub1`` of ``PACKAGE`` installed as ``inst1`` at ``LOCK_1``."""

        def fn(tx: UnitOfWork) -> None:
            publish(tx, "pub1", "1.0.0")
            tx.catalog.insert_installation(installation_id="inst1", package_name=PACKAGE, publication_id="pub1",
                                           lock_digest=LOCK_1)

        store.transact(fn)
        return store

    def test_an_admission_reads_back_exactly_as_written(self, installed: Store) -> None:
        written = installed.transact(lambda tx: admit(tx, "plan1"))
        row = written.row()
        assert installed.read(lambda tx: tx.admission.get("plan1")) == row
        assert installed.read(lambda tx: tx.admission.get_by_run(written.run_id)) == row
        assert installed.read(lambda tx: tx.admission.plan_ids()) == ["plan1"]
        back = stored(installed, written)
        assert back == written.stored()
        # Typed as the vocabularies (a plain string would compare equal to a StrEnum), instants aware UTC.
        assert type(back.run[0].status) is WorkflowRunStatus
        assert [type(e.type) for e in back.events] == [WorkflowEventType] * (1 + len(STEPS))
        assert {type(s.status) for s in back.step_runs} == {StepRunStatus}
        assert {(type(m.kind), type(m.to_status)) for m in back.mutations} == {(StepMutationKind, StepRunStatus)}
        assert [s.step_key for s in back.step_runs] == ["extract", "load"]
        assert [e.seq for e in back.events] == [1, 2, 3]
        instants = [row.admitted_at, back.run[0].created_at, *(e.created_at for e in back.events),
                    *(s.created_at for s in back.step_runs), *(m.created_at for m in back.mutations)]
        assert all(i.utcoffset() == timedelta(0) for i in instants)
        assert isinstance(row.step_count, int) and isinstance(row.final_fence, int)

    def test_unknown_admissions_read_as_nothing(self, installed: Store) -> None:
        assert installed.read(lambda tx: tx.admission.get("nope")) is None
        assert installed.read(lambda tx: tx.admission.get_by_run("nope")) is None
        assert installed.read(lambda tx: tx.admission.plan_ids()) == []
        assert installed.read(lambda tx: tx.admission.stored("nope", "nope")) == NOTHING
        written = installed.transact(lambda tx: admit(tx, "plan1"))
        # stored() of another plan and Run sees none of plan1's rows.
        assert installed.read(lambda tx: tx.admission.stored("nope", "nope")) == NOTHING
        assert stored(installed, written) == written.stored()

    def test_plan_ids_oldest_first(self, installed: Store, backend: ContractHarness) -> None:
        installed.transact(lambda tx: admit(tx, "p-b"))
        backend.advance(0.01)

        def same_instant(tx: UnitOfWork) -> None:  # one unit, one instant: the plan id breaks the tie
            admit(tx, "p-d")
            admit(tx, "p-c")

        installed.transact(same_instant)
        assert installed.read(lambda tx: tx.admission.plan_ids()) == ["p-b", "p-c", "p-d"]

    def test_a_broken_admission_is_a_conflict_and_writes_nothing(self, installed: Store) -> None:
        kept = installed.transact(lambda tx: admit(tx, "kept"))

        def case(bad: str) -> Callable[[UnitOfWork], None]:
            def fn(tx: UnitOfWork) -> None:
                if bad == "twice":
                    admit(tx, "kept")
                    return
                written = admission("plan1", tx.now(),
                                    installation_id="nope" if bad == "unknown-installation" else "inst1")
                records = written.records
                if bad == "run-of-another-plan":  # its ledger row names kept's Run
                    records = [replace(r, run_id=kept.run_id) if isinstance(r, AdmissionRow) else r for r in records]
                elif bad == "duplicate-event-seq":
                    records = [replace(r, seq=1) if isinstance(r, WorkflowEventRow) else r for r in records]
                elif bad == "receipt-of-unknown-plan":
                    records = [*records, AdmissionReceiptRow(id="rc-x", plan_id="nope", run_id=written.run_id,
                                                             receipt="{}", receipt_digest=sha256_bytes(b"{}"))]
                elif bad == "step-count-off":
                    records = [replace(r, step_count=len(STEPS) + 1) if isinstance(r, AdmissionRow) else r
                               for r in records]
                for record in records:
                    tx.admission.insert(record)

            return fn

        for bad in ("twice", "unknown-installation", "run-of-another-plan", "duplicate-event-seq",
                    "receipt-of-unknown-plan", "step-count-off"):
            refused(installed, case(bad), bad)
            assert installed.read(lambda tx: tx.admission.plan_ids()) == ["kept"], bad
            assert installed.read(lambda tx: tx.admission.get("plan1")) is None, bad
            assert installed.read(lambda tx: tx.admission.stored("plan1", "run-plan1")) == NOTHING, bad
            assert stored(installed, kept) == kept.stored(), bad

    def test_a_stored_value_outside_its_vocabulary_is_an_integrity_violation(
            self, installed: Store, backend: ContractHarness) -> None:
        def corrupted(plan_id: str, table: str, column: str) -> None:
            written = installed.transact(lambda tx: admit(tx, plan_id))
            row_id = {"workflow_runs": written.run_id, "workflow_events": f"ev-{plan_id}-1",
                      "workflow_step_runs": f"sr-{plan_id}-load",
                      "workflow_step_mutations": f"mu-{plan_id}-load"}[table]
            installed.transact(lambda tx: store_outside_the_vocabulary(backend, tx, table, column, row_id))
            with pytest.raises(IntegrityViolation) as caught:
                stored(installed, written)
            message = str(caught.value)
            assert table in message and row_id in message and column in message and "bogus" in message, message
            # The ledger row itself holds no vocabulary: it still reads.
            assert installed.read(lambda tx: tx.admission.get(plan_id)) == written.row()

        for number, (table, column) in enumerate(VOCABULARY_COLUMNS):
            corrupted(f"plan{number}", table, column)
