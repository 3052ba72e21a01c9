"""``EventsPort`` over SQL: the host's first-write-wins event log and its outbox (``events.sql``; host-spec T).

An append takes the space's next sequence only when the id is not stored yet, then inserts the event; an id
stored by a concurrent append meanwhile inserts nothing (its taken sequence stays a gap). On PostgreSQL the
append inserts the event alone and the sequence is taken as the transaction commits (ADR 0096), so appenders of
one space wait for each other's commit only, not for each other's whole transaction. The outbox row is written
only when this unit's insert happened (T3).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from fencepost.core.canonical import canonical_json, storable_text
from fencepost.core.errors import Conflict, IntegrityViolation, NotFound
from fencepost.core.statuses import EventOutboxStatus
from fencepost.store.host_records import (
    ClaimedEvent,
    EventLease,
    EventOutboxRecord,
    EventOutboxSummary,
    EventRecord,
    EventSpace,
    NewEvent,
    Subject,
    is_probe_space,
)
from fencepost.store.sql.executor import Statements, stored_json

#: The outbox destination of an event appended without one.
DEFAULT_DESTINATION = "host"


def _parsed(raw: Any, event_id: str, column: str = "payload", *, problems: list[str] | None = None) -> Any:
    """A stored JSON object column of an event (``payload``, ``actor``, ``headers``; a NULL actor stays None),
    parsed.

    Raises:
        IntegrityViolation: it cannot be read back as a JSON object (``stored_json``), naming the event and the
            column. With ``problems``, the reason is appended there instead and the column reads as empty
            (``{}``; None for the actor), so that one such row is set aside alone (ADR 0101).
    """
    if raw is None and column == "actor":
        return None
    try:
        value = stored_json(raw, f"{column} of event {event_id}")
        if not isinstance(value, dict):  # the CHECKs require an object: written past them
            raise IntegrityViolation(f"the stored {column} of event {event_id} is not a JSON object")
    except IntegrityViolation as error:
        if problems is None:
            raise
        problems.append(str(error))
        return None if column == "actor" else {}
    return value


class SqlEvents:
    """The ``EventsPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit
        #: This transaction appended, so it may hold events whose sequence is taken only at COMMIT (ADR 0096):
        #: every later read of the log settles them first, so that it sees them with their sequences (and
        #: ``after=`` does not pass them by). Never cleared: a savepoint rolled back after a settle undoes it.
        self._appended = False

    def may_hold_appends(self) -> None:
        """Say that the transaction may already hold appends of earlier units (an application's transaction
        that ``Store.unit_on`` joins): every read of the log settles their sequences first (ADR 0096)."""
        self._appended = True

    def settle(self) -> None:
        """Give the events this transaction appended their sequences now, where the dialect would take them at
        COMMIT (ADR 0096); nothing when it appended none. Every read of ``host_events`` inside an appending
        transaction runs it first: this port's reads do so themselves, the audit calls it."""
        if self._appended:
            self._unit.run("settle_event_sequences", {})

    def append_event(self, event: NewEvent) -> bool:
        return self._append(event, None, None)

    def append_event_with_outbox(self, event: NewEvent, *, destination: str = DEFAULT_DESTINATION,
                                 headers: dict[str, Any] | None = None) -> bool:
        return self._append(event, destination, headers or {})

    def _append(self, event: NewEvent, destination: str | None, headers: dict[str, Any] | None) -> bool:
        """The event's first write, with its outbox row when ``destination`` is given; False (writing nothing)
        when the id is already stored, however it was first appended (T1, T3)."""
        now = self._unit.now()
        values = {"id": event.id, "tenant_id": event.tenant_id, "space_id": event.space_id,
                  "subject_type": event.subject.subject_type, "subject_id": event.subject.subject_id,
                  "type": event.type, "occurred_at": event.occurred_at or now, "now": now,
                  "payload": canonical_json(event.payload),
                  "actor": None if event.actor is None else canonical_json(event.actor)}
        outbox = {"destination": destination or DEFAULT_DESTINATION, "headers": canonical_json(headers or {})}
        fused = self._unit.run("append_event_fused", {**values, **outbox,
                                                      "with_outbox": destination is not None}).rows
        if fused:
            inserted = bool(fused[0]["inserted"])
            self._appended = self._appended or inserted
            return inserted
        self._appended = True  # the dialect's settle is a no-op where the append takes the sequence itself
        taken = self._unit.run("next_event_sequence", {"id": event.id, "tenant_id": event.tenant_id,
                                                       "space_id": event.space_id}).rows
        if not taken:
            return False  # T1: the first write wins; nothing is replaced, merged or raised
        if not self._unit.run("insert_event", {**values, "sequence": int(taken[0]["last"])}).rows:
            return False
        if destination is not None:
            self._unit.run("insert_event_outbox", {"event_id": event.id, **outbox, "now": now})
        return True

    def get_event(self, event_id: str) -> EventRecord | None:
        self.settle()
        rows = self._unit.run("get_event", {"id": event_id}).rows
        return event_from_row(rows[0]) if rows else None

    def list_events(self, *, tenant_id: str, space_id: str, subject: Subject | None = None, after: int = 0,
                    limit: int = 1000) -> list[EventRecord]:
        if not 1 <= limit <= 10_000:
            raise ValueError("limit must be between 1 and 10000")
        self.settle()
        rows = self._unit.run("list_events", {
            "tenant_id": tenant_id, "space_id": space_id, "after": after, "limit": limit,
            "subject_type": None if subject is None else subject.subject_type,
            "subject_id": None if subject is None else subject.subject_id}).rows
        return [event_from_row(r) for r in rows]

    def list_event_spaces(self, *, limit: int = 1000, after: tuple[str, str] | None = None) -> list[EventSpace]:
        if not 1 <= limit <= 10_000:
            raise ValueError("limit must be between 1 and 10000")
        self.settle()
        after_tenant, after_space = after if after is not None else (None, None)
        rows = self._unit.run("list_event_spaces", {"limit": limit, "after_tenant": after_tenant,
                                                    "after_space": after_space}).rows
        return [EventSpace(r["tenant_id"], r["space_id"], int(r["last"])) for r in rows]

    def get_event_outbox(self, event_id: str) -> EventOutboxRecord | None:
        self.settle()
        rows = self._unit.run("get_event_outbox_row", {"event_id": event_id}).rows
        return outbox_from_row(rows[0]) if rows else None

    # ── the relay (ADR 0038) ──
    def claim_event_outbox(self, *, owner: str, limit: int, lease_seconds: float) -> list[ClaimedEvent]:
        if not 1 <= len(owner) <= 200:
            raise ValueError("owner must be 1..200 characters")
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        if not 0.01 <= lease_seconds <= 3600:
            raise ValueError("lease_seconds must be between 0.01 and 3600")
        self.settle()
        now = self._unit.now()
        rows = self._unit.run("claim_event_outbox", {
            "owner": owner, "limit": limit, "now": now, "lease_until": now + timedelta(seconds=lease_seconds)}).rows
        if not rows:
            return []
        found = {r["event_id"]: r for r in self._unit.run("get_claimed_events", {
            "expected": canonical_json([r["event_id"] for r in rows])}).rows}
        claimed: list[ClaimedEvent] = []
        for r in rows:
            lease = EventLease(event_id=r["event_id"], owner=r["lease_owner"], token=r["lease_token"],
                               until=r["lease_until"], attempts=int(r["attempts"]))
            joined = found.get(lease.event_id)
            if joined is None:  # the foreign key forbids it; say so rather than skip silently
                raise IntegrityViolation(f"claimed publication row {lease.event_id} has no event")
            # Each row is read on its own: one whose JSON cannot be read back is handed out as unreadable, for
            # the relay to set aside, instead of failing the claim, which stopped every relay at it (ADR 0101).
            problems: list[str] = []
            event = event_from_row(joined, problems=problems)
            outbox = outbox_from_row({**joined, "type": event.type}, problems=problems)
            claimed.append(ClaimedEvent(lease=lease, event=event, outbox=outbox,
                                        unreadable="; ".join(problems) if problems else None))
        # the statement's RETURNING order is unspecified: hand rows out oldest availability first
        claimed.sort(key=lambda c: (c.outbox.available_at, c.lease.event_id))
        return claimed

    def _fenced(self, name: str, lease: EventLease, **params: Any) -> bool:
        params.update(event_id=lease.event_id, token=lease.token, now=self._unit.now())
        return bool(self._unit.run(name, params).rows)

    def renew_event_lease(self, lease: EventLease, *, lease_seconds: float) -> EventLease | None:
        if not 0.01 <= lease_seconds <= 3600:
            raise ValueError("lease_seconds must be between 0.01 and 3600")
        now = self._unit.now()
        rows = self._unit.run("renew_event_lease", {
            "event_id": lease.event_id, "token": lease.token, "now": now,
            "lease_until": now + timedelta(seconds=lease_seconds)}).rows
        return replace(lease, until=rows[0]["lease_until"]) if rows else None

    def mark_event_published(self, lease: EventLease) -> bool:
        return self._fenced("publish_event_outbox", lease)

    def mark_event_failed(self, lease: EventLease, *, error: str, retry_in_seconds: float) -> bool:
        if retry_in_seconds < 0:
            raise ValueError("retry_in_seconds must be >= 0")
        available_at = self._unit.now() + timedelta(seconds=retry_in_seconds)
        return self._fenced("fail_event_outbox", lease, error=_bounded(error), available_at=available_at)

    def dead_letter_event(self, lease: EventLease, *, error: str) -> bool:
        return self._fenced("dead_letter_event_outbox", lease, error=_bounded(error))

    def release_event(self, lease: EventLease) -> bool:
        return self._fenced("release_event_outbox", lease)

    def requeue_event(self, event_id: str) -> EventOutboxRecord:
        done = self._unit.run("requeue_event_outbox", {"event_id": event_id, "now": self._unit.now()}).rows
        row = self.get_event_outbox(event_id)
        if row is None:
            raise NotFound(f"event {event_id} has no publication row")
        if done:
            return row
        if row.space_id is not None and is_probe_space(row.space_id):
            raise Conflict(f"event {event_id} is in probe space {row.space_id}: probe events are never "
                             "published, so they are never requeued (host-spec U30)")
        raise Conflict(f"event {event_id} is {row.status}, not dead_lettered: only a dead letter is requeued")

    def list_event_outbox(self, *, status: EventOutboxStatus | None = None,
                          limit: int = 100) -> list[EventOutboxRecord]:
        if not 1 <= limit <= 10_000:
            raise ValueError("limit must be between 1 and 10000")
        rows = self._unit.run("list_event_outbox", {"status": None if status is None else str(status),
                                                    "limit": limit}).rows
        return [outbox_from_row(r) for r in rows]

    def summarize_event_outbox(self) -> EventOutboxSummary:
        now = self._unit.now()
        rows = self._unit.run("summarize_event_outbox", {}).rows
        return EventOutboxSummary(now=now, counts={r["status"]: int(r["n"]) for r in rows},
                                  oldest={r["status"]: r["oldest"] for r in rows if r["oldest"] is not None})


