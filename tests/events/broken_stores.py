"""Deliberately broken event stores (host-spec U7, U33, V5): each wraps a real fencepost store and breaks one
rule, so that the conformance checks can be shown to catch it. The violations are real writes to the real
database (raw SQL), not a simulation in memory, except where a real schema forbids the violation itself
(two events under one primary key): there the store keeps the second copy beside the table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.events.fencepost_subject import FencepostEventStore, _Tx
from fencepost.store.base import Store


def raw(store: Store, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Ad-hoc SQL with ``?`` placeholders on either dialect (``%s`` on PostgreSQL)."""
    def run(tx: Any) -> list[tuple[Any, ...]]:
        text = sql if tx.backend == "sqlite" else sql.replace("?", "%s")
        return list(tx.execute_raw(text, tuple(params)))
    return store.transact(run)


def _exists(store: Store, event_id: str) -> bool:
    return bool(raw(store, "SELECT 1 FROM host_events WHERE id = ?", event_id))


def _stamp(value: datetime) -> Any:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Broken(FencepostEventStore):
    """The base of the family: a correct store until a subclass overrides one method."""

    violation = "none"

    def _when(self, value: datetime) -> Any:
        return _stamp(value) if self.store.backend == "sqlite" else value


class ThrowingOnDuplicate(Broken):
    violation = "throwing on a duplicate"

    def append_event(self, envelope: Mapping[str, Any]) -> bool:
        if _exists(self.store, envelope["id"]):
            raise ValueError(f"duplicate event id {envelope['id']}")
        return super().append_event(envelope)


def _replace(broken: Broken, envelope: Mapping[str, Any]) -> None:
    raw(broken.store, "UPDATE host_events SET subject_type = ?, subject_id = ?, type = ?, occurred_at = ?, "
        "payload = ?, actor = ? WHERE id = ?", envelope["subject_type"], envelope["subject_id"],
        envelope["type"], broken._when(envelope["occurred_at"]), canonical_json(envelope["payload"]),
        canonical_json(envelope.get("actor")), envelope["id"])


class Replacing(Broken):
    violation = "replacing the first event"

    def append_event(self, envelope: Mapping[str, Any]) -> bool:
        if _exists(self.store, envelope["id"]):
            _replace(self, envelope)
            return True
        return super().append_event(envelope)


class Merging(Broken):
    violation = "merging the duplicate into the first event"

    def append_event(self, envelope: Mapping[str, Any]) -> bool:
        if _exists(self.store, envelope["id"]):
            raw(self.store, "UPDATE host_events SET actor = ? WHERE id = ?", canonical_json(envelope.get("actor")),
                envelope["id"])
            return True
        return super().append_event(envelope)


class KeepingBoth(Broken):
    """Keeps every duplicate beside the first: the schema's primary key refuses a second row, so the copies
    are held by the wrapper and listed with the stored events."""

    violation = "keeping both events"

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.copies: list[dict[str, Any]] = []

    def append_event(self, envelope: Mapping[str, Any]) -> bool:
        if _exists(self.store, envelope["id"]):
            self.copies.append(dict(envelope))
            return True
        return super().append_event(envelope)

    def list_events(self, tenant_id: str, space_id: str) -> list[dict[str, Any]]:
        return super().list_events(tenant_id, space_id) + [
            c for c in self.copies if c["tenant_id"] == tenant_id and c["space_id"] == space_id]


class ChoosingByOrdering(Broken):
    """Keeps whichever duplicate orders first (``earlier``) or last (``later``) by the envelope's sequence."""

    def __init__(self, store: Store, keep: str) -> None:
        super().__init__(store)
        self.keep = keep
        self.violation = f"selecting the {keep}-ordered duplicate"
        self.sequences: dict[str, int] = {}

    def append_event(self, envelope: Mapping[str, Any]) -> bool:
        seen = self.sequences.get(envelope["id"])
        if seen is None:
            self.sequences[envelope["id"]] = envelope["sequence"]
            return super().append_event(envelope)
        wins = envelope["sequence"] < seen if self.keep == "earlier" else envelope["sequence"] > seen
        if wins:
            self.sequences[envelope["id"]] = envelope["sequence"]
            _replace(self, envelope)
            return True
        return False


