"""A command's lease history, one entry per delivery: what an operator needs to judge a budget verdict.

The heartbeat history (``lease_events``) has a row per lease transition (seed: "Heartbeat And Takeover",
the recovery signal). ``lease_history`` folds it into deliveries, so the budget verdict of issue 10 can say
who held each delivery, since when, and how it ended without a verdict (ADR 0021).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fencepost.core.statuses import LeaseEventKind
from fencepost.store.records import LeaseEvent

#: How a delivery ended, by the event that ended it; a delivery followed by a new claim and none of these
#: "expired": its lease ran out with no verdict (the worker died, hung or lost the store).
_ENDINGS = {LeaseEventKind.RELEASE: "released", LeaseEventKind.RECONCILE: "reconciled",
            LeaseEventKind.DELIVER: "delivered", LeaseEventKind.FAIL: "failed", LeaseEventKind.ABORT: "aborted"}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def lease_history(events: list[LeaseEvent]) -> list[dict[str, Any]]:
    """Fold heartbeat history (oldest first) into one plain-JSON entry per delivery, oldest first.

    Args:
        events: ``OutboxPort.lease_events`` of one command.
    Returns:
        Per delivery: ``delivery`` (its number), ``owner`` (the worker that claimed it), ``claimed_at`` and
        ``claim`` (``claim`` or ``takeover``), ``heartbeats`` (renewals) and ``last_heartbeat_at``,
        ``lease_until`` (the last deadline it held, UTC), and ``ended``: ``expired`` (the next delivery was
        claimed after its lease ran out, with no verdict), ``released`` (a stop gave it back), ``reconciled``
        (expired, then an operator returned it to PENDING), ``delivered``, ``failed``, ``aborted``, or
        ``running`` (nothing has ended it yet), and ``ended_at`` (for ``expired`` its last deadline; None
        while running). Instants are the store's clock, ISO 8601 UTC.
    """
    deliveries: list[dict[str, Any]] = []
    by_number: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.event in (LeaseEventKind.CLAIM, LeaseEventKind.TAKEOVER):
            for earlier in deliveries:
                if earlier["ended"] == "running":
                    # Claimed again while it had no end: its lease ran out, at its last deadline.
                    earlier["ended"], earlier["ended_at"] = "expired", earlier["lease_until"]
            entry = {"delivery": event.delivery, "owner": event.owner, "claim": str(event.event),
                     "claimed_at": _iso(event.at), "heartbeats": 0, "last_heartbeat_at": None,
                     "lease_until": _iso(event.lease_until), "ended": "running", "ended_at": None}
            deliveries.append(entry)
            by_number[event.delivery] = entry
            continue
        found = by_number.get(event.delivery)
        if found is None:
            continue  # e.g. an abort of a command never claimed: no delivery to describe
        if event.event is LeaseEventKind.HEARTBEAT:
            found["heartbeats"] += 1
            found["last_heartbeat_at"] = _iso(event.at)
            found["lease_until"] = _iso(event.lease_until)
        elif event.event in _ENDINGS and found["ended"] == "running":
            found["ended"] = _ENDINGS[event.event]
            found["ended_at"] = _iso(event.at)
    return deliveries
