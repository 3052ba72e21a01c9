"""``EventLeasesPort`` over SQL: leases on event outbox rows (``event_leases.sql``; ADR 0040, host-spec U).

The store conformance checks (``fencepost.events.conformance``) drive an outbox row through its four states
(pending, leased, retry-pending, published) and dead-letter what they leave pending. Every write names the
caller's owner and token, so a row leased by anyone else is never touched.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fencepost.core.canonical import parse_json
from fencepost.store.sql.executor import Statements


@dataclass(frozen=True)
class EventOutboxRow:
    """One event outbox row as stored, with its event's scope (host-spec T8)."""

    event_id: str
    tenant_id: str
    space_id: str
    destination: str
    headers: dict[str, Any]
    status: str
    attempts: int
    lease_owner: str | None
    lease_token: str | None
    lease_until: datetime | None
    available_at: datetime
    published_at: datetime | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime


def _row(r: dict[str, Any]) -> EventOutboxRow:
    headers = r["headers"]
    return EventOutboxRow(
        event_id=r["event_id"], tenant_id=r["tenant_id"], space_id=r["space_id"], destination=r["destination"],
        headers=parse_json(headers) if isinstance(headers, str) else headers, status=r["status"],
        attempts=int(r["attempts"]), lease_owner=r["lease_owner"], lease_token=r["lease_token"],
        lease_until=r["lease_until"], available_at=r["available_at"], published_at=r["published_at"],
        last_error=r["last_error"], created_at=r["created_at"], updated_at=r["updated_at"])


class SqlEventLeases:
    """The ``EventLeasesPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements, settle_events: Callable[[], None] = lambda: None) -> None:
        self._unit = unit
        self._settle_events = settle_events  # ADR 0096: sequences this transaction appended, taken now

    def list_rows(self, *, tenant_id: str, space_id: str) -> list[EventOutboxRow]:
        """Every outbox row of one (tenant, space), any status, in event sequence order."""
        self._settle_events()
        return [_row(r) for r in self._unit.run("probe_list_outbox_rows",
                                                {"tenant_id": tenant_id, "space_id": space_id}).rows]

    def claim(self, *, owner: str, tenant_id: str, space_id: str | None, limit: int, lease_seconds: float,
              now: datetime) -> list[EventOutboxRow]:
        """Lease up to ``limit`` due rows of ``tenant_id`` (and ``space_id`` when given), each with a fresh token.

        Args:
            now: the caller's current time: due means available (or lease expired) at ``now``; the lease
                runs to ``now + lease_seconds``.
        Returns:
            The leased rows as they are now.
        """
        if limit < 1:
            return []
        ids = [r["event_id"] for r in self._unit.run("probe_due_outbox_rows", {
            "tenant_id": tenant_id, "space_id": space_id, "now": now, "limit": limit}).rows]
        until = now + timedelta(seconds=lease_seconds)
        leased = [event_id for event_id in ids if self._unit.run("probe_lease_outbox_row", {
            "event_id": event_id, "owner": owner, "token": secrets.token_hex(16), "lease_until": until,
            "now": now}).rows]
        if not leased:
            return []
        return [_row(r) for event_id in leased
                for r in self._unit.run("probe_get_outbox_row", {"event_id": event_id}).rows]

    def publish(self, event_id: str, *, owner: str, token: str, at: datetime) -> bool:
        """Mark a row published under the caller's lease. Returns False, changing nothing, otherwise."""
        return bool(self._unit.run("probe_publish_outbox_row",
                                   {"event_id": event_id, "owner": owner, "token": token, "at": at}).rows)

    def fail(self, event_id: str, *, owner: str, token: str, error: str, available_at: datetime) -> bool:
        """A failed publication under the caller's lease: retry-pending from ``available_at``, lease released."""
        return bool(self._unit.run("probe_fail_outbox_row", {
            "event_id": event_id, "owner": owner, "token": token, "error": error,
            "available_at": available_at}).rows)

    def dead_letter(self, event_id: str, *, owner: str, token: str, reason: str, now: datetime) -> bool:
        """Dead-letter a row under the caller's lease with ``reason`` as its last error."""
        return bool(self._unit.run("probe_dead_letter_outbox_row", {
            "event_id": event_id, "owner": owner, "token": token, "reason": reason, "now": now}).rows)