class AddingOutboxRow(Broken):
    """Writes a publication row for a duplicate whose event has none (T3 broken)."""

    violation = "adding an outbox row for a duplicate"

    def append_event_with_outbox(self, envelope: Mapping[str, Any], outbox: Mapping[str, Any]) -> bool:
        if _exists(self.store, envelope["id"]):
            if not raw(self.store, "SELECT 1 FROM host_event_outbox WHERE event_id = ?", envelope["id"]):
                now = self._when(datetime.now(UTC) - timedelta(seconds=5))
                raw(self.store, "INSERT INTO host_event_outbox (event_id, destination, headers, status, attempts, "
                    "available_at, created_at, updated_at) VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)",
                    envelope["id"], outbox["destination"], canonical_json(outbox["headers"]), now, now, now)
            return True
        return super().append_event_with_outbox(envelope, outbox)


class ResettingOutboxRow(Broken):
    """A duplicate outbox append resets the existing row to a fresh pending one."""

    violation = "resetting the outbox row"

    def append_event_with_outbox(self, envelope: Mapping[str, Any], outbox: Mapping[str, Any]) -> bool:
        if _exists(self.store, envelope["id"]):
            raw(self.store, "UPDATE host_event_outbox SET status = 'pending', attempts = 0, lease_owner = NULL, "
                "lease_token = NULL, lease_until = NULL, published_at = NULL WHERE event_id = ?", envelope["id"])
            return False
        return super().append_event_with_outbox(envelope, outbox)


class ClaimIgnoringTenant(Broken):
    """``claim_outbox`` ignores its tenant and space filter: it also leases other tenants' due rows."""

    violation = "ignoring the tenant filter in a claim"

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.claims: list[dict[str, Any]] = []

    def claim_outbox(self, worker: str, limit: int, lease_seconds: float, now: datetime, *, tenant_id: str,
                     space_id: str | None = None) -> list[dict[str, Any]]:
        self.claims.append({"worker": worker, "limit": limit, "lease_seconds": lease_seconds, "now": now})
        tenants = [r[0] for r in raw(self.store, "SELECT DISTINCT tenant_id FROM host_events ORDER BY tenant_id")]
        out: list[dict[str, Any]] = []
        for tenant in tenants:
            out += super().claim_outbox(worker, limit, lease_seconds, now, tenant_id=tenant)
        return out


class NeverCommitting(Broken):
    """Its transactions roll back silently: what they append is gone after the block."""

    violation = "a silently rolled-back transaction"

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        class _Rollback(Exception):
            pass
        try:
            with self.store.transaction() as tx:
                yield _Tx(tx)
                raise _Rollback
        except _Rollback:
            pass


class BufferLastWriteWins(Broken):
    """Within one transaction a buffered duplicate overwrites the first (committed duplicates are kept)."""

    violation = "last write wins within a transaction"

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        buffered: dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = {}

        class Buffer:
            def append_event(self, envelope: Mapping[str, Any]) -> bool:
                outbox = buffered.get(envelope["id"], (None, None))[1]
                buffered[envelope["id"]] = (envelope, outbox)
                return True

            def append_event_with_outbox(self, envelope: Mapping[str, Any], outbox: Mapping[str, Any]) -> bool:
                buffered[envelope["id"]] = (envelope, outbox)
                return True

        yield Buffer()
        with self.store.transaction() as tx:
            for envelope, outbox in buffered.values():
                if outbox is None:
                    _Tx(tx).append_event(envelope)
                else:
                    _Tx(tx).append_event_with_outbox(envelope, outbox)


class EmptyListOutbox(Broken):
    violation = "list_outbox shows nothing"

    def list_outbox(self, tenant_id: str, space_id: str) -> list[dict[str, Any]]:
        return []


class KeepingLease(Broken):
    """``mark_outbox_failed`` keeps a lease of ``seconds`` on the row."""

    def __init__(self, store: Store, seconds: float) -> None:
        super().__init__(store)
        self.seconds = seconds
        self.violation = f"keeping a {seconds} s lease after mark_outbox_failed"
        self.failed_calls: list[dict[str, Any]] = []

    def mark_outbox_failed(self, row_id: str, worker: str, lease_token: str, error: str,
                           available_at: datetime) -> bool:
        self.failed_calls.append({"available_at": available_at, "now": datetime.now(UTC)})
        ok = super().mark_outbox_failed(row_id, worker, lease_token, error, available_at)
        until = self._when(datetime.now(UTC) + timedelta(seconds=self.seconds))
        raw(self.store, "UPDATE host_event_outbox SET lease_owner = ?, lease_until = ? WHERE event_id = ?",
            worker, until, row_id)
        return ok


