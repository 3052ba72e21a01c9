"""The rehearsal application service: what the CLI and the HTTP API call.

Seed: "Durable Command" (enqueue is one transaction: Attempt, six Receipts and the PENDING command),
"Heartbeat And Takeover" (reconcile only an expired lease; abort fences the worker), "Attempt Comparison"
and "Release Gate".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fencepost.catalog.lifecycle import GateVerdict
from fencepost.catalog.manifest import PackageSpec, load_package
from fencepost.core.errors import Conflict, LeaseActive, NotFound
from fencepost.core.ids import new_id
from fencepost.core.statuses import AttemptStatus, RunStatus
from fencepost.evidence.comparison import Comparison, compare_attempts
from fencepost.evidence.gate import GateReport, evaluate_gate
from fencepost.rehearsal.handler import KIND
from fencepost.rehearsal.host_functions import resolve as resolve_host_functions
from fencepost.rehearsal.scenarios import SCENARIO_CODES
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import AttemptRecord, ReceiptRecord, RunRecord


def _no_rehearsal(run_id: str) -> NotFound:
    """``NotFound`` for ``run_id``, saying so when it is an Attempt's id (a new user's trial: ``rehearsal status
    att_...`` answered only "no rehearsal att_...")."""
    hint = " (that is an Attempt id; name its rehearsal, the run_... id)" if run_id.startswith("att_") else ""
    return NotFound(f"no rehearsal {run_id}{hint}")


@dataclass(frozen=True)
class ComparisonResult:
    """The two latest successful Attempts compared, or why there is nothing to compare."""

    comparison: Comparison | None
    reason: str


class RehearsalService:
    """Operations on delivery rehearsals over one control store.

    Args:
        store: a migrated control store (``require_schema`` is the caller's job).
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    # ── runs ──
    def create_run(self, package_dir: str | Path) -> RunRecord:
        """Validate and freeze the package in ``package_dir`` as a READY Run.

        Raises:
            InvalidInput: the package is invalid (nothing is written).
        """
        return self.create_run_from_spec(load_package(package_dir))

    def create_run_from_spec(self, spec: PackageSpec) -> RunRecord:
        """Freeze an already loaded package as a READY Run.

        Raises:
            InvalidInput: a SQL function the package needs has no implementation here (built in, or an entry
                point configured by ``FENCEPOST_HOST_FUNCTIONS``), named in the message (ADR 0063).
        """
        resolve_host_functions(spec.functions)
        run_id = new_id("run")
        files = spec.run_files()

        def unit(tx: UnitOfWork) -> RunRecord:
            tx.rehearsal.insert_run(run_id=run_id, package_name=spec.name, package_version=spec.version,
                                    previous_version=spec.previous_version, content_digest=spec.content_digest,
                                    manifest=spec.normalized_manifest(), files=files)
            run = tx.rehearsal.get_run(run_id)
            assert run is not None
            return run

        return self.store.transact(unit, name="rehearsal.create_run")

    def get_run(self, run_id: str) -> RunRecord:
        run = self.store.read(lambda tx: tx.rehearsal.get_run(run_id))
        if run is None:
            raise _no_rehearsal(run_id)
        return run

    def list_runs(self, limit: int = 100) -> list[RunRecord]:
        return self.store.read(lambda tx: tx.rehearsal.list_runs(limit))

    # ── attempts ──
    def enqueue_attempt(self, run_id: str) -> AttemptRecord:
        """Insert the Attempt, its six PENDING Receipts and its PENDING command in one transaction.

        Returns at once; a worker runs the Attempt. Raises NotFound (no Run) or Conflict (Run RETIRED).
        """
        attempt_id = new_id("att")
        command_id = new_id("cmd")
        receipts = [(new_id("rcp"), position, code) for position, code in enumerate(SCENARIO_CODES, start=1)]

        def unit(tx: UnitOfWork) -> AttemptRecord:
            run = tx.rehearsal.get_run(run_id)
            if run is None:
                raise _no_rehearsal(run_id)
            if run.status is not RunStatus.READY:
                raise Conflict(f"rehearsal {run_id} is {run.status}; only a READY Run takes new Attempts")
            seq = tx.rehearsal.next_attempt_seq(run_id)
            tx.outbox.insert(command_id=command_id, kind=KIND, payload={"attempt_id": attempt_id, "run_id": run_id})
            tx.rehearsal.insert_attempt(attempt_id=attempt_id, run_id=run_id, seq=seq, command_id=command_id,
                                        receipts=receipts)
            attempt = tx.rehearsal.get_attempt(attempt_id)
            assert attempt is not None
            return attempt

        return self.store.transact(unit, name="rehearsal.enqueue")

    def attempt(self, attempt_id: str) -> AttemptRecord:
        found = self.store.read(lambda tx: tx.rehearsal.get_attempt(attempt_id))
        if found is None:
            raise NotFound(f"no attempt {attempt_id}")
        return found

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        self.get_run(run_id)
        return self.store.read(lambda tx: tx.rehearsal.list_attempts(run_id))

    def receipts(self, attempt_id: str) -> list[ReceiptRecord]:
        return self.store.read(lambda tx: tx.rehearsal.attempt_receipts(attempt_id))

    def reconcile(self, attempt_id: str) -> AttemptRecord:
        """Return the Attempt's expired PROCESSING command to PENDING (Attempt locked first).

        Raises:
            NotFound: no such Attempt.
            LeaseActive: the lease has not expired (message and ``lease_until`` say when it does).
            Conflict: the command is not PROCESSING.
        """

        def unit(tx: UnitOfWork) -> AttemptRecord:
            locked = tx.rehearsal.lock_attempt(attempt_id)
            if locked is None:
                raise NotFound(f"no attempt {attempt_id}")
            try:
                tx.outbox.reconcile(locked.command_id)
            except LeaseActive as error:
                raise LeaseActive(f"attempt {attempt_id}: {error}", error.lease_until) from None
            except Conflict:
                command = tx.outbox.get(locked.command_id)
                state = command.status if command else "missing"
                raise Conflict(f"attempt {attempt_id} is {locked.status} with its command {state}; only an "
                               "Attempt whose lease has expired can be reconciled") from None
            attempt = tx.rehearsal.get_attempt(attempt_id)
            assert attempt is not None
            return attempt

        return self.store.transact(unit, name="rehearsal.reconcile")

    def abort(self, attempt_id: str, reason: str = "aborted by operator") -> AttemptRecord:
        """Abort a PENDING or RUNNING Attempt: open Receipts and the command become ABORTED in one
        transaction and the token is cleared, which fences the active worker.

        Raises:
            NotFound: no such Attempt.
            Conflict: the Attempt is already terminal.
        """

        def unit(tx: UnitOfWork) -> AttemptRecord:
            locked = tx.rehearsal.lock_attempt(attempt_id)
            if locked is None:
                raise NotFound(f"no attempt {attempt_id}")
            command_id = tx.rehearsal.abort_attempt(attempt_id, reason)
            if command_id is None:
                raise Conflict(f"attempt {attempt_id} is {locked.status}; only PENDING or RUNNING can be aborted")
            tx.rehearsal.abort_open_receipts(attempt_id)
            tx.outbox.abort(command_id, reason)
            attempt = tx.rehearsal.get_attempt(attempt_id)
            assert attempt is not None
            return attempt

        return self.store.transact(unit, name="rehearsal.abort")

    # ── evidence ──
    def _successful(self, run_id: str) -> list[AttemptRecord]:
        return [a for a in self.attempts(run_id) if a.status is AttemptStatus.SUCCEEDED]

    def compare(self, run_id: str) -> ComparisonResult:
        """Compare the two latest successful Attempts of a Run by semantic fingerprint."""
        successful = self._successful(run_id)
        if len(successful) < 2:
            return ComparisonResult(None, f"{len(successful)} successful Attempt(s); a comparison needs two")
        base, cand = successful[-2], successful[-1]
        comparison = compare_attempts((base.id, base.seq, self.receipts(base.id)),
                                      (cand.id, cand.seq, self.receipts(cand.id)))
        reason = "semantics match" if comparison.equal else "semantics differ"
        return ComparisonResult(comparison, reason)

    def gate(self, run_id: str) -> GateReport:
        """The release gate, computed now from durable records (never stored).

        Raises:
            NotFound: no such rehearsal.
        """

        def unit(tx: UnitOfWork) -> GateReport:
            run = tx.rehearsal.get_run(run_id)
            if run is None:
                raise _no_rehearsal(run_id)
            return gate_of(tx, run)

        return self.store.read(unit)


def gate_of(tx: UnitOfWork, run: RunRecord) -> GateReport:
    """The release gate of ``run`` from its Attempts: the latest, and the latest success before it."""
    attempts = tx.rehearsal.list_attempts(run.id)
    wanted = []
    if attempts:
        wanted.append(attempts[-1])
        previous = [a for a in attempts[:-1] if a.status is AttemptStatus.SUCCEEDED]
        if previous:
            wanted.append(previous[-1])
    receipts = {a.id: tx.rehearsal.attempt_receipts(a.id) for a in wanted}
    return evaluate_gate(run, attempts, receipts)


def release_gate(tx: UnitOfWork, content_digest: str) -> GateVerdict | None:
    """The catalog's ``ReleaseGate``: the gate of the newest rehearsal of exactly this content.

    Returns:
        None when this content was never rehearsed.
    """
    runs = tx.rehearsal.runs_by_digest(content_digest)
    if not runs:
        return None
    report = gate_of(tx, runs[0])
    return GateVerdict(passed=report.passed, run_id=report.run_id,
                       blocking=[f"{c.name}: {c.reason}" for c in report.blocking],
                       compared=report.semantics_compared)

