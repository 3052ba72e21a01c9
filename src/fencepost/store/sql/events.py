"""``EventsPort`` over SQL: the host's first-write-wins event log and its outbox (``events.sql``; host-spec T).

An append takes the space's next sequence only when the id is not stored yet, then inserts the event; an id
stored by a concurrent append meanwhile inserts nothing (its taken sequence stays a gap). The outbox row is
written only when this unit's insert happened (T3).
"""

from __future__ import annotations

from typing import Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.core.statuses import EventOutboxStatus
from fencepost.store.host_records import EventOutboxRecord, EventRecord, NewEvent, Subject
from fencepost.store.sql.executor import Statements

#: The outbox destination of an event appended without one.
DEFAULT_DESTINATION = "host"


def _parsed(raw: Any) -> Any:
    return parse_json(raw) if isinstance(raw, str) else raw


class SqlEvents:
    """The ``EventsPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    def append_event(self, event: NewEvent) -> bool:
        now = self._unit.now()
        taken = self._unit.run("next_event_sequence", {"id": event.id, "tenant_id": event.tenant_id,
                                                       "space_id": event.space_id}).rows
        if not taken:
            return False  # T1: the first write wins; nothing is replaced, merged or raised
        inserted = self._unit.run("insert_event", {
            "id": event.id, "tenant_id": event.tenant_id, "space_id": event.space_id,
            "sequence": int(taken[0]["last"]), "subject_type": event.subject.subject_type,
            "subject_id": event.subject.subject_id, "type": event.type,
            "occurred_at": event.occurred_at or now, "now": now, "payload": canonical_json(event.payload),
            "actor": None if event.actor is None else canonical_json(event.actor)}).rows
        return bool(inserted)

    def append_event_with_outbox(self, event: NewEvent, *, destination: str = DEFAULT_DESTINATION,
                                 headers: dict[str, Any] | None = None) -> bool:
        if not self.append_event(event):
            return False  # T3: no outbox row for an id already stored, however it was first appended
        self._unit.run("insert_event_outbox", {"event_id": event.id, "destination": destination,
                                               "headers": canonical_json(headers or {}), "now": self._unit.now()})
        return True

    def get_event(self, event_id: str) -> EventRecord | None:
        rows = self._unit.run("get_event", {"id": event_id}).rows
        return event_from_row(rows[0]) if rows else None

    def list_events(self, *, tenant_id: str, space_id: str, subject: Subject | None = None, after: int = 0,
                    limit: int = 1000) -> list[EventRecord]:
        if not 1 <= limit <= 10_000:
            raise ValueError("limit must be between 1 and 10000")
        rows = self._unit.run("list_events", {
            "tenant_id": tenant_id, "space_id": space_id, "after": after, "limit": limit,
            "subject_type": None if subject is None else subject.subject_type,
            "subject_id": None if subject is None else subject.subject_id}).rows
        return [event_from_row(r) for r in rows]

    def get_event_outbox(self, event_id: str) -> EventOutboxRecord | None:
        rows = self._unit.run("get_event_outbox", {"event_id": event_id}).rows
        if not rows:
            return None
        r = rows[0]
        return EventOutboxRecord(event_id=r["event_id"], destination=r["destination"], headers=_parsed(r["headers"]),
                                 status=EventOutboxStatus(r["status"]), attempts=int(r["attempts"]),
                                 available_at=r["available_at"], created_at=r["created_at"])


def event_from_row(row: dict[str, Any]) -> EventRecord:
    """An ``EventRecord`` from a row of the ``event_columns`` fragment."""
    return EventRecord(id=row["id"], tenant_id=row["tenant_id"], space_id=row["space_id"],
                       sequence=int(row["sequence"]), subject=Subject(row["subject_type"], row["subject_id"]),
                       type=row["type"], occurred_at=row["occurred_at"], recorded_at=row["recorded_at"],
                       payload=_parsed(row["payload"]), actor=_parsed(row["actor"]))
