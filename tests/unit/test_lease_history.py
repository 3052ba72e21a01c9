"""A command's heartbeat history folded into one entry per delivery, with how each ended (ADR 0021)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fencepost.core.statuses import LeaseEventKind as E
from fencepost.outbox.history import lease_history
from fencepost.store.records import LeaseEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _events(*rows: tuple[E, str | None, int, int, int | None]) -> list[LeaseEvent]:
    """``(event, owner, delivery, at seconds, lease_until seconds)`` rows as LeaseEvents, in order."""
    return [LeaseEvent(seq=i, command_id="cmd_1", event=event, owner=owner, delivery=delivery,
                       at=T0 + timedelta(seconds=at),
                       lease_until=None if until is None else T0 + timedelta(seconds=until))
            for i, (event, owner, delivery, at, until) in enumerate(rows, start=1)]


def test_each_delivery_says_who_held_it_and_how_it_ended() -> None:
    history = lease_history(_events(
        (E.CLAIM, "w1", 1, 0, 30), (E.HEARTBEAT, "w1", 1, 10, 40), (E.HEARTBEAT, "w1", 1, 20, 50),
        (E.TAKEOVER, "w2", 2, 60, 90),                      # w1 died: its lease ran out at 50
        (E.RECONCILE, None, 2, 100, None),                  # w2 died too; an operator reconciled
        (E.TAKEOVER, "w3", 3, 101, 131), (E.RELEASE, "w3", 3, 105, None),  # a stop gave it back
        (E.TAKEOVER, "w4", 4, 106, 136)))
    assert [(h["delivery"], h["owner"], h["claim"], h["ended"]) for h in history] == [
        (1, "w1", "claim", "expired"), (2, "w2", "takeover", "reconciled"), (3, "w3", "takeover", "released"),
        (4, "w4", "takeover", "running")]
    first = history[0]
    assert first["claimed_at"] == "2026-01-01T00:00:00Z"
    assert first["heartbeats"] == 2 and first["last_heartbeat_at"] == "2026-01-01T00:00:20Z"
    assert first["lease_until"] == first["ended_at"] == "2026-01-01T00:00:50Z"
    assert history[1]["ended_at"] == "2026-01-01T00:01:40Z" and history[1]["heartbeats"] == 0
    assert history[3]["ended_at"] is None and history[3]["lease_until"] == "2026-01-01T00:02:16Z"


def test_terminal_events_end_a_delivery_and_an_abort_before_any_claim_is_no_delivery() -> None:
    assert lease_history(_events((E.ABORT, None, 0, 0, None))) == []
    ended = lease_history(_events((E.CLAIM, "w1", 1, 0, 30), (E.FAIL, "w1", 1, 5, None)))
    assert [(h["ended"], h["ended_at"]) for h in ended] == [("failed", "2026-01-01T00:00:05Z")]
    delivered = lease_history(_events((E.CLAIM, "w1", 1, 0, 30), (E.DELIVER, "w1", 1, 5, None)))
    assert delivered[0]["ended"] == "delivered"
    aborted = lease_history(_events((E.CLAIM, "w1", 1, 0, 30), (E.ABORT, None, 1, 5, None)))
    assert aborted[0]["ended"] == "aborted"
