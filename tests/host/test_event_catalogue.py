"""The lifecycle event catalogue's ids (host-spec S4, E1): every event id is a pure function of the invocation,
the event type and its part (the adapter invocation id for step events), so the same submission in another
database yields the same ids, and a recovery re-appends under them (first write wins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fencepost.core.statuses import InvocationStatus
from fencepost.host import Ambiguous, Inline
from fencepost.host.lifecycle import STARTED, STEP_AMBIGUOUS, STEP_SUCCEEDED, VERDICT_EVENTS, event_id
from helpers.store_backends import StoreBackend, store_backend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, events_of, make_host


def run_once(backend: StoreBackend) -> tuple[str, list[tuple[str, str, str]]]:
    """Two steps, the second with an unknown outcome, in a fresh database: (invocation id, [(type, subject,
    id)])."""
    store = backend.migrated()
    host = make_host(store, charge_action(Spy(), steps=("reserve", "charge")),
                     Scripted(Ledger(), None, Ambiguous("read timed out")))
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    return view.id, [(e.type, e.subject.subject_id, e.id) for e in events_of(store, view.id)]


def test_event_catalogue_ids_deterministic(backend: StoreBackend, tmp_path: Path) -> None:
    """S4: each stored event's id is ``event_id(invocation, type, part)`` recomputed from nothing but those; the
    same submission in a second database gives another invocation id (ADR 0108: its provider keys are its
    database's own) whose events are derived from it the same way; distinct parts and types never collide."""
    invocation_id, events = run_once(backend)
    assert [e[0] for e in events] == [STARTED, STEP_SUCCEEDED, STEP_AMBIGUOUS,
                                      VERDICT_EVENTS[InvocationStatus.RECONCILIATION_REQUIRED]]
    for event_type, subject, stored_id in events:
        part: Any = None if subject == invocation_id else subject
        assert stored_id == event_id(invocation_id, event_type, part)
    second = tmp_path / "second"
    second.mkdir()
    with store_backend(backend.name, second) as other:  # a second, empty database of the same backend
        other_id, other_events = run_once(other)
    assert other_id != invocation_id
    assert [(t, other_id if subject == invocation_id else None) for t, subject, _ in events] == \
        [(t, other_id if subject == other_id else None) for t, subject, _ in other_events]
    for event_type, subject, stored_id in other_events:
        assert stored_id == event_id(other_id, event_type, None if subject == other_id else subject)
    ids = {event_id(invocation_id, t, p) for t in (STARTED, STEP_SUCCEEDED) for p in (None, "a", "b", 0)}
    assert len(ids) == 8 and event_id(invocation_id, STARTED) == event_id(invocation_id, STARTED, None)
    assert event_id(invocation_id, STARTED) != event_id("inv_other", STARTED)

