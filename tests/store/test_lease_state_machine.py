"""A hypothesis state machine of the lease protocol on SQLite with a manual clock (issue 9, item 9).

Rules drive the outbox store the way workers and operators do: enqueue, claim (several workers, varying
kinds and batch limits), heartbeat, clock advance, takeover, reconcile, abort, release, finish (one and
batched), stale writes by any worker retrying with any lease it once held, and fenced units (a child row
written, then the fence, in one transaction through ``CommandContext.fenced``). A plain-Python model
predicts every outcome (row by row, history event by event); the rules check their postconditions and the
invariants below run after every step.

Invariants (DESIGN.md "Invariants"; seed plugin-rehearsal-outbox-release-gate-design.md, "Durable Command",
"Heartbeat And Takeover", "Failure Boundaries"). A violation's message starts with the invariant's name:

- ``no stale write lands``: a renew/finish/release/fenced unit under a non-current token raises
  ``LeaseLost`` and changes nothing (every row of the database compared before and after, token included);
- ``one live lease per command``: of all leases ever handed out, at most one matches the stored token, and
  ``current token is the latest claim's``;
- ``delivery_count equals the number of claims``: claim and takeover events in heartbeat history;
- ``terminal commands never change``: a DELIVERED/FAILED/ABORTED row stays byte-identical, is never claimed;
- ``reconcile only an expired lease``: an active one raises ``LeaseActive``; ``abort fences the holder``;
- ``lease history is append-only`` and ``lease history matches the model`` (kind, owner, delivery, instants);
- ``row matches the model``: every public column of every command, after every step.

The machine also runs against deliberately broken stores (one named query rewritten) to prove that it finds
each kind of violation and names it. SQLite only: the manual clock is what makes expiry exact and instant.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from fencepost.core.clock import ManualClock
from fencepost.core.errors import Conflict, LeaseActive, LeaseLost, NotFound
from fencepost.core.statuses import CommandStatus, LeaseEventKind
from fencepost.outbox.context import CommandContext
from fencepost.store import Store
from fencepost.store.ports import FencedUnit, UnitOfWork
from fencepost.store.records import ClaimedCommand, CommandRecord, Lease
from fencepost.store.sqlite.store import SQLiteStore
from helpers.store_backends import selected_backends, store_backend

KINDS = ("j", "k")
WORKERS = ("w1", "w2", "w3")
MAX_COMMANDS = 5
MISSING = "no-such-command"
LEASE_SECONDS = st.sampled_from([5.0, 30.0, 90.0])
TERMINAL = (CommandStatus.DELIVERED, CommandStatus.FAILED, CommandStatus.ABORTED)

# A test-only child table: the rows a handler writes under its lease (receipts, adapter rows) stand in here.
CHILD_TABLE = ("CREATE TABLE lease_machine_children (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
               "command_id TEXT NOT NULL REFERENCES commands (id), delivery INTEGER NOT NULL)")

Event = tuple[str, str | None, int, datetime, datetime | None]  # (event, owner, delivery, at, lease_until)


@dataclass
class Model:
    """What one command's row and heartbeat history must be; ``token`` is the latest claim's token."""

    id: str
    kind: str
    status: CommandStatus
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None = None
    lease_until: datetime | None = None
    last_heartbeat_at: datetime | None = None
    delivery_count: int = 0
    finished_at: datetime | None = None
    last_error: str | None = None
    token: str | None = None
    events: list[Event] = field(default_factory=list)
    children: list[int] = field(default_factory=list)  # delivery of each fenced child row, in order

    def record(self) -> CommandRecord:
        return CommandRecord(
            id=self.id, kind=self.kind, payload={"id": self.id}, status=self.status,
            available_at=self.available_at, created_at=self.created_at, updated_at=self.updated_at,
            lease_owner=self.lease_owner, lease_until=self.lease_until, last_heartbeat_at=self.last_heartbeat_at,
            delivery_count=self.delivery_count, finished_at=self.finished_at, last_error=self.last_error)

    def clear_lease(self, now: datetime) -> None:
        self.lease_owner = self.lease_until = self.token = None
        self.updated_at = now

    def claimable(self, now: datetime) -> bool:
        if self.status is CommandStatus.PENDING:
            return self.available_at <= now
        return self.status is CommandStatus.PROCESSING and self.lease_until is not None and self.lease_until <= now

    def claim_order(self) -> tuple[int, datetime]:
        # claim_commands: expired leases first (by lease_until), then due PENDING rows (by available_at).
        if self.status is CommandStatus.PROCESSING:
            assert self.lease_until is not None
            return (0, self.lease_until)
        return (1, self.available_at)


def fair_counts(kinds: list[str], due: dict[str, int], limit: int, start: int) -> dict[str, int]:
    """How many commands of each kind a fair claim of ``limit`` takes when the sorted ``kinds`` are served
    from index ``start`` on (the store rotates ``start``): an equal share each (rounded up), then the rest
    of the limit to the kinds that filled their share, in the same order."""
    order = kinds[start:] + kinds[:start]
    share = -(-limit // len(order))
    got = dict.fromkeys(order, 0)
    more = []
    for kind in order:
        most = min(share, limit - sum(got.values()))
        if most < 1:
            break
        got[kind] = min(most, due[kind])
        if got[kind] == most:
            more.append(kind)
    for kind in more:
        got[kind] += min(max(limit - sum(got.values()), 0), due[kind] - got[kind])
    return got


@dataclass(frozen=True)
class Snapshot:
    """Every row the protocol can touch, raw (token included), to prove that a refused write changed nothing."""

    commands: list[tuple[Any, ...]]
    events: list[tuple[Any, ...]]
    children: list[tuple[Any, ...]]


def raw(tx: UnitOfWork | FencedUnit, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return cast(list[tuple[Any, ...]], cast(Any, tx).execute_raw(query, params))


class LeaseProtocol(RuleBasedStateMachine):
    """The lease protocol against one fresh migrated SQLite database per example.

    Args:
        backend_name: ``sqlite-wal`` or ``sqlite-delete``.
        break_query: ``(query name, old text, new text)`` rewrites one named query of the store (a
            deliberately broken store, to prove the machine detects the violation); None runs the real store.
    """

    def __init__(self, backend_name: str = "sqlite-wal", break_query: tuple[str, str, str] | None = None) -> None:
        super().__init__()
        self._stack = ExitStack()
        directory = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="fp-lease-machine-")))
        backend = self._stack.enter_context(store_backend(backend_name, directory))
        assert isinstance(backend.clock, ManualClock)
        self.clock: ManualClock = backend.clock
        self.store: Store = backend.migrated()
        self.store.transact(lambda tx: raw(tx, CHILD_TABLE))
        if break_query is not None:
            name, old, new = break_query
            sqlite_store = cast(SQLiteStore, self.store)
            # Fail loudly if the query text moved on, rather than silently testing an unbroken store.
            query = sqlite_store.queries[name]
            assert old in query.sql, f"{name} no longer contains {old!r}"
            sqlite_store.queries = {**sqlite_store.queries, name: replace(query, sql=query.sql.replace(old, new))}
        self.model: dict[str, Model] = {}
        self.handed_out: list[Lease] = []  # every lease any worker ever held (claims and renewals)
        self.tokens_issued: list[str] = []  # one per claim, in order
        self.seen_events: dict[str, list[tuple[Any, ...]]] = {}
        self.terminal_rows: dict[str, tuple[tuple[Any, ...], int]] = {}  # raw row and history length

    def teardown(self) -> None:
        self._stack.close()

    # ── helpers ──
    def now(self) -> datetime:
        return self.clock.now()

    def snapshot(self) -> Snapshot:
        def read(tx: UnitOfWork) -> Snapshot:
            return Snapshot(commands=raw(tx, "SELECT * FROM commands ORDER BY id"),
                            events=raw(tx, "SELECT * FROM lease_events ORDER BY seq"),
                            children=raw(tx, "SELECT * FROM lease_machine_children ORDER BY seq"))

        return self.store.read(read)

    def live_deadlines(self) -> list[datetime]:
        return [m.lease_until for m in self.model.values()
                if m.status is CommandStatus.PROCESSING and m.lease_until is not None]

    def is_current(self, lease: Lease) -> bool:
        return self.model[lease.command_id].token == lease.token

    def stale_leases(self) -> list[Lease]:
        return [lease for lease in self.handed_out if not self.is_current(lease)]

    def current_leases(self) -> list[Lease]:
        return [lease for lease in self.handed_out if self.is_current(lease)]

    def draw_lease(self, data: st.DataObject) -> Lease:
        """Mostly a current lease (so commands move on), one time in four any lease ever held."""
        current = self.current_leases()
        if current and data.draw(st.integers(0, 3), label="retry any old lease") > 0:
            return data.draw(st.sampled_from(current), label="current lease")
        return data.draw(st.sampled_from(self.handed_out), label="any lease")

    def draw_command(self, data: st.DataObject) -> str:
        """Mostly a PROCESSING command (what reconcile is for), else any command or an unknown id."""
        processing = sorted(i for i, m in self.model.items() if m.status is CommandStatus.PROCESSING)
        if processing and data.draw(st.integers(0, 3), label="any command") > 0:
            return data.draw(st.sampled_from(processing), label="processing command")
        return data.draw(st.sampled_from([*sorted(self.model), MISSING]), label="command")

    def expect_fenced(self, invariant_name: str, what: str, call: Callable[[], object]) -> None:
        """``call`` must raise ``LeaseLost`` and leave every row of the database as it was."""
        before = self.snapshot()
        try:
            call()
        except LeaseLost:
            pass
        else:
            raise AssertionError(f"{invariant_name}: {what} did not raise LeaseLost")
        assert self.snapshot() == before, f"{invariant_name}: {what} raised LeaseLost but changed the database"

    def try_every_op(self, invariant_name: str, lease: Lease, why: str) -> None:
        """Every lease-guarded write with ``lease`` must be refused and change nothing."""
        store = self.store
        label = f"{why}: delivery {lease.delivery} of {lease.command_id} by {lease.owner}"
        self.expect_fenced(invariant_name, f"renew ({label})",
                           lambda: store.transact(lambda tx: tx.outbox.renew(lease, lease_seconds=30.0)))
        self.expect_fenced(invariant_name, f"release ({label})",
                           lambda: store.transact(lambda tx: tx.outbox.release(lease)))
        self.expect_fenced(invariant_name, f"finish DELIVERED ({label})",
                           lambda: store.transact(lambda tx: tx.outbox.finish(lease, CommandStatus.DELIVERED)))

    def record_claims(self, claimed: list[ClaimedCommand], owner: str, seconds: float, now: datetime) -> None:
        for command in claimed:
            m = self.model[command.id]
            lease = command.lease
            assert lease.delivery == m.delivery_count + 1, (
                f"delivery_count equals the number of claims: claim of {command.id} handed out delivery "
                f"{lease.delivery} after {m.delivery_count} claims")
            assert (lease.owner, lease.until) == (owner, now + timedelta(seconds=seconds)), "lease matches the claim"
            assert (command.kind, command.payload) == (m.kind, {"id": m.id}), "claimed command matches the row"
            assert lease.token not in self.tokens_issued, "one live lease per command: a token was issued twice"
            m.status = CommandStatus.PROCESSING
            m.lease_owner, m.lease_until, m.token = owner, lease.until, lease.token
            m.last_heartbeat_at = m.updated_at = now
            m.delivery_count += 1
            kind = LeaseEventKind.CLAIM if m.delivery_count == 1 else LeaseEventKind.TAKEOVER
            m.events.append((str(kind), owner, m.delivery_count, now, lease.until))
            self.tokens_issued.append(lease.token)
            self.handed_out.append(lease)

    def claim(self, owner: str, kinds: list[str], limit: int, seconds: float) -> list[ClaimedCommand]:
        """Claim and check the result against the model: how many per kind, which ones, in what order."""
        now = self.now()
        claimed = self.store.transact(
            lambda tx: tx.outbox.claim(owner=owner, kinds=kinds, limit=limit, lease_seconds=seconds))
        ids = [c.id for c in claimed]
        assert len(ids) == len(set(ids)), f"one live lease per command: {ids} claimed twice in one batch"
        for command_id in ids:
            assert command_id in self.model, f"claimed an unknown command {command_id}"
            status = self.model[command_id].status
            assert status not in TERMINAL, f"terminal commands never change: {command_id} ({status}) was claimed"
            assert self.model[command_id].claimable(now), (
                f"one live lease per command: {command_id} was claimed while not claimable "
                f"({status}, lease until {self.model[command_id].lease_until}, now {now})")
        due_by_kind = {kind: [m for m in self.model.values() if m.kind == kind and m.claimable(now)]
                       for kind in sorted(set(kinds))}
        counts = {kind: sum(1 for i in ids if self.model[i].kind == kind) for kind in due_by_kind}
        wanted = [fair_counts(list(due_by_kind), {k: len(v) for k, v in due_by_kind.items()}, limit, start)
                  for start in range(len(due_by_kind))]
        assert counts in wanted, (
            f"fair claim of {limit} over {({k: len(v) for k, v in due_by_kind.items()})} claimable commands took "
            f"{counts}; a fair share per kind from some starting kind is one of {wanted}")
        for kind, due in due_by_kind.items():
            got = [self.model[i] for i in ids if self.model[i].kind == kind]
            left = [m for m in due if m.id not in ids]
            if got and left:
                assert max(m.claim_order() for m in got) <= min(m.claim_order() for m in left), (
                    "claim order: expired leases first, then the longest due")
        taken_over = {c.id: self.model[c.id].token for c in claimed
                      if self.model[c.id].status is CommandStatus.PROCESSING}
        previous = [lease for lease in self.handed_out if taken_over.get(lease.command_id) == lease.token]
        self.record_claims(claimed, owner, seconds, now)
        for lease in previous:
            self.try_every_op("no stale write lands", lease, "holder before a takeover")
        return claimed

    # ── rules: producer ──
    @initialize(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=4), owner=st.sampled_from(WORKERS),
                limit=st.integers(0, 3), seconds=LEASE_SECONDS)
    def start(self, kinds: list[str], owner: str, limit: int, seconds: float) -> None:
        """Some commands due now, some of them claimed: every example starts with leases to play with
        (swarm testing may disable ``claim_batch`` for a whole example)."""
        for kind in kinds:
            self.enqueue(kind, 0)
        if limit:
            self.claim(owner, list(KINDS), limit, seconds)

    @precondition(lambda self: len(self.model) < MAX_COMMANDS)
    @rule(kind=st.sampled_from(KINDS), delay=st.sampled_from([0, 0, 20]))
    def enqueue(self, kind: str, delay: int) -> None:
        command_id = f"c{len(self.model) + 1}"
        now = self.now()
        available_at = now + timedelta(seconds=delay)
        self.store.transact(lambda tx: tx.outbox.insert(command_id=command_id, kind=kind,
                                                         payload={"id": command_id}, available_at=available_at))
        self.model[command_id] = Model(id=command_id, kind=kind, status=CommandStatus.PENDING,
                                       available_at=available_at, created_at=now, updated_at=now)

    # ── rules: time ──
    @rule(seconds=st.sampled_from([1.0, 4.0, 31.0, 100.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: any(d > self.now() for d in self.live_deadlines()))
    @rule(offset=st.sampled_from([timedelta(microseconds=-1), timedelta(0)]))
    def advance_to_a_deadline(self, offset: timedelta) -> None:
        """To the earliest future lease deadline, or one microsecond (the stored precision) before it: the
        edge where claim and reconcile must switch from refusing to accepting."""
        now = self.now()
        target = min(d for d in self.live_deadlines() if d > now) + offset
        if target > now:
            self.clock.advance((target - now).total_seconds())

    # ── rules: workers ──
    @rule(owner=st.sampled_from(WORKERS), kinds=st.sampled_from([["j", "k"], ["k", "j", "k"], ["k"], ["j"]]),
          limit=st.integers(1, 4), seconds=LEASE_SECONDS)
    def claim_batch(self, owner: str, kinds: list[str], limit: int, seconds: float) -> None:
        self.claim(owner, kinds, limit, seconds)

    @precondition(lambda self: bool(self.live_deadlines()))
    @rule(owner=st.sampled_from(WORKERS), seconds=LEASE_SECONDS)
    def takeover(self, owner: str, seconds: float) -> None:
        """A claim after expiry: when no lease has expired yet, the clock first moves exactly to the earliest
        deadline (``lease_until <= now`` is expired). Every expired lease is taken over, and ``claim`` then
        checks that each previous holder is fenced."""
        now = self.now()
        if not any(m.status is CommandStatus.PROCESSING and m.claimable(now) for m in self.model.values()):
            self.clock.advance((min(self.live_deadlines()) - now).total_seconds())
            now = self.now()
        expired = {m.id for m in self.model.values() if m.status is CommandStatus.PROCESSING and m.claimable(now)}
        assert expired, f"the clock did not reach the earliest deadline {min(self.live_deadlines())}: now {now}"
        claimed = self.claim(owner, list(KINDS), MAX_COMMANDS, seconds)
        assert expired <= {c.id for c in claimed}, "takeover: an expired lease was not taken over"

    @precondition(lambda self: bool(self.handed_out))
    @rule(data=st.data(), seconds=LEASE_SECONDS, record=st.booleans())
    def heartbeat(self, data: st.DataObject, seconds: float, record: bool) -> None:
        """Renew a lease once held: the current one is extended, any other is refused."""
        lease = self.draw_lease(data)
        if not self.is_current(lease):
            self.expect_fenced("no stale write lands", f"renew with a stale lease of {lease.command_id}",
                               lambda: self.store.transact(lambda tx: tx.outbox.renew(lease, lease_seconds=seconds)))
            return
        now = self.now()
        renewed = self.store.transact(lambda tx: tx.outbox.renew(lease, lease_seconds=seconds, record=record))
        assert renewed == replace(lease, until=now + timedelta(seconds=seconds)), "renew returns the same lease, later"
        m = self.model[lease.command_id]
        m.lease_until, m.last_heartbeat_at, m.updated_at = renewed.until, now, now
        if record:
            m.events.append((str(LeaseEventKind.HEARTBEAT), lease.owner, lease.delivery, now, renewed.until))
        self.handed_out.append(renewed)

    @precondition(lambda self: bool(self.handed_out))
    @rule(data=st.data(), status=st.sampled_from([CommandStatus.DELIVERED, CommandStatus.FAILED]))
    def finish(self, data: st.DataObject, status: CommandStatus) -> None:
        lease = self.draw_lease(data)
        error = "boom" if status is CommandStatus.FAILED else None
        if not self.is_current(lease):
            self.expect_fenced("no stale write lands", f"finish {status} with a stale lease of {lease.command_id}",
                               lambda: self.store.transact(lambda tx: tx.outbox.finish(lease, status, error)))
            return
        now = self.now()
        self.store.transact(lambda tx: tx.outbox.finish(lease, status, error))
        self.finished(lease, status, error, now)

    def finished(self, lease: Lease, status: CommandStatus, error: str | None, now: datetime) -> None:
        m = self.model[lease.command_id]
        m.status, m.finished_at, m.last_error = status, now, error
        m.clear_lease(now)
        kind = LeaseEventKind.DELIVER if status is CommandStatus.DELIVERED else LeaseEventKind.FAIL
        m.events.append((str(kind), lease.owner, lease.delivery, now, None))

    @precondition(lambda self: bool(self.handed_out))
    @rule(data=st.data())
    def finish_batch(self, data: st.DataObject) -> None:
        """Batched DELIVERED finish of leases of distinct commands, current and stale mixed.

        One lease per command, as one worker's batch holds them. (``finish_commands`` matches what it
        delivered by command id alone, so a batch holding a stale and then the current lease of one command
        reports the stale one delivered and records its owner and delivery in history; not exercised here.)
        """
        by_command: dict[str, Lease] = {}
        for lease in data.draw(st.lists(st.sampled_from(self.handed_out), min_size=1, max_size=4), label="leases"):
            by_command.setdefault(lease.command_id, lease)
        leases = list(by_command.values())
        expected = [self.is_current(lease) for lease in leases]
        before = self.snapshot()
        now = self.now()
        outcome = self.store.transact(lambda tx: tx.outbox.finish_many(leases))
        assert outcome == expected, f"no stale write lands: finish_commands reported {outcome}, expected {expected}"
        if not any(expected):
            assert self.snapshot() == before, "no stale write lands: a batch of stale leases changed the database"
        for lease, ok in zip(leases, expected, strict=True):
            if ok:
                self.finished(lease, CommandStatus.DELIVERED, None, now)

    @precondition(lambda self: bool(self.handed_out))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Graceful stop: the command is given back PENDING, due now."""
        lease = self.draw_lease(data)
        if not self.is_current(lease):
            self.expect_fenced("no stale write lands", f"release with a stale lease of {lease.command_id}",
                               lambda: self.store.transact(lambda tx: tx.outbox.release(lease)))
            return
        now = self.now()
        self.store.transact(lambda tx: tx.outbox.release(lease))
        m = self.model[lease.command_id]
        m.status, m.available_at = CommandStatus.PENDING, now
        m.clear_lease(now)
        m.events.append((str(LeaseEventKind.RELEASE), lease.owner, lease.delivery, now, None))
        self.try_every_op("no stale write lands", lease, "holder after its release")

    @precondition(lambda self: bool(self.stale_leases()))
    @rule(data=st.data(), op=st.sampled_from(["renew", "renew-quietly", "deliver", "fail", "release"]))
    def stale_write(self, data: st.DataObject, op: str) -> None:
        """A worker retries a write with a lease it once held that is no longer current."""
        stale = self.stale_leases()
        # Mostly the dangerous case: the command is live again under someone else's lease.
        live = [lease for lease in stale if self.model[lease.command_id].status is CommandStatus.PROCESSING]
        if live and data.draw(st.integers(0, 3), label="any stale lease") > 0:
            stale = live
        lease = data.draw(st.sampled_from(stale), label="stale lease")
        calls: dict[str, Callable[[UnitOfWork], object]] = {
            "renew": lambda tx: tx.outbox.renew(lease, lease_seconds=90.0),
            "renew-quietly": lambda tx: tx.outbox.renew(lease, lease_seconds=90.0, record=False),
            "deliver": lambda tx: tx.outbox.finish(lease, CommandStatus.DELIVERED),
            "fail": lambda tx: tx.outbox.finish(lease, CommandStatus.FAILED, "late"),
            "release": lambda tx: tx.outbox.release(lease),
        }
        self.expect_fenced("no stale write lands", f"{op} with a stale lease of {lease.command_id}",
                           lambda: self.store.transact(calls[op]))

    @precondition(lambda self: bool(self.handed_out))
    @rule(data=st.data(), seconds=LEASE_SECONDS,
          finish=st.sampled_from([None, None, CommandStatus.DELIVERED, CommandStatus.FAILED]))
    def fenced_unit(self, data: st.DataObject, seconds: float, finish: CommandStatus | None) -> None:
        """A child row, then the fence (renew or finish), in one transaction: all of it lands or none."""
        lease = self.draw_lease(data)
        m = self.model[lease.command_id]
        context = CommandContext(self.store, ClaimedCommand(id=m.id, kind=m.kind, payload={"id": m.id}, lease=lease),
                                 lease_seconds=seconds)
        error = "boom" if finish is CommandStatus.FAILED else None

        def write_child(tx: FencedUnit) -> None:
            raw(tx, "INSERT INTO lease_machine_children (command_id, delivery) VALUES (?, ?)",
                (lease.command_id, lease.delivery))

        def run() -> None:
            context.fenced(write_child, name="test.lease-machine.unit", finish=finish, error=error)

        if not self.is_current(lease):
            self.expect_fenced("no stale write lands", f"a fenced unit with a stale lease of {lease.command_id}", run)
            assert context.lost, "a fenced-out unit marks its context lost"
            return
        now = self.now()
        run()
        m.children.append(lease.delivery)
        if finish is not None:
            self.finished(lease, finish, error, now)
            return
        renewed = context.lease
        assert renewed == replace(lease, until=now + timedelta(seconds=seconds)), "the fence renewed the lease"
        m.lease_until, m.last_heartbeat_at, m.updated_at = renewed.until, now, now
        m.events.append((str(LeaseEventKind.HEARTBEAT), lease.owner, lease.delivery, now, renewed.until))
        self.handed_out.append(renewed)

    # ── rules: operator ──
    @rule(data=st.data(), wait=st.booleans())
    def reconcile(self, data: st.DataObject, wait: bool) -> None:
        """Only an expired PROCESSING lease returns to PENDING; an active one raises LeaseActive.

        With ``wait`` the operator first waits (the clock moves) exactly until an active lease's deadline.
        """
        command_id = self.draw_command(data)
        m = self.model.get(command_id)
        if wait and m is not None and m.status is CommandStatus.PROCESSING:
            assert m.lease_until is not None
            if m.lease_until > self.now():
                self.clock.advance((m.lease_until - self.now()).total_seconds())
        before = self.snapshot()
        now = self.now()
        expected: type[Exception] | None
        if m is None:
            expected = NotFound
        elif m.status is CommandStatus.PROCESSING:
            expected = None if m.claimable(now) else LeaseActive
        else:
            expected = Conflict
        try:
            record = self.store.transact(lambda tx: tx.outbox.reconcile(command_id))
        except (NotFound, Conflict) as refused:
            assert expected is not None and type(refused) is expected, (
                f"reconcile only an expired lease: {command_id} raised {type(refused).__name__}, "
                f"expected {expected.__name__ if expected else 'success'}")
            if isinstance(refused, LeaseActive):
                assert m is not None and refused.lease_until == m.lease_until, "LeaseActive carries lease_until"
            assert self.snapshot() == before, f"reconcile only an expired lease: refused on {command_id}, changed rows"
            return
        assert expected is None and m is not None, (
            f"reconcile only an expired lease: {command_id} was reconciled, expected "
            f"{expected.__name__ if expected else '?'} (lease until {m.lease_until if m else None}, now {now})")
        holder = [lease for lease in self.handed_out if lease.token == m.token]
        m.status, m.available_at = CommandStatus.PENDING, now
        m.clear_lease(now)
        m.events.append((str(LeaseEventKind.RECONCILE), None, m.delivery_count, now, None))
        assert record == m.record(), "reconcile returns the command as it now is"
        for lease in holder:
            self.try_every_op("no stale write lands", lease, "holder after a reconcile")

    @rule(data=st.data(), error=st.sampled_from([None, "operator abort"]))
    def abort(self, data: st.DataObject, error: str | None) -> None:
        """Abort a PENDING or PROCESSING command; it fences the holder. Terminal or absent: no change."""
        command_id = data.draw(st.sampled_from([*sorted(self.model), MISSING]), label="command")
        before = self.snapshot()
        now = self.now()
        m = self.model.get(command_id)
        abortable = m is not None and m.status in (CommandStatus.PENDING, CommandStatus.PROCESSING)
        done = self.store.transact(lambda tx: tx.outbox.abort(command_id, error))
        status = m.status if m is not None else "absent"
        assert not done or abortable, f"terminal commands never change: abort of {command_id} ({status}) succeeded"
        assert done or not abortable, f"abort fences the holder: abort of {command_id} ({status}) was refused"
        if not abortable:
            assert self.snapshot() == before, f"terminal commands never change: abort of {command_id} changed rows"
            return
        assert m is not None
        holder = [lease for lease in self.handed_out if lease.token == m.token]
        m.status, m.finished_at, m.last_error = CommandStatus.ABORTED, now, error
        m.clear_lease(now)
        m.events.append((str(LeaseEventKind.ABORT), None, m.delivery_count, now, None))
        for lease in holder:
            self.try_every_op("abort fences the holder", lease, "holder after an abort")

    # ── invariants ──
    @invariant()
    def store_matches_the_model(self) -> None:
        def read(tx: UnitOfWork) -> dict[str, Any]:
            return {
                "records": {i: tx.outbox.get(i) for i in self.model},
                "events": {i: tx.outbox.lease_events(i) for i in self.model},
                "tokens": dict(raw(tx, "SELECT id, lease_token FROM commands")),
                "rows": {r[0]: r for r in raw(tx, "SELECT * FROM commands")},
                "children": raw(tx, "SELECT command_id, delivery FROM lease_machine_children ORDER BY seq"),
                "orphans": raw(tx, "SELECT count(*) FROM lease_events WHERE command_id NOT IN "
                                   "(SELECT id FROM commands)")[0][0],
            }

        seen = self.store.read(read)
        assert set(seen["tokens"]) == set(self.model), f"commands in the store {sorted(seen['tokens'])}"
        assert seen["orphans"] == 0, "lease history matches the model: events of unknown commands"
        for command_id, m in self.model.items():
            record: CommandRecord | None = seen["records"][command_id]
            token = seen["tokens"][command_id]
            events = seen["events"][command_id]

            # one live lease per command; the current token is the latest claim's
            # (renewals keep the token, so leases are counted by the claim that issued them: its delivery)
            live = {lease.delivery for lease in self.handed_out if lease.command_id == command_id
                    and token is not None and lease.token == token}
            assert len(live) <= 1, f"one live lease per command: deliveries {sorted(live)} of {command_id} are live"
            assert live <= {m.delivery_count}, (
                f"current token is the latest claim's: delivery {sorted(live)} of {command_id} is live, "
                f"the latest claim is delivery {m.delivery_count}")
            assert token == m.token, (f"current token is the latest claim's: {command_id} holds "
                                      f"{'no token' if token is None else 'another token'}")
            assert (token is not None) == (m.status is CommandStatus.PROCESSING), (
                f"one live lease per command: {command_id} is {m.status} with token present={token is not None}")

            # delivery_count equals the number of claims (claim + takeover events)
            claims = [e for e in events if e.event in (LeaseEventKind.CLAIM, LeaseEventKind.TAKEOVER)]
            assert record is not None and record.delivery_count == len(claims) == m.delivery_count, (
                f"delivery_count equals the number of claims: {command_id} has delivery_count "
                f"{record.delivery_count if record else None}, {len(claims)} claim events, {m.delivery_count} claims")
            assert [e.delivery for e in claims] == list(range(1, len(claims) + 1)), (
                f"delivery_count equals the number of claims: deliveries of {command_id} are "
                f"{[e.delivery for e in claims]}")

            # lease history: append-only, then exactly what the model expects
            rows = [(e.seq, e.event, e.owner, e.delivery, e.at, e.lease_until) for e in events]
            previous = self.seen_events.get(command_id, [])
            assert rows[:len(previous)] == previous, f"lease history is append-only: {command_id} history rewritten"
            self.seen_events[command_id] = rows
            assert [r[1:] for r in rows] == m.events, (
                f"lease history matches the model: {command_id} has {[r[1:4] for r in rows]}, "
                f"expected {[e[:3] for e in m.events]}")

            assert record == m.record(), f"row matches the model: {command_id}\n  store {record}\n  model {m.record()}"

            # terminal commands never change
            if m.status in TERMINAL:
                frozen = self.terminal_rows.setdefault(command_id, (seen["rows"][command_id], len(rows)))
                assert (seen["rows"][command_id], len(rows)) == frozen, (
                    f"terminal commands never change: {command_id} ({m.status}) changed after it ended")

        children = [(i, d) for i, m in self.model.items() for d in m.children]
        assert sorted(seen["children"]) == sorted(children), (
            f"no stale write lands: fenced child rows are {seen['children']}, expected {children}")


