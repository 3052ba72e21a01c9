"""``DeliveryPort`` over SQL: the targets and delivery starts of ``delivery.sql`` (ADRs 0055, 0056), written once."""

from __future__ import annotations

from typing import Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.store.delivery_records import DeliveryStartRecord, TargetRecord
from fencepost.store.sql.executor import Statements


class SqlDelivery:
    """The ``DeliveryPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    def insert_target(self, *, target_id: str, name: str, url: str, labels: dict[str, str]) -> TargetRecord | None:
        rows = self._unit.run("insert_target", {"id": target_id, "name": name, "url": url,
                                                "labels": canonical_json(dict(sorted(labels.items()))),
                                                "now": self._unit.now()}).rows
        return target_from_row(rows[0]) if rows else None

    def get_live_target(self, name: str) -> TargetRecord | None:
        rows = self._unit.run("get_live_target", {"name": name}).rows
        return target_from_row(rows[0]) if rows else None

    def get_target(self, target_id: str) -> TargetRecord | None:
        rows = self._unit.run("get_target", {"id": target_id}).rows
        return target_from_row(rows[0]) if rows else None

    def list_live_targets(self) -> list[TargetRecord]:
        return [target_from_row(r) for r in self._unit.run("list_live_targets", {}).rows]

    def list_targets(self) -> list[TargetRecord]:
        return [target_from_row(r) for r in self._unit.run("list_targets", {}).rows]

    def remove_target(self, name: str) -> TargetRecord | None:
        rows = self._unit.run("remove_target", {"name": name, "now": self._unit.now()}).rows
        return target_from_row(rows[0]) if rows else None

    def insert_delivery_start(self, start: DeliveryStartRecord) -> bool:
        return self._unit.run("insert_delivery_start", {
            "invocation_id": start.invocation_id, "package_name": start.package_name, "version": start.version,
            "publication_id": start.publication_id, "installation_id": start.installation_id,
            "lock_digest": start.lock_digest, "target_id": start.target_id, "now": self._unit.now()}).rowcount == 1

    def get_delivery_start(self, invocation_id: str) -> DeliveryStartRecord | None:
        rows = self._unit.run("get_delivery_start", {"invocation_id": invocation_id}).rows
        return start_from_row(rows[0]) if rows else None

    def list_delivery_starts(self, package_name: str) -> list[DeliveryStartRecord]:
        return [start_from_row(r) for r in self._unit.run("list_delivery_starts", {"package_name": package_name}).rows]


def target_from_row(row: dict[str, Any]) -> TargetRecord:
    """A ``TargetRecord`` from a row (``labels`` is JSON text on both dialects)."""
    labels = parse_json(row["labels"]) if isinstance(row["labels"], str) else row["labels"]
    if not isinstance(labels, dict):
        raise ValueError(f"labels of target {row['id']} is not a JSON object")
    return TargetRecord(id=row["id"], name=row["name"], url=row["url"],
                        labels={str(k): str(v) for k, v in labels.items()}, added_at=row["added_at"],
                        removed_at=row["removed_at"])


def start_from_row(row: dict[str, Any]) -> DeliveryStartRecord:
    return DeliveryStartRecord(**{k: row[k] for k in (
        "invocation_id", "package_name", "version", "publication_id", "installation_id", "lock_digest",
        "target_id", "started_at")})
