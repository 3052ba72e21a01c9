"""Outbox operations: every database operation of the durable command outbox, written once.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Durable Command" and "Heartbeat And Takeover".
Each lease-guarded write is a conditional statement naming the token; zero rows raises ``LeaseLost``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.core.clock import to_iso
from fencepost.core.errors import Conflict, LeaseActive, LeaseLost, NotFound
from fencepost.core.statuses import CommandStatus, LeaseEventKind
from fencepost.store.records import ClaimedCommand, CommandRecord, Lease, LeaseEvent

if TYPE_CHECKING:
    from fencepost.store.base import Result


class OutboxOps:
    """Mixed into ``Transaction``; relies on ``_run`` and ``now``."""

    def _run(self, name: str, params: dict[str, Any]) -> Result:  # pragma: no cover - abstract
        raise NotImplementedError

    def now(self) -> datetime:  # pragma: no cover - abstract
        raise NotImplementedError

    def _times(self, lease_seconds: float | None = None) -> dict[str, Any]:
        now = self.now()
        params: dict[str, Any] = {"now": now}
        if lease_seconds is not None:
            params["lease_until"] = now + timedelta(seconds=lease_seconds)
            params["lease_seconds"] = float(lease_seconds)
        return params

    def _event(self, command_id: str, event: LeaseEventKind, owner: str | None, delivery: int,
               at: datetime, lease_until: datetime | None) -> None:
        self._run("insert_lease_event", {"command_id": command_id, "event": str(event), "owner": owner,
                                         "delivery": delivery, "at": at, "lease_until": lease_until})

    def _events(self, events: list[tuple[str, LeaseEventKind, str | None, int, datetime | None]],
                at: datetime) -> None:
        """Append several heartbeat-history rows ``(command_id, event, owner, delivery, lease_until)`` that
        share the instant ``at``, in order, with one statement (one round trip on PostgreSQL)."""
        if not events:
            return
        rows = [{"command_id": c, "event": str(e), "owner": o, "delivery": d,
                 "lease_until": to_iso(u) if u is not None else None} for c, e, o, d, u in events]
        self._run("insert_lease_events", {"events": _json(rows), "at": at})

    def _notify(self, kind: str, available_at: datetime, now: datetime) -> None:
        """Wake idle workers of ``kind`` once this transaction commits (PostgreSQL NOTIFY; a no-op
        statement on SQLite). Sent at most once per kind and transaction, and only for work due now."""
        if available_at > now:
            return
        notified: set[str] = self.__dict__.setdefault("_notified_kinds", set())
        if kind in notified:
            return
        notified.add(kind)
        self._run("notify_command", {"kind": kind, "available_at": available_at, "now": now})

    # ── producer side ──
    def insert_command(self, *, command_id: str, kind: str, payload: dict[str, Any],
                       available_at: datetime | None = None) -> None:
        """Insert a PENDING command. The caller writes its parent rows in the same transaction.

        Args:
            command_id: unique id (see ``fencepost.core.ids``).
            kind: handler name, 1..100 chars.
            payload: plain JSON object.
            available_at: earliest delivery instant; defaults to the store's now.

        A command due now also wakes idle workers of ``kind`` when this transaction commits (PostgreSQL
        NOTIFY, ADR 0014); workers that miss it find the command by polling.
        """
        params = self._times()
        params.update(id=command_id, kind=kind, payload=canonical_json(payload),
                      available_at=available_at or params["now"])
        self._run("insert_command", params)
        self._notify(kind, params["available_at"], params["now"])

    # ── worker side ──
    def claim_commands(self, *, owner: str, kinds: list[str], limit: int,
                       lease_seconds: float) -> list[ClaimedCommand]:
        """Claim up to ``limit`` due commands of ``kinds`` in one conditional update.

        A PENDING row is due after ``available_at``; a PROCESSING row only after ``lease_until``
        (takeover). Each claimed row gets a fresh random token and ``delivery_count + 1``; a
        ``claim`` or ``takeover`` event is recorded in heartbeat history.

        Returns:
            The claimed commands (possibly empty), each with its ``Lease``.
        """
        if limit < 1 or not kinds:
            return []
        params = self._times(lease_seconds)
        rows: list[dict[str, Any]] = []
        for kind in sorted(set(kinds)):
            if len(rows) >= limit:
                break
            params.update(owner=owner, kind=kind, kinds=canonical_json([kind]), kinds_list=[kind],
                          limit=limit - len(rows))
            rows.extend(self._run("claim_commands", params).rows)
        claimed = []
        events: list[tuple[str, LeaseEventKind, str | None, int, datetime | None]] = []
        for row in rows:
            lease = Lease(command_id=row["id"], owner=row["lease_owner"], token=row["lease_token"],
                          delivery=int(row["delivery_count"]), until=row["lease_until"])
            kind = LeaseEventKind.CLAIM if lease.delivery == 1 else LeaseEventKind.TAKEOVER
            events.append((lease.command_id, kind, owner, lease.delivery, lease.until))
            claimed.append(ClaimedCommand(id=row["id"], kind=row["kind"], payload=_payload(row["payload"]),
                                          lease=lease))
        # Heartbeat history of the whole batch in one statement, in the same transaction as the claim.
        self._events(events, params["now"])
        return claimed

    def renew_lease(self, lease: Lease, *, lease_seconds: float, record: bool = True) -> Lease:
        """Extend the lease (heartbeat) and prove it is still ours (fence).

        Args:
            lease: the caller's current lease.
            lease_seconds: new lease duration from the store's now.
            record: also append a ``heartbeat`` row to heartbeat history.
        Returns:
            The renewed ``Lease`` (same token, new ``until``).
        Raises:
            LeaseLost: the token is no longer current (takeover, reconcile, abort, completion).
        """
        params = self._times(lease_seconds)
        params.update(id=lease.command_id, token=lease.token)
        result = self._run("renew_lease", params)
        if result.rowcount != 1:
            raise LeaseLost(f"lease on command {lease.command_id} (delivery {lease.delivery}) was lost")
        until = result.rows[0]["lease_until"]
        if record:
            self._event(lease.command_id, LeaseEventKind.HEARTBEAT, lease.owner, lease.delivery,
                        params["now"], until)
        return Lease(lease.command_id, lease.owner, lease.token, lease.delivery, until)

    def finish_command(self, lease: Lease, status: CommandStatus, error: str | None = None) -> None:
        """Terminal outcome under the lease (DELIVERED or FAILED); clears the token.

        Raises:
            ValueError: ``status`` is not DELIVERED or FAILED.
            LeaseLost: the token is no longer current.
        """
        if status not in (CommandStatus.DELIVERED, CommandStatus.FAILED):
            raise ValueError(f"finish_command takes DELIVERED or FAILED, not {status}")
        params = self._times()
        params.update(id=lease.command_id, token=lease.token, status=str(status), error=error)
        if self._run("finish_command", params).rowcount != 1:
            raise LeaseLost(f"lease on command {lease.command_id} (delivery {lease.delivery}) was lost")
        event = LeaseEventKind.DELIVER if status is CommandStatus.DELIVERED else LeaseEventKind.FAIL
        self._event(lease.command_id, event, lease.owner, lease.delivery, params["now"], None)

    def finish_commands(self, leases: list[Lease]) -> list[bool]:
        """Mark several commands DELIVERED in this transaction; one lost lease does not undo the others.

        One multi-row conditional UPDATE: a row changes only while its own token is current, exactly as
        ``finish_command`` would change it; then one statement records every ``deliver`` event.

        Returns:
            For each lease, whether it was still current (and is now DELIVERED).
        """
        if not leases:
            return []
        params = self._times()
        wanted = [{"id": lease.command_id, "token": lease.token} for lease in leases]
        done = {row["id"] for row in self._run("finish_commands", dict(params, leases=_json(wanted))).rows}
        outcome = []
        events: list[tuple[str, LeaseEventKind, str | None, int, datetime | None]] = []
        for lease in leases:
            ok = lease.command_id in done
            done.discard(lease.command_id)  # a lease listed twice is delivered once
            if ok:
                events.append((lease.command_id, LeaseEventKind.DELIVER, lease.owner, lease.delivery, None))
            outcome.append(ok)
        self._events(events, params["now"])
        return outcome

    def release_command(self, lease: Lease) -> None:
        """Give a claimed command back as PENDING, due now (graceful stop).

        Raises:
            LeaseLost: the token is no longer current.
        """
        params = self._times()
        params.update(id=lease.command_id, token=lease.token)
        result = self._run("release_command", params)
        if result.rowcount != 1:
            raise LeaseLost(f"lease on command {lease.command_id} (delivery {lease.delivery}) was lost")
        self._event(lease.command_id, LeaseEventKind.RELEASE, lease.owner, lease.delivery, params["now"], None)
        self._notify(str(result.rows[0]["kind"]), params["now"], params["now"])

    # ── operator side ──
    def reconcile_command(self, command_id: str) -> CommandRecord:
        """Return an expired PROCESSING command to PENDING (seed: only an expired lease).

        Returns:
            The command after reconcile.
        Raises:
            NotFound: no such command.
            LeaseActive: the lease has not expired (carries ``lease_until``).
            Conflict: the command is not PROCESSING.
        """
        params = self._times()
        params["id"] = command_id
        result = self._run("reconcile_command", params)
        if result.rowcount == 1:
            delivery = int(result.rows[0]["delivery_count"])
            self._event(command_id, LeaseEventKind.RECONCILE, None, delivery, params["now"], None)
            self._notify(str(result.rows[0]["kind"]), params["now"], params["now"])
            record = self.get_command(command_id)
            assert record is not None
            return record
        record = self.get_command(command_id)
        if record is None:
            raise NotFound(f"no command {command_id}")
        if record.status is CommandStatus.PROCESSING and record.lease_until is not None:
            raise LeaseActive(
                f"the lease is active until {record.lease_until.isoformat()}; "
                "an active lease cannot be reconciled", record.lease_until)
        raise Conflict(f"command {command_id} is {record.status}, only an expired PROCESSING lease "
                       "can be reconciled")

    def abort_command(self, command_id: str, error: str | None = None) -> bool:
        """Mark a PENDING or PROCESSING command ABORTED and clear its token (fences the worker).

        Returns:
            True when the command was aborted now, False when it was already terminal or absent.
        """
        params = self._times()
        params.update(id=command_id, error=error)
        result = self._run("abort_command", params)
        if result.rowcount != 1:
            return False
        self._event(command_id, LeaseEventKind.ABORT, None, int(result.rows[0]["delivery_count"]),
                    params["now"], None)
        return True

    # ── reads ──
    def get_command(self, command_id: str) -> CommandRecord | None:
        rows = self._run("get_command", {"id": command_id}).rows
        return _command(rows[0]) if rows else None

    def lease_events(self, command_id: str) -> list[LeaseEvent]:
        rows = self._run("lease_events", {"command_id": command_id}).rows
        return [LeaseEvent(seq=int(r["seq"]), command_id=r["command_id"], event=r["event"], owner=r["owner"],
                           delivery=int(r["delivery"]), at=r["at"], lease_until=r["lease_until"]) for r in rows]

    def count_commands_by_status(self) -> dict[CommandStatus, int]:
        rows = self._run("count_commands_by_status", {}).rows
        return {CommandStatus(r["status"]): int(r["n"]) for r in rows}


def _json(rows: list[dict[str, Any]]) -> str:
    """Internal statement parameters (ids, tokens, numbers, instants): plain compact JSON, never stored."""
    return json.dumps(rows, separators=(",", ":"))


def _payload(raw: Any) -> dict[str, Any]:
    value = parse_json(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise ValueError("command payload is not a JSON object")
    return value


def _command(row: dict[str, Any]) -> CommandRecord:
    return CommandRecord(
        id=row["id"], kind=row["kind"], payload=_payload(row["payload"]), status=CommandStatus(row["status"]),
        available_at=row["available_at"], created_at=row["created_at"], updated_at=row["updated_at"],
        lease_owner=row["lease_owner"], lease_until=row["lease_until"],
        last_heartbeat_at=row["last_heartbeat_at"], delivery_count=int(row["delivery_count"]),
        finished_at=row["finished_at"], last_error=row["last_error"])
