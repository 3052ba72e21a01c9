"""Rehearsal operations: every database operation on Runs, Attempts and Receipts, written once.

Lock order is Attempt then Outbox on every path (seed: "Durable Command"): each method that touches both
writes the Attempt row first; callers that fence with ``renew_lease``/``finish_command`` do so last.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus, RunStatus
from fencepost.store.records import AttemptRecord, ReceiptRecord, RunFile, RunRecord

if TYPE_CHECKING:
    from fencepost.store.base import Result


class RehearsalOps:
    """Mixed into ``Transaction``; relies on ``_run`` and ``now``."""

    def _run(self, name: str, params: dict[str, Any]) -> Result:  # pragma: no cover - abstract
        raise NotImplementedError

    def now(self) -> datetime:  # pragma: no cover - abstract
        raise NotImplementedError

    # ── runs ──
    def insert_run(self, *, run_id: str, package_name: str, package_version: str,
                   previous_version: str | None, content_digest: str, manifest: dict[str, Any],
                   files: list[RunFile]) -> None:
        """Freeze a package version as a READY Run with every file's bytes."""
        self._run("insert_run", {"id": run_id, "package_name": package_name, "package_version": package_version,
                                 "previous_version": previous_version, "content_digest": content_digest,
                                 "manifest": canonical_json(manifest), "now": self.now()})
        for f in files:
            self._run("insert_run_file", {"run_id": run_id, "path": f.path, "sha256": f.sha256, "size": f.size,
                                          "content": f.content})

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._run("get_run", {"id": run_id}).rows
        return run_from_row(rows[0]) if rows else None

    def list_runs(self, limit: int = 100) -> list[RunRecord]:
        return [run_from_row(r) for r in self._run("list_runs", {"limit": limit}).rows]

    def run_files(self, run_id: str) -> list[RunFile]:
        return [RunFile(path=r["path"], sha256=r["sha256"], size=int(r["size"]), content=bytes(r["content"]))
                for r in self._run("run_files", {"run_id": run_id}).rows]

    def retire_run(self, run_id: str) -> bool:
        return self._run("retire_run", {"id": run_id}).rowcount == 1

    # ── attempts ──
    def next_attempt_seq(self, run_id: str) -> int:
        return int(self._run("next_attempt_seq", {"run_id": run_id}).rows[0]["seq"])

    def insert_attempt(self, *, attempt_id: str, run_id: str, seq: int, command_id: str,
                       receipts: list[tuple[str, int, str]]) -> None:
        """Insert a PENDING Attempt and its Receipts ``(receipt_id, position, scenario)``.

        The caller inserts the command first (FK) in the same transaction.
        """
        self._run("insert_attempt", {"id": attempt_id, "run_id": run_id, "seq": seq, "command_id": command_id,
                                     "now": self.now()})
        for receipt_id, position, scenario in receipts:
            self._run("insert_receipt", {"id": receipt_id, "attempt_id": attempt_id, "position": position,
                                         "scenario": scenario})

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        rows = self._run("get_attempt", {"id": attempt_id}).rows
        return _attempt(rows[0]) if rows else None

    def lock_attempt(self, attempt_id: str) -> dict[str, Any] | None:
        """Take the Attempt row lock (first in Attempt-then-Outbox order); returns id/status/command_id."""
        rows = self._run("lock_attempt", {"id": attempt_id}).rows
        return rows[0] if rows else None

    def list_attempts(self, run_id: str) -> list[AttemptRecord]:
        return [_attempt(r) for r in self._run("list_attempts", {"run_id": run_id}).rows]

    def attempt_receipts(self, attempt_id: str) -> list[ReceiptRecord]:
        return [receipt_from_row(r) for r in self._run("attempt_receipts", {"attempt_id": attempt_id}).rows]

    def start_attempt(self, attempt_id: str, delivery: int) -> str | None:
        """(Re)start a non-terminal Attempt for ``delivery`` and reset provisional Receipts.

        Returns:
            The Run id, or None when the Attempt is terminal (nothing changed).
        """
        now = self.now()
        rows = self._run("start_attempt", {"id": attempt_id, "delivery": delivery, "now": now}).rows
        if not rows:
            return None
        self._run("reset_receipts", {"attempt_id": attempt_id})
        return str(rows[0]["run_id"])

    def receipt_running(self, attempt_id: str, position: int, delivery: int) -> bool:
        params = {"attempt_id": attempt_id, "position": position, "delivery": delivery, "now": self.now()}
        return self._run("receipt_running", params).rowcount == 1

    def receipt_finish(self, attempt_id: str, position: int, delivery: int, status: ReceiptStatus,
                       evidence: str, evidence_fingerprint: str) -> bool:
        """Record a RUNNING Receipt's outcome with its canonical evidence and fingerprint."""
        params = {"attempt_id": attempt_id, "position": position, "delivery": delivery, "status": str(status),
                  "evidence": evidence, "evidence_fingerprint": evidence_fingerprint, "now": self.now()}
        return self._run("receipt_finish", params).rowcount == 1

    def abort_open_receipts(self, attempt_id: str) -> int:
        return self._run("abort_open_receipts", {"attempt_id": attempt_id, "now": self.now()}).rowcount

    def finish_attempt(self, attempt_id: str, delivery: int, status: AttemptStatus,
                       error: str | None = None) -> bool:
        params = {"id": attempt_id, "delivery": delivery, "status": str(status), "error": error,
                  "now": self.now()}
        return self._run("finish_attempt", params).rowcount == 1

    def abort_attempt(self, attempt_id: str, reason: str) -> str | None:
        """Mark a PENDING or RUNNING Attempt ABORTED; returns its command id, or None if not abortable."""
        rows = self._run("abort_attempt", {"id": attempt_id, "error": reason, "now": self.now()}).rows
        return str(rows[0]["command_id"]) if rows else None


def _json_obj(raw: Any) -> dict[str, Any]:
    value = parse_json(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def run_from_row(r: dict[str, Any]) -> RunRecord:
    """Build a ``RunRecord`` from a row of ``get_run``-shaped columns."""
    return RunRecord(id=r["id"], package_name=r["package_name"], package_version=r["package_version"],
                     previous_version=r["previous_version"], content_digest=r["content_digest"],
                     manifest=_json_obj(r["manifest"]), status=RunStatus(r["status"]), created_at=r["created_at"])


def _attempt(r: dict[str, Any]) -> AttemptRecord:
    return AttemptRecord(
        id=r["id"], run_id=r["run_id"], seq=int(r["seq"]), command_id=r["command_id"],
        status=AttemptStatus(r["status"]), delivery=int(r["delivery"]), created_at=r["created_at"],
        started_at=r["started_at"], finished_at=r["finished_at"], error=r["error"],
        command_status=CommandStatus(r["command_status"]), lease_owner=r["lease_owner"],
        lease_until=r["lease_until"], last_heartbeat_at=r["last_heartbeat_at"],
        delivery_count=int(r["delivery_count"]), available_at=r["available_at"])


def receipt_from_row(r: dict[str, Any]) -> ReceiptRecord:
    """Build a ``ReceiptRecord`` from a row of ``attempt_receipts``-shaped columns."""
    return ReceiptRecord(
        id=r["id"], attempt_id=r["attempt_id"], position=int(r["position"]), scenario=r["scenario"],
        status=ReceiptStatus(r["status"]), delivery=None if r["delivery"] is None else int(r["delivery"]),
        evidence=r["evidence"], evidence_fingerprint=r["evidence_fingerprint"], started_at=r["started_at"],
        finished_at=r["finished_at"])