#: A sink's error text is kept this long at most: enough to diagnose, never a whole response body.
MAX_ERROR_CHARS = 2000


def _bounded(error: str) -> str:
    """``error`` as every backend stores it (``storable_text``: a NUL or a lone surrogate escaped; a sink's
    message or a stored key quoted in a reason may hold one, and PostgreSQL refused the mark), and bounded."""
    error = storable_text(error)
    return error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…"


def outbox_from_row(r: dict[str, Any], *, problems: list[str] | None = None) -> EventOutboxRecord:
    """An ``EventOutboxRecord`` from a row of the ``event_outbox_columns`` fragment.

    Headers that cannot be read back never fail the read: they read as empty, with the reason in the record's
    ``unreadable`` (and appended to ``problems`` when given), so that an operator's listing shows the row and
    the relay sets it aside (ADR 0101).
    """
    found: list[str] = []
    headers = _parsed(r["headers"], r["event_id"], "headers", problems=found)
    if problems is not None:
        problems.extend(found)
    return EventOutboxRecord(event_id=r["event_id"], destination=r["destination"], headers=headers,
                             status=EventOutboxStatus(r["status"]), attempts=int(r["attempts"]),
                             available_at=r["available_at"], created_at=r["created_at"],
                             lease_owner=r["lease_owner"], lease_until=r["lease_until"],
                             published_at=r["published_at"], last_error=r["last_error"],
                             updated_at=r["updated_at"], tenant_id=r["tenant_id"], space_id=r["space_id"],
                             event_type=r["type"], unreadable=found[0] if found else None)


def event_from_row(row: dict[str, Any], *, problems: list[str] | None = None) -> EventRecord:
    """An ``EventRecord`` from a row of the ``event_columns`` fragment.

    Raises:
        IntegrityViolation: its payload or actor cannot be read back, naming the event and the column (ADR
            0100). With ``problems``, the reasons are appended there and those values read as empty instead.
    """
    return EventRecord(id=row["id"], tenant_id=row["tenant_id"], space_id=row["space_id"],
                       sequence=int(row["sequence"]), subject=Subject(row["subject_type"], row["subject_id"]),
                       type=row["type"], occurred_at=row["occurred_at"], recorded_at=row["recorded_at"],
                       payload=_parsed(row["payload"], row["id"], problems=problems),
                       actor=_parsed(row["actor"], row["id"], "actor", problems=problems))
