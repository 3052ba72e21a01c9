"""Builders for unit tests: durable records made directly (no store), with sealed or tampered evidence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus, RunStatus
from fencepost.evidence.receipts import seal
from fencepost.rehearsal.scenarios import SCENARIO_CODES
from fencepost.store.records import AttemptRecord, ReceiptRecord, RunRecord

PackageWriter = Callable[[dict[str, str | bytes]], Path]

MINIMAL_MANIFEST = """\
[package]
name = "demo"
version = "1.0.0"
"""

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run_record(status: RunStatus = RunStatus.READY, run_id: str = "run_1") -> RunRecord:
    return RunRecord(id=run_id, package_name="demo", package_version="1.0.0", previous_version=None,
                     content_digest="sha256:" + "0" * 64, manifest={"format": 1}, status=status, created_at=T0)


def attempt_record(seq: int, status: AttemptStatus = AttemptStatus.SUCCEEDED,
                   command_status: CommandStatus = CommandStatus.DELIVERED, run_id: str = "run_1") -> AttemptRecord:
    terminal = status.terminal
    return AttemptRecord(
        id=f"att_{seq}", run_id=run_id, seq=seq, command_id=f"cmd_{seq}", status=status, delivery=1,
        created_at=T0, started_at=T0, finished_at=T0 if terminal else None, error=None,
        command_status=command_status, lease_owner=None, lease_until=None, last_heartbeat_at=T0,
        delivery_count=1, available_at=T0)


def evidence_for(position: int, attempt_id: str, result: Any = None) -> dict[str, Any]:
    """Realistic evidence: semantic parts plus volatile identity that differs per Attempt."""
    code = SCENARIO_CODES[position - 1]
    return {
        "scenario": code, "position": position, "status": "SUCCEEDED",
        "package": {"name": "demo", "version": "1.0.0", "content_digest": "sha256:" + "0" * 64},
        "result": result if result is not None else {"tables": {"t": {"rows": position}}},
        "execution": {"worker": f"w-{attempt_id}", "delivery": 1, "attempt_id": attempt_id, "duration_ms": 1.5},
        "sandbox": {"id": f"sbx_{attempt_id}"},
        **({"target_receipt": {"receipt_id": f"tr_{attempt_id}", "replayed": False},
            "idempotency_key": f"{attempt_id}:deliver_and_install"} if position == 1 else {}),
    }


def receipt_record(attempt_id: str, position: int, evidence: dict[str, Any] | None = None,
                   status: ReceiptStatus = ReceiptStatus.SUCCEEDED) -> ReceiptRecord:
    text, fp = seal(evidence if evidence is not None else evidence_for(position, attempt_id))
    return ReceiptRecord(id=f"rcp_{attempt_id}_{position}", attempt_id=attempt_id, position=position,
                         scenario=SCENARIO_CODES[position - 1], status=status, delivery=1, evidence=text,
                         evidence_fingerprint=fp, started_at=T0, finished_at=T0)


def receipts_for(attempt_id: str, results: dict[int, Any] | None = None) -> list[ReceiptRecord]:
    """Six SUCCEEDED Receipts with sealed evidence; ``results`` overrides a position's ``result``."""
    results = results or {}
    return [receipt_record(attempt_id, p, evidence_for(p, attempt_id, results.get(p))) for p in range(1, 7)]


def tamper(receipt: ReceiptRecord, text: str) -> ReceiptRecord:
    """The same Receipt with its stored evidence text replaced (fingerprint kept)."""
    return replace(receipt, evidence=text)
