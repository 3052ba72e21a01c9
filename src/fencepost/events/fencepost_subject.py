"""A fencepost ``Store`` presented as the event store the conformance checks probe (ADR 0040; host-spec 2.8).

The checks speak a small duck-typed protocol of plain dicts (``fencepost.events.conformance`` documents it),
so that a store that is not fencepost's can be checked too. ``FencepostEventStore`` maps it onto the
``events`` and ``event_leases`` ports of fencepost's units of work: each call is one transaction, and
``transaction()`` is one unit holding several appends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime
from typing import Any

from fencepost.core.statuses import AdapterStatus, CommandStatus, InvocationMode, InvocationStatus
from fencepost.host.lifecycle import STEP_FAILED, VERDICT_EVENTS, invocation_event, step_event
from fencepost.store.base import Store
from fencepost.store.host_records import (
    AdapterRecord,
    AdapterScope,
    AdapterWrite,
    EventRecord,
    InvocationVerdict,
    LeaseHeld,
    NewEvent,
    NewInvocation,
    Subject,
    UpdateAdapterRow,
)
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import Lease


def new_event(envelope: Mapping[str, Any]) -> NewEvent:
    """The ``NewEvent`` of a probe envelope. fencepost assigns ``sequence`` and ``recorded_at`` itself (T7), so
    those envelope fields, and ``metadata``, are not stored; the checks accept that (U18)."""
    return NewEvent(id=envelope["id"], tenant_id=envelope["tenant_id"], space_id=envelope["space_id"],
                    subject=Subject(envelope["subject_type"], envelope["subject_id"]), type=envelope["type"],
                    payload=dict(envelope.get("payload") or {}), occurred_at=envelope.get("occurred_at"),
                    actor=envelope.get("actor"))


def event_dict(record: EventRecord) -> dict[str, Any]:
    """An ``EventRecord`` as the flat dict the checks snapshot."""
    return {"id": record.id, "tenant_id": record.tenant_id, "space_id": record.space_id,
            "sequence": record.sequence, "subject_type": record.subject.subject_type,
            "subject_id": record.subject.subject_id, "type": record.type, "occurred_at": record.occurred_at,
            "recorded_at": record.recorded_at, "payload": record.payload, "actor": record.actor}


def outbox_dict(row: Any) -> dict[str, Any]:
    """An ``EventOutboxRow`` as the dict the checks snapshot: ``id`` is the row id (the event id here)."""
    d = asdict(row)
    d["id"] = d["event_id"]
    d["attempt_count"] = d.pop("attempts")
    d["lease_expires_at"] = d.pop("lease_until")
    return d


class _Tx:
    """The appends of one fencepost unit of work."""

    def __init__(self, tx: UnitOfWork) -> None:
        self._tx = tx

    def append_event(self, envelope: Mapping[str, Any]) -> bool:
        return self._tx.events.append_event(new_event(envelope))

    def append_event_with_outbox(self, envelope: Mapping[str, Any], outbox: Mapping[str, Any]) -> bool:
        return self._tx.events.append_event_with_outbox(
            new_event(envelope), destination=outbox.get("destination") or "host", headers=outbox.get("headers"))


class FencepostEventStore:
    """The conformance checks' event store over a fencepost ``Store`` (every capability: plain, outbox, tx).

    Args:
        store: a migrated fencepost store (SQLite or PostgreSQL, or a wrapper of one).
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def append_event(self, envelope: Mapping[str, Any]) -> bool:
        """One unit: ``EventsPort.append_event`` (T1). Returns False for an id already stored (a no-op)."""
        return self.store.transact(lambda tx: _Tx(tx).append_event(envelope), name="check-store.append")

    def append_event_with_outbox(self, envelope: Mapping[str, Any], outbox: Mapping[str, Any]) -> bool:
        """One unit: the event and, only when stored now, its pending outbox row with ``outbox``'s destination
        and headers (T3)."""
        return self.store.transact(lambda tx: _Tx(tx).append_event_with_outbox(envelope, outbox),
                                   name="check-store.append")

    def list_events(self, tenant_id: str, space_id: str) -> list[dict[str, Any]]:
        """The space's events (up to 10,000) as flat dicts, in sequence order."""
        return self.store.read(lambda tx: [event_dict(e) for e in tx.events.list_events(
            tenant_id=tenant_id, space_id=space_id, limit=10_000)])

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        """One fencepost unit of work holding several appends; commits on normal exit (U4, U5)."""
        with self.store.transaction(name="check-store.tx") as tx:
            yield _Tx(tx)

    def list_outbox(self, tenant_id: str, space_id: str) -> list[dict[str, Any]]:
        """Every outbox row of the space, any status, as dicts (``id`` is the event id)."""
        return self.store.read(lambda tx: [outbox_dict(r) for r in tx.event_leases.list_rows(
            tenant_id=tenant_id, space_id=space_id)])

    def claim_outbox(self, worker: str, limit: int, lease_seconds: float, now: datetime, *, tenant_id: str,
                     space_id: str | None = None) -> list[dict[str, Any]]:
        """Lease due rows of ``tenant_id`` (and ``space_id``) at the caller's ``now`` (U31); the leased rows."""
        return self.store.transact(lambda tx: [outbox_dict(r) for r in tx.event_leases.claim(
            owner=worker, tenant_id=tenant_id, space_id=space_id, limit=limit, lease_seconds=lease_seconds,
            now=now)], name="check-store.claim")

    def mark_outbox_published(self, row_id: str, worker: str, lease_token: str, at: datetime) -> bool:
        """Published under the caller's lease; False, changing nothing, without it."""
        return self.store.transact(lambda tx: tx.event_leases.publish(row_id, owner=worker, token=lease_token,
                                                                       at=at), name="check-store.publish")

    def mark_outbox_failed(self, row_id: str, worker: str, lease_token: str, error: str,
                           available_at: datetime) -> bool:
        """Retry-pending from ``available_at`` under the caller's lease, which is released (U11)."""
        return self.store.transact(lambda tx: tx.event_leases.fail(
            row_id, owner=worker, token=lease_token, error=error, available_at=available_at),
            name="check-store.fail")

    def dead_letter_outbox(self, row_id: str, worker: str, lease_token: str, reason: str) -> bool:
        """Dead-lettered with ``reason`` under the caller's lease (U29)."""
        return self.store.transact(lambda tx: tx.event_leases.dead_letter(
            row_id, owner=worker, token=lease_token, reason=reason, now=tx.now()), name="check-store.dead-letter")