# ── runs ──

COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}
DEFAULT = settings(max_examples=60, stateful_step_count=50, **COMMON)  # 600 and longer runs under soak
SOAK = settings(max_examples=600, stateful_step_count=120, **COMMON)
# Proofs that the machine can fail: no database (a stored failing example must not leak into the real runs)
# and no shrinking (the first failure found is enough to read the invariant's name).
BROKEN = settings(max_examples=300, stateful_step_count=40, database=None, report_multiple_bugs=False,
                  phases=[Phase.generate], **COMMON)


def sqlite_backends(names: list[str]) -> list[str]:
    """The SQLite backends among ``names`` that ``FENCEPOST_TEST_BACKENDS`` selects."""
    return [name for name in names if name in selected_backends()]


@pytest.mark.parametrize("backend_name", sqlite_backends(["sqlite-wal"]))
def test_the_lease_protocol_keeps_its_invariants(backend_name: str) -> None:
    run_state_machine_as_test(lambda: LeaseProtocol(backend_name), settings=DEFAULT)


@pytest.mark.soak
@pytest.mark.parametrize("backend_name", sqlite_backends(["sqlite-wal", "sqlite-delete"]))
def test_the_lease_protocol_keeps_its_invariants_soak(backend_name: str) -> None:
    run_state_machine_as_test(lambda: LeaseProtocol(backend_name), settings=SOAK)


@pytest.mark.parametrize(("break_query", "invariant_name"), [
    pytest.param(("renew_lease", "AND lease_token = :token ", ""), "no stale write lands",
                 id="renew-ignores-the-token"),
    pytest.param(("claim_commands", "delivery_count = delivery_count + 1", "delivery_count = max(delivery_count, 1)"),
                 "delivery_count equals the number of claims", id="takeover-keeps-delivery-count"),
    pytest.param(("reconcile_command", " AND lease_until <= :now", ""), "reconcile only an expired lease",
                 id="reconcile-steals-an-active-lease"),
    pytest.param(("release_command", "AND lease_token = :token ", ""), "no stale write lands",
                 id="release-ignores-the-token"),
])
def test_the_machine_finds_a_broken_store(break_query: tuple[str, str, str], invariant_name: str) -> None:
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(lambda: LeaseProtocol(break_query=break_query), settings=BROKEN)
    assert str(caught.value).startswith(invariant_name), f"the violation found was another one: {caught.value}"
