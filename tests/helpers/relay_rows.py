"""Publication rows in every relay state, made only through the store's real ports (``EventsPort``) as the
host and ``fencepost relay`` make them: append with the outbox, claim under a lease, then mark."""

from __future__ import annotations

from fencepost.store.base import Store
from fencepost.store.host_records import EventLease, NewEvent, Subject


def append_event(store: Store, event_id: str, *, event_type: str = "StateTransitioned", space: str = "shop",
                 tenant: str = "acme") -> None:
    """Append one event with its ``pending`` publication row (fails the test when the id already exists)."""
    stored = store.transact(lambda tx: tx.events.append_event_with_outbox(NewEvent(
        id=event_id, tenant_id=tenant, space_id=space, subject=Subject("ActionInvocation", event_id),
        type=event_type, payload={"id": event_id})))
    assert stored, f"{event_id} was already stored"


def claim_all(store: Store, *, owner: str = "relay-test", lease_seconds: float = 600.0) -> dict[str, EventLease]:
    """Claim every due row as a relay would; event id -> its lease."""
    claimed = store.transact(lambda tx: tx.events.claim_event_outbox(owner=owner, limit=1000,
                                                                     lease_seconds=lease_seconds))
    return {c.lease.event_id: c.lease for c in claimed}


def publish(store: Store, lease: EventLease) -> None:
    assert store.transact(lambda tx: tx.events.mark_event_published(lease))


def fail(store: Store, lease: EventLease, error: str, *, retry_in_seconds: float = 30.0) -> None:
    assert store.transact(lambda tx: tx.events.mark_event_failed(lease, error=error,
                                                                 retry_in_seconds=retry_in_seconds))


def dead_letter(store: Store, lease: EventLease, error: str) -> None:
    assert store.transact(lambda tx: tx.events.dead_letter_event(lease, error=error))


def one_dead_letter(store: Store, event_id: str, error: str, *, event_type: str = "StateTransitioned") -> None:
    """Append ``event_id`` and dead-letter it at once (its only due row must be this one)."""
    append_event(store, event_id, event_type=event_type)
    leases = claim_all(store)
    assert list(leases) == [event_id], leases
    dead_letter(store, leases[event_id], error)
