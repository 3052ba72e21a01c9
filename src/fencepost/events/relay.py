"""The event relay (issue 15, ADR 0038; host-spec T8, T9, §1.Y-20): publication rows leave the store through a
``Publisher``, under the outbox lease protocol.

One relay loop: claim a batch of due rows (fresh fenced leases), publish each, then mark it ``published`` under
its token; a failure makes it ``retry_pending`` after an exponential backoff with jitter, and the attempt that
spends the budget (``max_attempts``, default 10) dead-letters it with its last error. A sink that cannot be
connected to (``PublishFailed.sink_unavailable``) spends no attempt: the batch goes back as it was and the relay
waits, with its own backoff, before claiming again, so an outage of the sink no longer dead-letters the backlog
(ADR 0109). Any number of relays may run against one store: a claim never hands one row to two of them, and a
relay whose lease was taken over writes nothing (the marks are fenced by the token). A row whose stored JSON
cannot be read back, or whose envelope has no canonical JSON, is dead-lettered at once without being published,
and the relay goes on (ADR 0101).

Delivery is **at least once**. A relay killed between the sink's acceptance and the mark publishes that event
again after its lease expires, so every delivery carries the event id (``Fencepost-Event-Id`` on a webhook,
``message_id`` on AMQP) and a receiver keeps the ids it has processed (docs/events.md shows how). What is
exactly once is the store's record: each row is marked ``published`` once.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from fencepost.core.canonical import canonical_json, storable_text
from fencepost.core.clock import to_iso
from fencepost.store.base import Store
from fencepost.store.host_records import ClaimedEvent, EventLease, EventOutboxRecord, EventRecord
from fencepost.store.ports import UnitOfWork

log = logging.getLogger("fencepost.events.relay")

DEFAULT_MAX_ATTEMPTS = 10


class PublishFailed(Exception):
    """A sink refused or could not take an event; the message becomes the row's ``last_error``.

    Args:
        message: what happened (stored as the row's ``last_error``).
        sink_unavailable: nothing reached the sink: it could not be connected to (refused, unresolvable, no
            answer to the connect; a broker connection or channel that cannot be opened), so no event would get
            through now, this one included. The relay then gives this row and the rest of its batch back with
            their attempts and waits before it claims again (ADR 0109). An answer the sink gave (any status, a
            nack, an unroutable return) is the event's refusal.
    """

    def __init__(self, message: str, *, sink_unavailable: bool = False) -> None:
        super().__init__(message)
        self.sink_unavailable = sink_unavailable


class Publisher(Protocol):
    """Where a relay sends events. ``publish`` returns only once the sink has *accepted* the event (a 2xx answer,
    a broker confirm, the callable returned) and raises on anything else; the relay then marks the row.

    Delivery is at least once: the same event may be published again (a relay killed after the sink accepted
    but before the mark, a lease that expired during a slow publish), always with the same event id, which a
    receiver uses to drop repeats. ``publish`` must finish well within the relay's lease (its own timeout).
    """

    def publish(self, event: EventRecord, outbox: EventOutboxRecord) -> None:
        """Deliver ``event`` (its publication row ``outbox`` gives destination and headers).

        Raises:
            Exception: any error means not delivered; its text is kept as the row's ``last_error``.
        """
        ...


def envelope(event: EventRecord, outbox: EventOutboxRecord) -> dict[str, object]:
    """The JSON envelope every sink sends (host-spec T7): the event as stored plus its outbox metadata.

    Returns:
        ``{"id", "tenant_id", "space_id", "subject": {"subject_type", "subject_id"}, "type", "sequence",
        "occurred_at", "recorded_at", "payload", "actor", "destination", "headers"}`` (instants as ISO-8601 UTC).
    """
    return {"id": event.id, "tenant_id": event.tenant_id, "space_id": event.space_id,
            "subject": {"subject_type": event.subject.subject_type, "subject_id": event.subject.subject_id},
            "type": event.type, "sequence": event.sequence, "occurred_at": to_iso(event.occurred_at),
            "recorded_at": to_iso(event.recorded_at), "payload": event.payload, "actor": event.actor,
            "destination": outbox.destination, "headers": outbox.headers}


def envelope_bytes(event: EventRecord, outbox: EventOutboxRecord) -> bytes:
    """``envelope`` as canonical JSON bytes: the exact body a webhook signs and a broker carries."""
    return canonical_json(envelope(event, outbox)).encode()


def unpublishable(item: ClaimedEvent) -> str | None:
    """Why no sink can be given ``item``, or None when it can be published.

    A row written past the events port: its stored JSON cannot be read back (``ClaimedEvent.unreadable``), or it
    reads as values the envelope cannot carry as canonical JSON (nesting past ``MAX_DEPTH`` inside the envelope,
    a lone surrogate), which every webhook and AMQP publish would refuse until the budget was spent (ADR 0101).
    """
    if item.unreadable is not None:
        return item.unreadable
    try:
        canonical_json(envelope(item.event, item.outbox))
    except TypeError as error:
        return f"event {item.event.id} has no envelope a sink can send: {str(error)[:300]}"
    return None


def default_relay_id() -> str:
    """``relay-<host>-<pid>``: the lease owner a relay shows in ``fencepost events list``."""
    return f"relay-{socket.gethostname()}-{os.getpid()}"[:200]


@dataclass(frozen=True)
class RelayConfig:
    """How a relay claims and retries.

    Attributes:
        owner: the lease owner name. batch_size: rows per claim (1..1000). lease_seconds: each claim's lease;
        renewed while a batch is being published, so a row is never re-claimed while its relay is alive.
        max_attempts: the attempt that reaches it dead-letters the row on failure. backoff_base_seconds,
        backoff_max_seconds: the retry delay before attempt n+1 is ``min(max, base * 2**(n-1))``, then jittered
        to between half and all of it (so that failing rows of many relays do not retry in step).
        idle_seconds: the wait when nothing was due.
    """

    owner: str = field(default_factory=default_relay_id)
    batch_size: int = 50
    lease_seconds: float = 60.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 300.0
    idle_seconds: float = 0.5

    def validate(self) -> None:
        """Raises ValueError naming the first field out of range."""
        if not 1 <= self.batch_size <= 1000:
            raise ValueError("batch_size must be between 1 and 1000")
        if not 0.05 <= self.lease_seconds <= 3600:
            raise ValueError("lease_seconds must be between 0.05 and 3600")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.backoff_base_seconds < 0 or self.backoff_max_seconds < self.backoff_base_seconds:
            raise ValueError("backoff: 0 <= base <= max")
        if self.idle_seconds < 0:
            raise ValueError("idle_seconds must be >= 0")


def backoff_seconds(attempts: int, config: RelayConfig, rng: random.Random) -> float:
    """The delay before the next attempt after ``attempts`` failed ones: exponential, capped, equal jitter."""
    ceiling = min(config.backoff_max_seconds, config.backoff_base_seconds * 2.0 ** max(0, attempts - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass
class RelayStats:
    """Counts since the relay started (for logs, tests and the CLI's stop line)."""

    claimed: int = 0
    published: int = 0
    failed: int = 0
    dead_lettered: int = 0
    lost: int = 0
    released: int = 0
    #: Publishes that could not reach the sink (each paused the relay, ADR 0109).
    unavailable: int = 0
    #: Rows given back unattempted because the sink could not be reached (not counted in ``released``).
    deferred: int = 0


class Relay:
    """Publishes due events of ``store`` through ``publisher`` (module docstring).

    Args:
        store: an open store. publisher: the sink. config: claim and retry settings.
        rng: the jitter's random source (a seeded one in tests).
    """

    def __init__(self, store: Store, publisher: Publisher, config: RelayConfig | None = None,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.publisher = publisher
        self.config = config or RelayConfig()
        self.config.validate()
        self.stats = RelayStats()
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._outage = 0  # consecutive publishes that could not reach the sink (ADR 0109)
        self._pause = 0.0  # seconds to wait before the next claim: the outage's backoff

    def stop(self) -> None:
        """Ask the loop to stop after the event being published now (from any thread; not from a signal handler
        on the thread running the loop, which may hold the event's lock: ``fencepost.cli.signals``)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, until: Callable[[], bool] | None = None) -> RelayStats:
        """Run until ``stop()`` (or ``until()`` is true between batches); release unpublished claims on stop.

        Returns:
            The counts of this run.
        """
        while not self._stop.is_set() and not (until is not None and until()):
            if self.run_once() == 0:
                self._stop.wait(self.config.idle_seconds)
            pause, self._pause = self._pause, 0.0
            if pause:
                self._stop.wait(pause)  # the sink cannot be reached: claim nothing until its backoff passed
        return self.stats

    def run_once(self) -> int:
        """Claim one batch and handle each row; returns how many rows were claimed (0: nothing was due)."""
        cfg = self.config
        claimed = self.store.transact(lambda tx: tx.events.claim_event_outbox(
            owner=cfg.owner, limit=cfg.batch_size, lease_seconds=cfg.lease_seconds))
        self.stats.claimed += len(claimed)
        leases: dict[str, EventLease] = {c.lease.event_id: c.lease for c in claimed}
        renewed_at = time.monotonic()
        for index, item in enumerate(claimed):
            if self._stop.is_set():
                self._release([leases[c.lease.event_id] for c in claimed[index:] if c.lease.event_id in leases])
                break
            # Heartbeat: once a third of the lease has passed, extend every lease still held, so that a long
            # batch is never taken over by another relay while this one is alive.
            if time.monotonic() - renewed_at >= cfg.lease_seconds / 3:
                self._renew(leases, [c.lease.event_id for c in claimed[index:]])
                renewed_at = time.monotonic()
            lease = leases.get(item.lease.event_id)
            if lease is None:
                self.stats.lost += 1
                continue  # its renewal failed: someone else holds it now
            if self._handle(item, lease):  # the sink could not be reached: the batch goes back as it was
                self._release([leases[c.lease.event_id] for c in claimed[index:] if c.lease.event_id in leases],
                              deferred=True)
                break
        return len(claimed)

    def _handle(self, item: ClaimedEvent, lease: EventLease) -> bool:
        """Publish one claimed row and mark it. Returns True, marking nothing, when the sink could not be reached:
        the caller gives this row and the rest of its batch back."""
        cfg = self.config
        unsendable = unpublishable(item)
        if unsendable is not None:
            # Set aside alone, at once: no sink could take it and no later attempt could read it either. The
            # dead letter keeps why; repaired by hand, `fencepost events requeue` sends it (ADR 0101).
            self._mark("dead_letter", lease, error=f"not published: {unsendable}; repair the stored row, then "
                                                   f"`fencepost events requeue {lease.event_id}`")
            return False
        if lease.attempts > cfg.max_attempts:
            # Claimed again after its leases kept expiring (relays killed mid-publish): the budget is spent.
            self._mark("dead_letter", lease, error=item.outbox.last_error or
                       f"attempt budget ({cfg.max_attempts}) spent: earlier leases expired mid-publish")
            return False
        try:
            self.publisher.publish(item.event, item.outbox)
        except Exception as error:
            message = f"{type(error).__name__}: {error}" if not isinstance(error, PublishFailed) else str(error)
            if isinstance(error, PublishFailed) and error.sink_unavailable:
                # Nothing reached the sink, for this event or any other: no attempt is spent, the batch waits for
                # the sink rather than for its budgets. A sink that answered (whatever it said) refused this event
                # alone, so such an answer never holds the others back (a trial: 503s for a few events did).
                self._outage += 1
                self.stats.unavailable += 1
                self._pause = backoff_seconds(self._outage, cfg, self._rng)
                log.warning("sink unreachable: the batch was given back with its attempts; next claim in %.2fs: %s",
                            self._pause, message)
                return True
            if lease.attempts >= cfg.max_attempts:
                self._mark("dead_letter", lease, error=message)
            else:
                delay = backoff_seconds(lease.attempts, cfg, self._rng)
                self._mark("failed", lease, error=message, retry_in=delay)
            return False
        if self._outage:
            log.info("sink reachable again after %d failed connection(s)", self._outage)
            self._outage = 0
        self._mark("published", lease)
        return False

    def _mark(self, what: str, lease: EventLease, *, error: str = "", retry_in: float = 0.0) -> None:
        error = storable_text(error)  # as the store keeps it (a NUL, a lone surrogate escaped), and so logged
        if what == "published":
            done = self.store.transact(lambda tx: tx.events.mark_event_published(lease))
        elif what == "failed":
            done = self.store.transact(lambda tx: tx.events.mark_event_failed(lease, error=error,
                                                                               retry_in_seconds=retry_in))
        else:
            done = self.store.transact(lambda tx: tx.events.dead_letter_event(lease, error=error))
        if not done:
            # Fenced out: the lease expired and another relay took the row; it decides now (at-least-once).
            self.stats.lost += 1
            log.warning("event %s: lease lost before marking it %s", lease.event_id, what)
            return
        if what == "published":
            self.stats.published += 1
        elif what == "failed":
            self.stats.failed += 1
            log.info("event %s: attempt %d failed, retry in %.2fs: %s", lease.event_id, lease.attempts,
                     retry_in, error)
        else:
            self.stats.dead_lettered += 1
            log.warning("event %s dead-lettered at attempt %d: %s", lease.event_id, lease.attempts, error)

    def _renew(self, leases: dict[str, EventLease], event_ids: list[str]) -> None:
        seconds = self.config.lease_seconds

        def fn(tx: UnitOfWork) -> dict[str, EventLease | None]:
            return {i: tx.events.renew_event_lease(leases[i], lease_seconds=seconds) for i in event_ids
                    if i in leases}

        for event_id, renewed in self.store.transact(fn).items():
            if renewed is None:
                leases.pop(event_id, None)
            else:
                leases[event_id] = renewed

    def _release(self, leases: list[EventLease], *, deferred: bool = False) -> None:
        """Give ``leases`` back unattempted: on stop (``released``), or when the sink could not be reached
        (``deferred``)."""
        def fn(tx: UnitOfWork) -> int:
            return sum(1 for lease in leases if tx.events.release_event(lease))

        given = self.store.transact(fn)
        if deferred:
            self.stats.deferred += given
        else:
            self.stats.released += given
