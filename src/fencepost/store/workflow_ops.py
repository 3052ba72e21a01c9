"""Package publication, installation guards and workflow admission: every database operation, written once.

Rows that admission replay verifies are returned as plain dicts of their stored columns (times as
aware datetimes), so the verifier compares exactly what is on disk.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from fencepost.core.canonical import parse_json
from fencepost.store.records import RunRecord
from fencepost.store.rehearsal_ops import run_from_row
from fencepost.store.workflow_records import (
    AdmissionRow,
    DispositionRecord,
    HeadRecord,
    InstallationRecord,
    PublicationRecord,
    QuarantineRecord,
    WorkflowRunRow,
)

if TYPE_CHECKING:
    from fencepost.store.base import Result


class WorkflowOps:
    """Mixed into ``Transaction``; relies on ``_run`` and ``now``."""

    def _run(self, name: str, params: dict[str, Any]) -> Result:  # pragma: no cover - abstract
        raise NotImplementedError

    def now(self) -> datetime:  # pragma: no cover - abstract
        raise NotImplementedError

    def lock_package(self, package_name: str) -> None:
        """Serialize with every other guard change or admission of ``package_name`` until COMMIT.

        SQLite: a no-op (``BEGIN IMMEDIATE`` already serializes writers). PostgreSQL: a
        transaction-scoped advisory lock keyed by the package name.
        """
        self._run("lock_package", {"package_name": package_name})

    def runs_by_digest(self, content_digest: str) -> list[RunRecord]:
        """Rehearsal Runs of exactly this package content, newest first."""
        return [run_from_row(r) for r in self._run("runs_by_digest", {"content_digest": content_digest}).rows]

    # ── publications and head ──
    def insert_publication(self, *, publication_id: str, package_name: str, version: str, content_digest: str,
                           definition: str, definition_digest: str, gate: str, gate_run_id: str | None,
                           previous_publication_id: str | None) -> None:
        self._run("insert_publication", {
            "id": publication_id, "package_name": package_name, "version": version, "content_digest": content_digest,
            "definition": definition, "definition_digest": definition_digest, "gate": gate,
            "gate_run_id": gate_run_id, "previous_publication_id": previous_publication_id, "now": self.now()})

    def get_publication(self, publication_id: str) -> PublicationRecord | None:
        rows = self._run("get_publication", {"id": publication_id}).rows
        return _publication(rows[0]) if rows else None

    def get_publication_by_version(self, package_name: str, version: str) -> PublicationRecord | None:
        rows = self._run("get_publication_by_version", {"package_name": package_name, "version": version}).rows
        return _publication(rows[0]) if rows else None

    def list_publications(self, package_name: str) -> list[PublicationRecord]:
        return [_publication(r) for r in self._run("list_publications", {"package_name": package_name}).rows]

    def all_publications(self) -> list[PublicationRecord]:
        return [_publication(r) for r in self._run("all_publications", {}).rows]

    def all_installations(self) -> list[InstallationRecord]:
        return [_installation(r) for r in self._run("all_installations", {}).rows]

    def withdraw_publication(self, publication_id: str) -> bool:
        return self._run("withdraw_publication", {"id": publication_id, "now": self.now()}).rowcount == 1

    def get_head(self, package_name: str) -> HeadRecord | None:
        rows = self._run("get_head", {"package_name": package_name}).rows
        if not rows:
            return None
        r = rows[0]
        return HeadRecord(r["package_name"], r["publication_id"], int(r["revision"]), r["updated_at"])

    def move_head(self, package_name: str, publication_id: str, expected_revision: int | None) -> bool:
        """Compare-and-set the package head. ``expected_revision=None`` means "no head yet".

        Returns:
            False when the head moved since the caller read it (nothing written).
        """
        params = {"package_name": package_name, "publication_id": publication_id,
                  "expected_revision": expected_revision, "now": self.now()}
        if expected_revision is None:
            if self.get_head(package_name) is not None:
                return False
            self._run("insert_head", params)
            return True
        return self._run("move_head", params).rowcount == 1

    # ── installations ──
    def get_installation(self, package_name: str) -> InstallationRecord | None:
        rows = self._run("get_installation", {"package_name": package_name}).rows
        return _installation(rows[0]) if rows else None

    def insert_installation(self, *, installation_id: str, package_name: str, publication_id: str,
                            lock_digest: str) -> None:
        self._run("insert_installation", {"id": installation_id, "package_name": package_name,
                                          "publication_id": publication_id, "lock_digest": lock_digest,
                                          "now": self.now()})

    def update_installation(self, *, installation_id: str, publication_id: str, lock_digest: str,
                            expected_generation: int) -> bool:
        return self._run("update_installation", {
            "id": installation_id, "publication_id": publication_id, "lock_digest": lock_digest,
            "expected_generation": expected_generation, "now": self.now()}).rowcount == 1

    def get_disposition(self, installation_id: str) -> DispositionRecord | None:
        rows = self._run("get_disposition", {"installation_id": installation_id}).rows
        if not rows:
            return None
        r = rows[0]
        return DispositionRecord(r["installation_id"], r["disposition"], r["reason"], r["updated_at"])

    def set_disposition(self, installation_id: str, disposition: str, reason: str | None) -> None:
        self._run("set_disposition", {"installation_id": installation_id, "disposition": disposition,
                                      "reason": reason, "now": self.now()})

    def open_quarantine(self, installation_id: str, lock_digest: str) -> QuarantineRecord | None:
        rows = self._run("open_quarantine", {"installation_id": installation_id, "lock_digest": lock_digest}).rows
        if not rows:
            return None
        r = rows[0]
        return QuarantineRecord(r["id"], r["installation_id"], r["lock_digest"], r["reason"], r["quarantined_at"])

    def insert_quarantine(self, *, quarantine_id: str, installation_id: str, lock_digest: str, reason: str) -> None:
        self._run("insert_quarantine", {"id": quarantine_id, "installation_id": installation_id,
                                        "lock_digest": lock_digest, "reason": reason, "now": self.now()})

    def release_quarantine(self, installation_id: str, lock_digest: str, reason: str) -> bool:
        return self._run("release_quarantine", {"installation_id": installation_id, "lock_digest": lock_digest,
                                                "reason": reason, "now": self.now()}).rowcount == 1

    # ── admission ──
    def get_admission(self, plan_id: str) -> AdmissionRow | None:
        rows = self._run("get_admission", {"plan_id": plan_id}).rows
        return _admission(rows[0]) if rows else None

    def list_admission_plan_ids(self) -> list[str]:
        return [str(r["plan_id"]) for r in self._run("list_admission_plan_ids", {}).rows]

    def get_admission_by_run(self, run_id: str) -> AdmissionRow | None:
        rows = self._run("get_admission_by_run", {"run_id": run_id}).rows
        return _admission(rows[0]) if rows else None

    def admission_rows(self, plan_id: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every stored row an admission wrote, by table, for replay verification."""
        return {
            "workflow_admission_steps": self._run("admission_steps", {"plan_id": plan_id}).rows,
            "workflow_runs": self._run("get_workflow_run", {"id": run_id}).rows,
            "workflow_step_runs": self._run("workflow_step_runs", {"run_id": run_id}).rows,
            "workflow_events": self._run("workflow_events", {"run_id": run_id}).rows,
            "workflow_step_mutations": self._run("workflow_mutations", {"run_id": run_id}).rows,
            "workflow_admission_receipts": self._run("get_admission_receipt", {"plan_id": plan_id}).rows,
        }

    def get_workflow_run(self, run_id: str) -> WorkflowRunRow | None:
        rows = self._run("get_workflow_run", {"id": run_id}).rows
        return _workflow_run(rows[0]) if rows else None

    def list_workflow_runs(self, limit: int = 100) -> list[WorkflowRunRow]:
        return [_workflow_run(r) for r in self._run("list_workflow_runs", {"limit": limit}).rows]

    def insert_row(self, query: str, params: dict[str, Any]) -> None:
        """Insert one admission row with a named ``insert_*`` query (the bundle supplies the columns)."""
        if not query.startswith("insert_"):
            raise ValueError(f"{query!r} is not an insert query")
        self._run(query, params)


