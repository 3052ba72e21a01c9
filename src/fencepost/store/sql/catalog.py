"""``CatalogPort`` over SQL: publications, the head, installations, dispositions and quarantines (ADR-0224)."""

from __future__ import annotations

from typing import Any

from fencepost.core.canonical import parse_json
from fencepost.core.statuses import Disposition, InstallationStatus, PublicationGate, PublicationStatus
from fencepost.store.sql.executor import Statements
from fencepost.store.workflow_records import (
    DispositionRecord,
    HeadRecord,
    InstallationRecord,
    PublicationRecord,
    QuarantineRecord,
)


class SqlCatalog:
    """The ``CatalogPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    def lock_package(self, package_name: str) -> None:
        # SQLite: nothing to do (BEGIN IMMEDIATE already serializes writers); PostgreSQL: an advisory lock.
        self._unit.run("lock_package", {"package_name": package_name})

    # ── publications and head ──
    def insert_publication(self, *, publication_id: str, package_name: str, version: str, content_digest: str,
                           definition: str, definition_digest: str, gate: str, gate_run_id: str | None,
                           previous_publication_id: str | None) -> PublicationRecord:
        return _publication(self._unit.run("insert_publication", {
            "id": publication_id, "package_name": package_name, "version": version, "content_digest": content_digest,
            "definition": definition, "definition_digest": definition_digest, "gate": str(gate),
            "gate_run_id": gate_run_id, "previous_publication_id": previous_publication_id,
            "now": self._unit.now()}).rows[0])

    def get_publication(self, publication_id: str) -> PublicationRecord | None:
        rows = self._unit.run("get_publication", {"id": publication_id}).rows
        return _publication(rows[0]) if rows else None

    def get_publication_by_version(self, package_name: str, version: str) -> PublicationRecord | None:
        rows = self._unit.run("get_publication_by_version", {"package_name": package_name, "version": version}).rows
        return _publication(rows[0]) if rows else None

    def list_publications(self, package_name: str) -> list[PublicationRecord]:
        return [_publication(r) for r in self._unit.run("list_publications", {"package_name": package_name}).rows]

    def all_publications(self) -> list[PublicationRecord]:
        return [_publication(r) for r in self._unit.run("all_publications", {}).rows]

    def withdraw_publication(self, publication_id: str) -> PublicationRecord | None:
        rows = self._unit.run("withdraw_publication", {"id": publication_id, "now": self._unit.now()}).rows
        return _publication(rows[0]) if rows else None

    def get_head(self, package_name: str) -> HeadRecord | None:
        rows = self._unit.run("get_head", {"package_name": package_name}).rows
        if not rows:
            return None
        r = rows[0]
        return HeadRecord(r["package_name"], r["publication_id"], int(r["revision"]), r["updated_at"])

    def move_head(self, package_name: str, publication_id: str, expected_revision: int | None) -> bool:
        params = {"package_name": package_name, "publication_id": publication_id,
                  "expected_revision": expected_revision, "now": self._unit.now()}
        if expected_revision is None:
            if self.get_head(package_name) is not None:
                return False
            self._unit.run("insert_head", params)
            return True
        return self._unit.run("move_head", params).rowcount == 1

    # ── installations ──
    def get_installation(self, package_name: str) -> InstallationRecord | None:
        rows = self._unit.run("get_installation", {"package_name": package_name}).rows
        return _installation(rows[0]) if rows else None

    def all_installations(self) -> list[InstallationRecord]:
        return [_installation(r) for r in self._unit.run("all_installations", {}).rows]

    def insert_installation(self, *, installation_id: str, package_name: str, publication_id: str,
                            lock_digest: str) -> InstallationRecord:
        return _installation(self._unit.run("insert_installation", {
            "id": installation_id, "package_name": package_name, "publication_id": publication_id,
            "lock_digest": lock_digest, "now": self._unit.now()}).rows[0])

    def update_installation(self, *, installation_id: str, publication_id: str, lock_digest: str,
                            expected_generation: int) -> InstallationRecord | None:
        rows = self._unit.run("update_installation", {
            "id": installation_id, "publication_id": publication_id, "lock_digest": lock_digest,
            "expected_generation": expected_generation, "now": self._unit.now()}).rows
        return _installation(rows[0]) if rows else None

    def get_disposition(self, installation_id: str) -> DispositionRecord | None:
        rows = self._unit.run("get_disposition", {"installation_id": installation_id}).rows
        return _disposition(rows[0]) if rows else None

    def set_disposition(self, installation_id: str, disposition: Disposition, reason: str | None) -> DispositionRecord:
        return _disposition(self._unit.run("set_disposition", {
            "installation_id": installation_id, "disposition": str(disposition), "reason": reason,
            "now": self._unit.now()}).rows[0])

    def open_quarantine(self, installation_id: str, lock_digest: str) -> QuarantineRecord | None:
        rows = self._unit.run("open_quarantine", {"installation_id": installation_id, "lock_digest": lock_digest}).rows
        return _quarantine(rows[0]) if rows else None

    def insert_quarantine(self, *, quarantine_id: str, installation_id: str, lock_digest: str,
                          reason: str) -> QuarantineRecord:
        return _quarantine(self._unit.run("insert_quarantine", {
            "id": quarantine_id, "installation_id": installation_id, "lock_digest": lock_digest, "reason": reason,
            "now": self._unit.now()}).rows[0])

    def release_quarantine(self, installation_id: str, lock_digest: str, reason: str) -> bool:
        return self._unit.run("release_quarantine", {"installation_id": installation_id, "lock_digest": lock_digest,
                                                     "reason": reason, "now": self._unit.now()}).rowcount == 1


def _publication(r: dict[str, Any]) -> PublicationRecord:
    definition = parse_json(r["definition"])
    return PublicationRecord(
        id=r["id"], package_name=r["package_name"], version=r["version"], content_digest=r["content_digest"],
        definition=definition if isinstance(definition, dict) else {}, definition_text=r["definition"],
        definition_digest=r["definition_digest"], status=PublicationStatus(r["status"]),
        gate=PublicationGate(r["gate"]), gate_run_id=r["gate_run_id"],
        previous_publication_id=r["previous_publication_id"], published_at=r["published_at"],
        withdrawn_at=r["withdrawn_at"])


def _installation(r: dict[str, Any]) -> InstallationRecord:
    return InstallationRecord(r["id"], r["package_name"], r["publication_id"], r["lock_digest"],
                              InstallationStatus(r["status"]), int(r["generation"]), r["installed_at"],
                              r["updated_at"])


def _disposition(r: dict[str, Any]) -> DispositionRecord:
    return DispositionRecord(r["installation_id"], Disposition(r["disposition"]), r["reason"], r["updated_at"])


def _quarantine(r: dict[str, Any]) -> QuarantineRecord:
    return QuarantineRecord(r["id"], r["installation_id"], r["lock_digest"], r["reason"], r["quarantined_at"])