class Minimal:
    """Only the two required methods (U21)."""

    def __init__(self, inner: FencepostEventStore) -> None:
        self.append_event = inner.append_event
        self.list_events = inner.list_events


class OutboxWithoutClaim:
    """An outbox append without the list, claim and mark methods (U24)."""

    def __init__(self, inner: FencepostEventStore) -> None:
        self.append_event = inner.append_event
        self.list_events = inner.list_events
        self.append_event_with_outbox = inner.append_event_with_outbox


class IgnoringScope:
    """Adapter rows by id alone (host-spec V5): reads ignore the scope, and writes take the scope of the
    invocation whose lease they carry instead of the one they name."""

    violation = "ignoring scope"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.create_probe_parent = inner.create_probe_parent
        self.retire = inner.retire

    def get_adapter_invocation(self, adapter_invocation_id: str, scope: Any) -> Any:
        return self.inner.store.read(lambda tx: tx.host.get_adapter_invocation(adapter_invocation_id))

    def write_adapter_invocation(self, write: Any) -> bool:
        invocation = self.inner.store.read(lambda tx: tx.host.get_invocation(write.condition.lease.command_id))
        real = type(write.scope)(invocation.tenant_id, invocation.space_id, invocation.id)
        return bool(self.inner.write_adapter_invocation(dataclasses.replace(write, scope=real)))


class AttemptsAlwaysZero(Broken):
    """A correct store that reports ``attempt_count`` 0 throughout (U14: no positive count is prescribed)."""

    violation = "none"

    def list_outbox(self, tenant_id: str, space_id: str) -> list[dict[str, Any]]:
        return [{**r, "attempt_count": 0} for r in super().list_outbox(tenant_id, space_id)]


class ExtraAndMissingFields(Broken):
    """A correct store that omits ``recorded_at`` and adds ``x_extra`` to every event (U18)."""

    violation = "none"

    def list_events(self, tenant_id: str, space_id: str) -> list[dict[str, Any]]:
        return [{**{k: v for k, v in e.items() if k != "recorded_at"}, "x_extra": "kept"}
                for e in super().list_events(tenant_id, space_id)]


class ActorOnEveryEnvelope(Broken):
    """Adds an actor identity to every stored event (U17)."""

    violation = "an actor disclosure nobody opted in to"

    def list_events(self, tenant_id: str, space_id: str) -> list[dict[str, Any]]:
        return [{**e, "actor": {"id": "store-user"}} for e in super().list_events(tenant_id, space_id)]


class RelayStealingLeases(Broken):
    """A relay running for the probe tenant: right after each claim it takes the row's lease (U13, U27)."""

    violation = "a relay leasing probe rows"

    def claim_outbox(self, worker: str, limit: int, lease_seconds: float, now: datetime, *, tenant_id: str,
                     space_id: str | None = None) -> list[dict[str, Any]]:
        claimed = super().claim_outbox(worker, limit, lease_seconds, now, tenant_id=tenant_id, space_id=space_id)
        for row in claimed:
            raw(self.store, "UPDATE host_event_outbox SET lease_owner = 'relay-1' WHERE event_id = ?", row["id"])
        return claimed


class TxReplacingCommitted(Broken):
    """Dedups duplicates buffered in one transaction, but a transactional append of an id committed by an
    earlier transaction replaces the stored event (host-spec U4's "dedups buffered but not committed")."""

    violation = "a transaction replacing a committed event"

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        broken = self

        class Tx:
            def __init__(self, tx: Any) -> None:
                self._unit, self._tx, self._mine = tx, _Tx(tx), set()

            def append_event(self, envelope: Mapping[str, Any]) -> bool:
                if envelope["id"] not in self._mine and self._unit.events.get_event(envelope["id"]) is not None:
                    ph = "?" if self._unit.backend == "sqlite" else "%s"
                    self._unit.execute_raw(
                        f"UPDATE host_events SET type = {ph}, payload = {ph} WHERE id = {ph}",
                        (envelope["type"], canonical_json(envelope["payload"]), envelope["id"]))
                    return True
                self._mine.add(envelope["id"])
                return self._tx.append_event(envelope)

            def append_event_with_outbox(self, envelope: Mapping[str, Any], outbox: Mapping[str, Any]) -> bool:
                return self._tx.append_event_with_outbox(envelope, outbox)

        with broken.store.transaction() as tx:
            yield Tx(tx)
