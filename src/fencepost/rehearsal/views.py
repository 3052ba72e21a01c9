"""Plain-JSON views of rehearsal records for the CLI's ``--json`` output and the HTTP API.

Nothing here ever includes a lease token (records do not carry one) or a database path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fencepost.core.canonical import parse_json
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.evidence.comparison import AttemptFingerprints, Comparison
from fencepost.evidence.coverage import NOT_APPLICABLE, not_applicable_reason, partial_note
from fencepost.evidence.gate import GateReport
from fencepost.evidence.receipts import verify_receipt
from fencepost.outbox.registry import WorkerCensus
from fencepost.rehearsal.handler import KIND
from fencepost.rehearsal.scenarios import SCENARIO_CODES
from fencepost.rehearsal.service import ComparisonResult
from fencepost.store.records import AttemptRecord, ReceiptRecord, RunRecord


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def run_view(run: RunRecord) -> dict[str, Any]:
    return {"id": run.id, "package": {"name": run.package_name, "version": run.package_version,
                                      "previous_version": run.previous_version},
            "content_digest": run.content_digest, "status": str(run.status), "created_at": iso(run.created_at),
            "migrations": [m["id"] for m in run.manifest.get("migrations", [])]}


#: What an operator is shown for a RUNNING Attempt or Receipt whose command is PENDING (released by a stop, or
#: reconciled after its lease expired): nothing runs it now, and the next delivery replays every scenario
#: from the first in a new sandbox (issue 10 item 6).
INTERRUPTED = "INTERRUPTED"
INTERRUPTED_NOTE = ("interrupted, will be replayed: nothing runs it now (its lease was released or reconciled); "
                    "the next delivery replays all six scenarios from the first")


def replay_pending(attempt: AttemptRecord) -> bool:
    """A RUNNING Attempt whose command is PENDING: its delivery ended without a verdict and nothing runs it."""
    return attempt.status is AttemptStatus.RUNNING and attempt.command_status is CommandStatus.PENDING


def receipt_view(receipt: ReceiptRecord, *, evidence: bool = False, interrupted: bool = False) -> dict[str, Any]:
    """Plain JSON of a Receipt.

    Args:
        evidence: include the sealed evidence.
        interrupted: its Attempt's delivery ended without a verdict (``replay_pending``): a RUNNING Receipt
            then has ``state`` ``INTERRUPTED``, not RUNNING.
    Returns:
        The stored fields, ``integrity``, and ``state``: what to show (``status``, ``INTERRUPTED``, or
        ``NOT_APPLICABLE`` for a scenario that SUCCEEDED without applying, whose reason is in
        ``not_applicable_reason``); ``partial``: what an exercised scenario did not reach, or None.
    """
    integrity = verify_receipt(receipt)
    state = INTERRUPTED if interrupted and receipt.status is ReceiptStatus.RUNNING else str(receipt.status)
    not_applicable = not_applicable_reason(receipt)
    if not_applicable is not None:
        state = NOT_APPLICABLE  # it tested nothing: never shown as a plain success (issue 11 item 5)
    view: dict[str, Any] = {
        "id": receipt.id, "position": receipt.position, "scenario": receipt.scenario, "status": str(receipt.status),
        "state": state,
        "delivery": receipt.delivery, "started_at": iso(receipt.started_at), "finished_at": iso(receipt.finished_at),
        "evidence_fingerprint": receipt.evidence_fingerprint,
        "integrity": {"status": integrity.status, "reason": integrity.reason},
        "not_applicable_reason": not_applicable, "partial": partial_note(receipt),
    }
    if evidence:
        try:
            view["evidence"] = parse_json(receipt.evidence) if receipt.evidence is not None else None
        except ValueError:
            view["evidence"] = None
    return view


def waiting_view(attempt: AttemptRecord, census: WorkerCensus) -> dict[str, Any]:
    """What the Attempt's command waits for, by the store's clock ``census.now`` (ADR 0019).

    Returns:
        ``kind``: the command kind; ``lease_expired``: PROCESSING and its deadline has passed (the owner
        stopped renewing: reconcile is possible); ``pending_seconds``: PENDING and due, how long it has
        waited since it became due (seconds), else None; ``live_workers``: live registered workers that
        serve the kind; ``no_live_worker``: it waits for a worker now (PENDING and due, or an expired
        lease) and ``live_workers`` is 0.
    """
    now = census.now
    expired = (attempt.command_status is CommandStatus.PROCESSING and attempt.lease_until is not None
               and attempt.lease_until <= now)
    due = attempt.command_status is CommandStatus.PENDING and attempt.available_at <= now
    serving = len(census.serving(KIND))
    return {"kind": KIND, "lease_expired": expired,
            "pending_seconds": round((now - attempt.available_at).total_seconds(), 3) if due else None,
            "live_workers": serving, "no_live_worker": (due or expired) and serving == 0}


def attempt_view(attempt: AttemptRecord, receipts: list[ReceiptRecord] | None = None,
                 *, evidence: bool = False, census: WorkerCensus | None = None) -> dict[str, Any]:
    """Plain JSON of an Attempt with its outbox lease (and Receipts when given).

    Args:
        census: the worker registry read with the store's clock; when given, ``outbox`` also carries
            ``waiting_view``'s fields.
    Returns:
        The stored fields, and ``state``: what to show, ``status`` or ``INTERRUPTED`` (``replay_pending``),
        whose Receipts then show no scenario RUNNING.
    """
    interrupted = replay_pending(attempt)
    view: dict[str, Any] = {
        "id": attempt.id, "run_id": attempt.run_id, "seq": attempt.seq, "status": str(attempt.status),
        "state": INTERRUPTED if interrupted else str(attempt.status),
        "error": attempt.error, "created_at": iso(attempt.created_at), "started_at": iso(attempt.started_at),
        "finished_at": iso(attempt.finished_at),
        "outbox": {"command_id": attempt.command_id, "status": str(attempt.command_status),
                   "lease_owner": attempt.lease_owner, "lease_until": iso(attempt.lease_until),
                   "last_heartbeat_at": iso(attempt.last_heartbeat_at), "delivery_count": attempt.delivery_count,
                   "available_at": iso(attempt.available_at)},
    }
    if census is not None:
        view["outbox"].update(waiting_view(attempt, census))
    if receipts is not None:
        view["receipts"] = [receipt_view(r, evidence=evidence, interrupted=interrupted) for r in receipts]
    return view


def _fingerprints(fp: AttemptFingerprints) -> dict[str, Any]:
    return {"attempt_id": fp.attempt_id, "seq": fp.seq, "semantic_fingerprint": fp.semantic, "raw": fp.raw}


def comparison_view(result: ComparisonResult) -> dict[str, Any]:
    comparison: Comparison | None = result.comparison
    if comparison is None:
        return {"comparable": False, "reason": result.reason}
    return {"comparable": True, "equal": comparison.equal, "reason": result.reason,
            "baseline": _fingerprints(comparison.baseline), "candidate": _fingerprints(comparison.candidate),
            "differing_paths": comparison.differing_paths}


def gate_view(report: GateReport) -> dict[str, Any]:
    return {"run_id": report.run_id, "passed": report.passed, "latest_attempt_id": report.latest_attempt_id,
            "baseline_attempt_id": report.baseline_attempt_id,
            "checks": [{"name": c.name, "passed": c.passed, "reason": c.reason} for c in report.checks],
            "semantics_compared": report.semantics_compared,
            "scenarios": {"exercised": report.exercised, "not_exercised": report.not_exercised,
                          "count": len(report.exercised), "of": len(SCENARIO_CODES)},
            "tampered_receipts": [{"position": i.position, "scenario": i.scenario, "reason": i.reason}
                                  for i in report.integrity if i.status == "tampered"]}
