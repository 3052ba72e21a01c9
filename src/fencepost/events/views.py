"""The JSON shapes of the event log and of the relay's publication rows and backlog, shared by ``fencepost
events --json`` and the HTTP API (``GET /v1/events``, ``GET /v1/events/spaces``, ``GET /v1/events/outbox``,
``GET /v1/events/outbox/summary``) so that both say the same thing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fencepost.core.clock import to_iso
from fencepost.core.statuses import EventOutboxStatus
from fencepost.store.host_records import EventOutboxRecord, EventOutboxSummary, EventRecord, EventSpace


def _iso(value: datetime | None) -> str | None:
    return None if value is None else to_iso(value)


def outbox_row_view(row: EventOutboxRecord) -> dict[str, Any]:
    """One publication row as plain JSON (host-spec T8), never its lease token.

    Returns:
        ``{"event_id", "tenant_id", "space_id", "type", "destination", "headers", "status", "attempts",
        "lease_owner", "lease_until", "available_at", "published_at", "last_error", "created_at",
        "updated_at"}``; instants are ``to_iso`` text or None. A dead letter's ``updated_at`` is when it was
        dead-lettered (nothing else writes a dead-lettered row until a requeue).
    """
    return {"event_id": row.event_id, "tenant_id": row.tenant_id, "space_id": row.space_id,
            "type": row.event_type, "destination": row.destination, "headers": row.headers,
            "status": str(row.status), "attempts": row.attempts, "lease_owner": row.lease_owner,
            "lease_until": _iso(row.lease_until), "available_at": _iso(row.available_at),
            "published_at": _iso(row.published_at), "last_error": row.last_error,
            "created_at": _iso(row.created_at), "updated_at": _iso(row.updated_at)}


def outbox_summary_view(summary: EventOutboxSummary) -> dict[str, Any]:
    """The relay's backlog by the store's clock.

    Returns:
        ``{"now", "counts", "backlog", "oldest_unpublished_at", "oldest_unpublished_age_seconds"}``: ``counts``
        has every ``EventOutboxStatus`` value (0 when none); ``backlog`` is pending + retry_pending +
        processing; the oldest backlog row's creation and its age in seconds are None when the backlog is empty.
    """
    return {"now": to_iso(summary.now),
            "counts": {s.value: summary.counts.get(s.value, 0) for s in EventOutboxStatus},
            "backlog": summary.backlog, "oldest_unpublished_at": _iso(summary.oldest_unpublished_at),
            "oldest_unpublished_age_seconds": summary.oldest_unpublished_age_seconds}


def event_view(event: EventRecord) -> dict[str, Any]:
    """One event as stored (host-spec T7).

    Returns:
        ``{"id", "tenant_id", "space_id", "sequence", "subject": {"subject_type", "subject_id"}, "type",
        "occurred_at", "recorded_at", "payload", "actor"}``; instants are ``to_iso`` text.
    """
    return {"id": event.id, "tenant_id": event.tenant_id, "space_id": event.space_id, "sequence": event.sequence,
            "subject": {"subject_type": event.subject.subject_type, "subject_id": event.subject.subject_id},
            "type": event.type, "occurred_at": to_iso(event.occurred_at), "recorded_at": to_iso(event.recorded_at),
            "payload": event.payload, "actor": event.actor}


def event_space_view(space: EventSpace) -> dict[str, Any]:
    """One space of the event log: ``{"tenant_id", "space_id", "last_sequence"}``."""
    return {"tenant_id": space.tenant_id, "space_id": space.space_id, "last_sequence": space.last_sequence}
