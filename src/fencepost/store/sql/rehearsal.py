"""``RehearsalPort`` and ``FencedRehearsalPort`` over SQL: Runs, Attempts and Receipts, written once.

Lock order is Attempt then Outbox on every path (seed: "Durable Command"): each unit that touches both
locks or writes the Attempt row first; the fence (renewal or finish of the command) comes last.
"""

from __future__ import annotations

import json
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import LeaseLost
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus, RunStatus
from fencepost.store.records import AttemptLock, AttemptRecord, Lease, ReceiptRecord, RunFile, RunRecord
from fencepost.store.sql.executor import Result, Statements, json_object
from fencepost.store.sql.lease import lease_held, lease_params


class SqlRehearsal:
    """The ``RehearsalPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    # ── runs ──
    def insert_run(self, *, run_id: str, package_name: str, package_version: str, previous_version: str | None,
                   content_digest: str, manifest: dict[str, Any], files: list[RunFile]) -> None:
        self._unit.run("insert_run", {
            "id": run_id, "package_name": package_name, "package_version": package_version,
            "previous_version": previous_version, "content_digest": content_digest,
            "manifest": canonical_json(manifest), "now": self._unit.now()})
        for f in files:
            self._unit.run("insert_run_file", {"run_id": run_id, "path": f.path, "sha256": f.sha256, "size": f.size,
                                               "content": f.content})

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._unit.run("get_run", {"id": run_id}).rows
        return run_from_row(rows[0]) if rows else None

    def list_runs(self, limit: int = 100) -> list[RunRecord]:
        return [run_from_row(r) for r in self._unit.run("list_runs", {"limit": limit}).rows]

    def run_files(self, run_id: str) -> list[RunFile]:
        return [RunFile(path=r["path"], sha256=r["sha256"], size=int(r["size"]), content=bytes(r["content"]))
                for r in self._unit.run("run_files", {"run_id": run_id}).rows]

    def runs_by_digest(self, content_digest: str) -> list[RunRecord]:
        return [run_from_row(r) for r in self._unit.run("runs_by_digest", {"content_digest": content_digest}).rows]

    def retire_run(self, run_id: str) -> bool:
        return self._unit.run("retire_run", {"id": run_id}).rowcount == 1

    # ── attempts ──
    def next_attempt_seq(self, run_id: str) -> int:
        return int(self._unit.run("next_attempt_seq", {"run_id": run_id}).rows[0]["seq"])

    def insert_attempt(self, *, attempt_id: str, run_id: str, seq: int, command_id: str,
                       receipts: list[tuple[str, int, str]]) -> None:
        self._unit.run("insert_attempt", {"id": attempt_id, "run_id": run_id, "seq": seq, "command_id": command_id,
                                          "now": self._unit.now()})
        for receipt_id, position, scenario in receipts:
            self._unit.run("insert_receipt", {"id": receipt_id, "attempt_id": attempt_id, "position": position,
                                              "scenario": scenario})

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        rows = self._unit.run("get_attempt", {"id": attempt_id}).rows
        return _attempt(rows[0]) if rows else None

    def lock_attempt(self, attempt_id: str) -> AttemptLock | None:
        rows = self._unit.run("lock_attempt", {"id": attempt_id}).rows
        if not rows:
            return None
        return AttemptLock(id=rows[0]["id"], status=AttemptStatus(rows[0]["status"]),
                           command_id=rows[0]["command_id"])

    def list_attempts(self, run_id: str) -> list[AttemptRecord]:
        return [_attempt(r) for r in self._unit.run("list_attempts", {"run_id": run_id}).rows]

    def attempt_receipts(self, attempt_id: str) -> list[ReceiptRecord]:
        return [receipt_from_row(r) for r in self._unit.run("attempt_receipts", {"attempt_id": attempt_id}).rows]

    def latest_seal_key_id(self) -> str | None:
        rows = self._unit.run("latest_sealed_evidence", {}).rows
        if not rows:
            return None
        try:
            evidence = json.loads(rows[0]["evidence"])
        except (TypeError, ValueError, RecursionError):  # unreadable evidence: `fencepost audit` reports it
            return None
        seal = evidence.get("seal") if isinstance(evidence, dict) else None
        key_id = seal.get("key_id") if isinstance(seal, dict) else None
        return key_id if isinstance(key_id, str) else None

    def abort_attempt(self, attempt_id: str, reason: str) -> str | None:
        rows = self._unit.run("abort_attempt", {"id": attempt_id, "error": reason, "now": self._unit.now()}).rows
        return str(rows[0]["command_id"]) if rows else None

    def abort_open_receipts(self, attempt_id: str) -> int:
        return self._unit.run("abort_open_receipts", {"attempt_id": attempt_id, "now": self._unit.now()}).rowcount


class SqlFencedRehearsal(SqlRehearsal):
    """The ``FencedRehearsalPort`` of one fenced unit: delivery writes under ``lease``, its delivery number.

    A write that touched nothing because the lease is gone raises ``LeaseLost`` at once (what the unit's
    fence would raise at its end), so a stale delivery is never mistaken for a state conflict.
    """

    def __init__(self, unit: Statements, lease: Lease) -> None:
        super().__init__(unit)
        self._lease = lease

    def _write(self, name: str, **params: Any) -> Result:
        result = self._unit.run(name, {**params, **lease_params(self._lease), "delivery": self._lease.delivery,
                                       "now": self._unit.now()})
        if result.rowcount < 1 and not lease_held(self._unit, self._lease):
            raise LeaseLost(f"lease on command {self._lease.command_id} (delivery {self._lease.delivery}) was lost")
        return result

    def start_attempt(self, attempt_id: str) -> str | None:
        rows = self._write("start_attempt", id=attempt_id).rows
        if not rows:
            return None
        self._write("reset_receipts", attempt_id=attempt_id)
        return str(rows[0]["run_id"])

    def receipt_running(self, attempt_id: str, position: int) -> bool:
        return self._write("receipt_running", attempt_id=attempt_id, position=position).rowcount == 1

    def receipt_finish(self, attempt_id: str, position: int, status: ReceiptStatus, evidence: str,
                       evidence_fingerprint: str) -> bool:
        return self._write("receipt_finish", attempt_id=attempt_id, position=position, status=str(status),
                           evidence=evidence, evidence_fingerprint=evidence_fingerprint).rowcount == 1

    def finish_attempt(self, attempt_id: str, status: AttemptStatus, error: str | None = None) -> bool:
        return self._write("finish_attempt", id=attempt_id, status=str(status), error=error).rowcount == 1


def run_from_row(r: dict[str, Any]) -> RunRecord:
    """A ``RunRecord`` from a row of ``get_run``'s columns."""
    return RunRecord(id=r["id"], package_name=r["package_name"], package_version=r["package_version"],
                     previous_version=r["previous_version"], content_digest=r["content_digest"],
                     manifest=json_object(r["manifest"], "run manifest"), status=RunStatus(r["status"]),
                     created_at=r["created_at"])


def _attempt(r: dict[str, Any]) -> AttemptRecord:
    return AttemptRecord(
        id=r["id"], run_id=r["run_id"], seq=int(r["seq"]), command_id=r["command_id"],
        status=AttemptStatus(r["status"]), delivery=int(r["delivery"]), created_at=r["created_at"],
        started_at=r["started_at"], finished_at=r["finished_at"], error=r["error"],
        command_status=CommandStatus(r["command_status"]), lease_owner=r["lease_owner"],
        lease_until=r["lease_until"], last_heartbeat_at=r["last_heartbeat_at"],
        delivery_count=int(r["delivery_count"]), available_at=r["available_at"])


def receipt_from_row(r: dict[str, Any]) -> ReceiptRecord:
    """A ``ReceiptRecord`` from a row of ``attempt_receipts``'s columns."""
    return ReceiptRecord(
        id=r["id"], attempt_id=r["attempt_id"], position=int(r["position"]), scenario=r["scenario"],
        status=ReceiptStatus(r["status"]), delivery=None if r["delivery"] is None else int(r["delivery"]),
        evidence=r["evidence"], evidence_fingerprint=r["evidence_fingerprint"], started_at=r["started_at"],
        finished_at=r["finished_at"])
