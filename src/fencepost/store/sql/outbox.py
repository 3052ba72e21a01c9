"""``OutboxPort`` over SQL: every operation of the durable command outbox, written once.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Durable Command" and "Heartbeat And Takeover".
Each lease-guarded write is a conditional statement naming the token; zero rows raises ``LeaseLost``.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timedelta
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.clock import to_iso
from fencepost.core.errors import Conflict, LeaseActive, LeaseLost, NotFound
from fencepost.core.statuses import CommandStatus, LeaseEventKind
from fencepost.store.claim_rotation import ClaimRotation
from fencepost.store.records import ClaimedCommand, CommandRecord, Lease, LeaseEvent, PendingKind
from fencepost.store.sql.executor import Statements, json_object
from fencepost.store.sql.lease import lease_held

#: One heartbeat-history row waiting to be written: ``(command_id, event, owner, delivery, lease_until)``.
_PendingEvent = tuple[str, LeaseEventKind, str | None, int, datetime | None]


def _payload_text(payload: dict[str, Any]) -> str:
    """The payload's canonical JSON text, refused unless it is a JSON object with a UTF-8 form (the text is
    stored as UTF-8; every claim reads it back as an object).

    Raises:
        TypeError: not a JSON object (a list or a number would make every later claim of the command fail),
            not plain JSON data, or a string holding a lone surrogate (before: the driver's UnicodeEncodeError).
    """
    if not isinstance(payload, dict):
        raise TypeError(f"command payload must be a JSON object, not {type(payload).__name__}")
    text = canonical_json(payload)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise TypeError(f"command payload holds a lone surrogate ({text[error.start]!r}), which has no UTF-8 "
                        "form") from None
    return text


def _lost(lease: Lease) -> LeaseLost:
    return LeaseLost(f"lease on command {lease.command_id} (delivery {lease.delivery}) was lost")


class SqlOutbox:
    """The ``OutboxPort`` of one SQL unit of work.

    Args:
        unit: the unit's statements.
        rotation: where each claim starts among the sorted kinds (the store's, so that claims serve the kinds
            with work in turn, whatever thread claims); a fresh one by default.
    """

    def __init__(self, unit: Statements, rotation: ClaimRotation | None = None) -> None:
        self._unit = unit
        self._rotation = rotation if rotation is not None else ClaimRotation()
        self._notified: set[str] = set()

    def _times(self, lease_seconds: float | None = None) -> dict[str, Any]:
        """The unit's instant and lease deadline as query parameters. In a single-statement unit (ADR 0090)
        both are None: the dialect's statement then takes the server's own instant."""
        now = None if self._unit.single_statement else self._unit.now()
        params: dict[str, Any] = {"now": now}
        if lease_seconds is not None:
            params["lease_until"] = None if now is None else now + timedelta(seconds=lease_seconds)
            params["lease_seconds"] = float(lease_seconds)
        return params

    def _event(self, command_id: str, event: LeaseEventKind, owner: str | None, delivery: int,
               at: datetime, lease_until: datetime | None) -> None:
        self._unit.run("insert_lease_event", {"command_id": command_id, "event": str(event), "owner": owner,
                                              "delivery": delivery, "at": at, "lease_until": lease_until})

    def _events(self, events: list[_PendingEvent], at: datetime | None) -> None:
        """Append heartbeat-history rows that share the instant ``at``, in order, with one statement (a
        single-statement unit, whose ``at`` is None, writes its history in its statement)."""
        if not events:
            return
        assert at is not None, "a single-statement unit left history rows to write"
        rows = [{"command_id": c, "event": str(e), "owner": o, "delivery": d,
                 "lease_until": to_iso(u) if u is not None else None} for c, e, o, d, u in events]
        self._unit.run("insert_lease_events", {"events": _json(rows), "at": at})

    def _notify(self, kind: str, available_at: datetime, now: datetime) -> None:
        """Wake idle workers of ``kind`` once this unit commits (PostgreSQL NOTIFY, ADR 0014; a no-op on
        SQLite). Sent at most once per kind and unit, and only for work due now."""
        if available_at > now or kind in self._notified:
            return
        self._notified.add(kind)
        self._unit.run("notify_command", {"kind": kind, "available_at": available_at, "now": now})

    # ── producer side ──
    def insert(self, *, command_id: str, kind: str, payload: dict[str, Any],
               available_at: datetime | None = None) -> None:
        params = self._times()
        params.update(id=command_id, kind=kind, payload=_payload_text(payload),
                      available_at=available_at or params["now"])
        self._unit.run("insert_command", params)
        self._notify(kind, params["available_at"], params["now"])

    def insert_leased(self, *, command_id: str, kind: str, payload: dict[str, Any], owner: str,
                      lease_seconds: float) -> Lease:
        params = self._times(lease_seconds)
        token = secrets.token_hex(16)
        params.update(id=command_id, kind=kind, payload=_payload_text(payload), owner=owner, token=token)
        until = self._unit.run("insert_leased_command", params).rows[0]["lease_until"]
        self._event(command_id, LeaseEventKind.CLAIM, owner, 0, params["now"], until)
        return Lease(command_id=command_id, owner=owner, token=token, delivery=0, until=until)

    # ── worker side ──
    def claim(self, *, owner: str, kinds: list[str], limit: int, lease_seconds: float,
              command_ids: list[str] | None = None) -> list[ClaimedCommand]:
        if limit < 1 or not kinds or (command_ids is not None and not command_ids):
            return []
        order = sorted(set(kinds))
        if len(order) > 1:
            self._unit.begin_block()  # one statement per kind, all in one transaction
        params = self._times(lease_seconds)
        params["owner"] = owner
        if command_ids is not None:
            params["command_ids"] = _json(sorted(set(command_ids)))
        rows: list[dict[str, Any]] = []

        def take(kind: str, most: int) -> int:
            step = dict(params, kind=kind, limit=most)
            got = (self._unit.run("claim_commands", step) if command_ids is None
                   else self._unit.run("claim_given_commands", step)).rows
            rows.extend(got)
            return len(got)

        # Fair across kinds (issue 10 item 4): each kind gets an equal share of what is left (rounded up), in
        # order from the kind after the one the last claim served (``ClaimRotation``); a kind that returned
        # less than its share has no more due work and drops out, and the rest is shared again among the kinds
        # that filled theirs. So kinds with work split a claim evenly whatever the empty kinds a worker also
        # serves (a trial: with six kinds, two with work, one got 80% of the claims). One statement per kind
        # each time, so every scan stays an index range scan (ADR 0009).
        candidates = self._rotation.order(order)
        while candidates and len(rows) < limit:
            share = -(-(limit - len(rows)) // len(candidates))
            filled = []
            for kind in candidates:
                most = min(share, limit - len(rows))
                if most < 1:
                    break
                got = take(kind, most)
                if got:
                    self._rotation.served(kind)
                if got == most:
                    filled.append(kind)
            candidates = filled
        return self._claimed(rows, owner, params["now"])

    def _claimed(self, rows: list[dict[str, Any]], owner: str, now: datetime | None) -> list[ClaimedCommand]:
        """The claim statements' rows as ``ClaimedCommand``s, with their claim or takeover history written."""
        claimed = []
        events: list[_PendingEvent] = []
        for row in rows:
            lease = Lease(command_id=row["id"], owner=row["lease_owner"], token=row["lease_token"],
                          delivery=int(row["delivery_count"]), until=row["lease_until"])
            kind = LeaseEventKind.CLAIM if lease.delivery == 1 else LeaseEventKind.TAKEOVER
            if not row.get("history_written"):
                events.append((lease.command_id, kind, owner, lease.delivery, lease.until))
            payload, unreadable = read_payload(row["payload"])  # one bad row must not fail the batch
            claimed.append(ClaimedCommand(id=row["id"], kind=row["kind"], payload=payload, lease=lease,
                                          unreadable=unreadable))
        # Heartbeat history of the whole batch in one statement, in the same unit as the claim, unless the
        # dialect's claim statement already wrote it (PostgreSQL: a data-modifying CTE, ADR 0018).
        self._events(events, now)
        return claimed

    def finish_and_claim(self, leases: list[Lease], *, owner: str, kinds: list[str], limit: int,
                         lease_seconds: float, command_ids: list[str] | None = None,
                         ) -> tuple[list[bool], list[ClaimedCommand]]:
        if leases and limit >= 1 and kinds and (command_ids is None or command_ids):
            self._unit.begin_block()  # two statements at least: one transaction block on every backend
        return self.finish_many(leases), self.claim(owner=owner, kinds=kinds, limit=limit,
                                                    lease_seconds=lease_seconds, command_ids=command_ids)

    def renew(self, lease: Lease, *, lease_seconds: float, record: bool = True) -> Lease:
        params = self._times(lease_seconds)
        params.update(id=lease.command_id, token=lease.token)
        result = self._unit.run("renew_lease", params)
        if result.rowcount != 1:
            raise _lost(lease)
        until = result.rows[0]["lease_until"]
        if record:
            self._event(lease.command_id, LeaseEventKind.HEARTBEAT, lease.owner, lease.delivery,
                        params["now"], until)
        return Lease(lease.command_id, lease.owner, lease.token, lease.delivery, until)

    def hold(self, lease: Lease) -> None:
        if not lease_held(self._unit, lease):
            raise _lost(lease)

    def finish(self, lease: Lease, status: CommandStatus, error: str | None = None) -> None:
        if status not in (CommandStatus.DELIVERED, CommandStatus.FAILED):
            raise ValueError(f"finish takes DELIVERED or FAILED, not {status}")
        params = self._times()
        params.update(id=lease.command_id, token=lease.token, status=str(status), error=error)
        if self._unit.run("finish_command", params).rowcount != 1:
            raise _lost(lease)
        event = LeaseEventKind.DELIVER if status is CommandStatus.DELIVERED else LeaseEventKind.FAIL
        self._event(lease.command_id, event, lease.owner, lease.delivery, params["now"], None)

    def finish_many(self, leases: list[Lease]) -> list[bool]:
        if not leases:
            return []
        # The statement reports delivered ids, not tokens. So that it can tell which of several leases of one
        # command was current, each round holds at most one lease per command (one round in practice); a
        # lease listed again after its command was delivered matches nothing.
        rounds: list[list[int]] = []
        seen: dict[str, int] = {}
        for index, lease in enumerate(leases):
            number = seen.get(lease.command_id, 0)
            seen[lease.command_id] = number + 1
            if number == len(rounds):
                rounds.append([])
            rounds[number].append(index)
        if len(rounds) > 1:
            self._unit.begin_block()  # the rounds commit together
        params = self._times()
        outcome = [False] * len(leases)
        written: set[int] = set()
        for indexes in rounds:
            wanted = [{"id": leases[i].command_id, "token": leases[i].token, "owner": leases[i].owner,
                       "delivery": leases[i].delivery} for i in indexes]
            rows = self._unit.run("finish_commands", dict(params, leases=_json(wanted))).rows
            done = {row["id"] for row in rows}
            for i in indexes:
                outcome[i] = leases[i].command_id in done
            if rows and rows[0].get("history_written"):
                written.update(indexes)
        # The deliver history in list order, except the rows the statement wrote itself (ADR 0018).
        self._events([(lease.command_id, LeaseEventKind.DELIVER, lease.owner, lease.delivery, None)
                      for i, lease in enumerate(leases) if outcome[i] and i not in written], params["now"])
        return outcome

    def release(self, lease: Lease) -> None:
        params = self._times()
        params.update(id=lease.command_id, token=lease.token)
        result = self._unit.run("release_command", params)
        if result.rowcount != 1:
            raise _lost(lease)
        self._event(lease.command_id, LeaseEventKind.RELEASE, lease.owner, lease.delivery, params["now"], None)
        self._notify(str(result.rows[0]["kind"]), params["now"], params["now"])

    # ── operator side ──
    def reconcile(self, command_id: str) -> CommandRecord:
        params = self._times()
        params["id"] = command_id
        result = self._unit.run("reconcile_command", params)
        if result.rowcount == 1:
            record = command_from_row(result.rows[0])
            self._event(command_id, LeaseEventKind.RECONCILE, None, record.delivery_count, params["now"], None)
            self._notify(record.kind, params["now"], params["now"])
            return record
        found = self.get(command_id)
        if found is None:
            raise NotFound(f"no command {command_id}")
        if found.status is CommandStatus.PROCESSING and found.lease_until is not None:
            raise LeaseActive(
                f"the lease is active until {found.lease_until.isoformat()}; "
                "an active lease cannot be reconciled", found.lease_until)
        raise Conflict(f"command {command_id} is {found.status}, only an expired PROCESSING lease "
                       "can be reconciled")

    def abort(self, command_id: str, error: str | None = None) -> bool:
        params = self._times()
        params.update(id=command_id, error=error)
        result = self._unit.run("abort_command", params)
        if result.rowcount != 1:
            return False
        self._event(command_id, LeaseEventKind.ABORT, None, int(result.rows[0]["delivery_count"]),
                    params["now"], None)
        return True

    # ── reads ──
    def get(self, command_id: str) -> CommandRecord | None:
        rows = self._unit.run("get_command", {"id": command_id}).rows
        return command_from_row(rows[0]) if rows else None

    def lease_events(self, command_id: str) -> list[LeaseEvent]:
        rows = self._unit.run("lease_events", {"command_id": command_id}).rows
        return [LeaseEvent(seq=int(r["seq"]), command_id=r["command_id"], event=LeaseEventKind(r["event"]),
                           owner=r["owner"], delivery=int(r["delivery"]), at=r["at"], lease_until=r["lease_until"])
                for r in rows]

    def count_by_status(self) -> dict[CommandStatus, int]:
        rows = self._unit.run("count_commands_by_status", {}).rows
        return {CommandStatus(r["status"]): int(r["n"]) for r in rows}

    def pending_by_kind(self, *, prefix: str = "", limit: int = 100) -> list[PendingKind]:
        rows = self._unit.run("pending_by_kind", {"prefix": prefix, "limit": limit}).rows
        return [PendingKind(kind=r["kind"], pending=int(r["pending"]), oldest_created_at=r["oldest_created_at"],
                            kinds_total=int(r["kinds_total"]), pending_total=int(r["pending_total"]))
                for r in rows]


def _json(rows: list[Any]) -> str:
    """Internal statement parameters (ids, tokens, numbers, instants): plain compact JSON, never stored."""
    return json.dumps(rows, separators=(",", ":"))


def read_payload(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A stored payload as ``(object, None)``, or ``({}, why)`` when it cannot be read back: a row written past
    the outbox port (nesting or an integer beyond the parser's limits, not a JSON object). Reading it never
    raises, so that one such row fails alone (``ClaimedCommand.unreadable``) instead of every claim or listing
    that meets it (a break-it trial)."""
    try:
        return json_object(raw, "command payload"), None
    except (ValueError, RecursionError) as error:
        return {}, f"{type(error).__name__}: {error}"[:500]


def command_from_row(row: dict[str, Any]) -> CommandRecord:
    """A ``CommandRecord`` from a row of ``get_command``'s columns."""
    payload, unreadable = read_payload(row["payload"])
    return CommandRecord(
        id=row["id"], kind=row["kind"], payload=payload, unreadable=unreadable,
        status=CommandStatus(row["status"]),
        available_at=row["available_at"], created_at=row["created_at"], updated_at=row["updated_at"],
        lease_owner=row["lease_owner"], lease_until=row["lease_until"],
        last_heartbeat_at=row["last_heartbeat_at"], delivery_count=int(row["delivery_count"]),
        finished_at=row["finished_at"], last_error=row["last_error"])