#: The command kind of the isolation probes' parent invocations: a ``host.invoke`` kind (only those may be held
#: at delivery 0, ADR 0022) that no action defines, so that no worker ever claims one.
PROBE_KIND = "host.invoke:event-append-probe.isolation@1"
#: The error a retired probe parent's verdict, and each of its rows, are failed with.
PROBE_VERDICT = "tenant isolation probe; never executed"
PROBE_ERROR = "isolation probe"


class FencepostAdapterRows:
    """The tenant isolation checks' store over a fencepost ``Store`` (``fencepost.events.isolation``).

    Args:
        store: a migrated fencepost store.

    ``retire()`` fails every probe parent this object created, as the host fails an invocation (its rows
    failed, its verdict and their events written, its command finished, under its lease), so that no probe
    stays ``running`` and ``fencepost audit`` finds every probe's history sound (ADR 0112).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.parents: list[tuple[str, Lease]] = []

    def create_probe_parent(self, scope: AdapterScope) -> Lease:
        """A ``running`` inline invocation in ``scope`` and its leased command (300 s); the lease.

        Raises:
            ValueError: the invocation id exists already.
        """
        def fn(tx: UnitOfWork) -> Lease:
            lease = tx.outbox.insert_leased(command_id=scope.invocation_id, kind=PROBE_KIND, payload={},
                                            owner="event-append-probe", lease_seconds=300)
            inserted = tx.host.insert_invocation(NewInvocation(
                id=scope.invocation_id, tenant_id=scope.tenant_id, space_id=scope.space_id,
                action_id="event-append-probe.isolation", action_version=1, idempotency_key=scope.invocation_id,
                actor="fencepost:check-store", authority="fencepost:check-store",
                binding_digest="bd1:" + "0" * 64, params_digest="cp1:" + "0" * 64, params={},
                mode=InvocationMode.INLINE, status=InvocationStatus.RUNNING))
            if not inserted:
                raise ValueError(f"probe invocation {scope.invocation_id} already exists")
            return lease

        lease = self.store.transact(fn, name="check-store.isolation-parent")
        self.parents.append((scope.invocation_id, lease))
        return lease

    def write_adapter_invocation(self, write: AdapterWrite) -> bool:
        """``HostPort.write_adapter_invocation`` in its own unit (host-spec I1, V4)."""
        return self.store.transact(lambda tx: tx.host.write_adapter_invocation(write), name="check-store.write")

    def get_adapter_invocation(self, adapter_invocation_id: str, scope: AdapterScope) -> AdapterRecord | None:
        """The row only in ``scope``, else None (host-spec V2)."""
        return self.store.read(lambda tx: tx.host.get_adapter_invocation_in_scope(adapter_invocation_id, scope))

    def retire(self) -> None:
        """Fail every probe parent created so far as the host fails an invocation, under its lease: each
        adapter row still running is failed, each of its rows gets its ``AdapterInvocationFailed`` event, the
        parent its ``failed`` verdict with the ``ActionInvocationFailed`` event, and its command is finished
        FAILED, all in one transaction (ADR 0112). ``fencepost audit`` then finds nothing to report."""
        for invocation_id, lease in self.parents:
            def fn(tx: UnitOfWork, invocation_id: str = invocation_id, lease: Lease = lease) -> None:
                invocation = tx.host.get_invocation(invocation_id)
                if invocation is None:  # created by this object, so only a store that lost it gets here
                    raise ValueError(f"probe invocation {invocation_id} is missing")
                scope = AdapterScope(invocation.tenant_id, invocation.space_id, invocation.id)
                for row in tx.host.list_adapter_invocations(invocation_id):
                    # A row left running under a failed verdict is an evidence gap (host-spec K8): the read
                    # check never settles its row, and a check stopped midway may leave any row running.
                    if row.status is AdapterStatus.RUNNING:
                        tx.host.write_adapter_invocation(AdapterWrite(scope, UpdateAdapterRow(
                            row.id, AdapterStatus.FAILED, error=PROBE_ERROR), LeaseHeld(lease)))
                    # append_event, not with_outbox: probe spaces are never published (host-spec U30), so a
                    # publication row would only sit pending. The event ids are stable: a retry appends none.
                    tx.events.append_event(step_event(invocation, row.id, STEP_FAILED,
                                                      {"step": row.step_name, "reason": PROBE_ERROR}))
                tx.host.update_leased_invocation(invocation_id, lease, InvocationVerdict(
                    InvocationStatus.FAILED, error=PROBE_VERDICT))
                # The verdict's event, in the verdict's transaction, as every host verdict has (audit's
                # invocation_verdict_event).
                tx.events.append_event(invocation_event(invocation, VERDICT_EVENTS[InvocationStatus.FAILED],
                                                        {"error": PROBE_VERDICT}))
                tx.outbox.finish(lease, CommandStatus.FAILED, "tenant isolation probe")
            self.store.transact(fn, name="check-store.isolation-retire")
        self.parents.clear()