def _publication(r: dict[str, Any]) -> PublicationRecord:
    definition = parse_json(r["definition"])
    return PublicationRecord(
        id=r["id"], package_name=r["package_name"], version=r["version"], content_digest=r["content_digest"],
        definition=definition if isinstance(definition, dict) else {}, definition_text=r["definition"],
        definition_digest=r["definition_digest"], status=r["status"], gate=r["gate"], gate_run_id=r["gate_run_id"],
        previous_publication_id=r["previous_publication_id"], published_at=r["published_at"],
        withdrawn_at=r["withdrawn_at"])


def _installation(r: dict[str, Any]) -> InstallationRecord:
    return InstallationRecord(r["id"], r["package_name"], r["publication_id"], r["lock_digest"], r["status"],
                              int(r["generation"]), r["installed_at"], r["updated_at"])


def _admission(r: dict[str, Any]) -> AdmissionRow:
    return AdmissionRow(
        plan_id=r["plan_id"], plan_digest=r["plan_digest"], plan=r["plan"], run_id=r["run_id"],
        package_name=r["package_name"], publication_id=r["publication_id"], installation_id=r["installation_id"],
        lock_digest=r["lock_digest"], workflow_id=r["workflow_id"], workflow_digest=r["workflow_digest"],
        step_count=int(r["step_count"]), final_fence=int(r["final_fence"]), receipt_id=r["receipt_id"],
        admitted_at=r["admitted_at"])


def _workflow_run(r: dict[str, Any]) -> WorkflowRunRow:
    return WorkflowRunRow(r["id"], r["plan_id"], r["installation_id"], r["publication_id"], r["workflow_id"],
                          r["status"], int(r["fence"]), r["created_at"])
