"""Worker-level outbox contract on every backend (sqlite-wal, sqlite-delete, postgres).

The store contract (``tests/store``) proves each statement; this suite proves what a ``Worker`` does with
them: claim, heartbeat, takeover after expiry, fenced stale writes raising ``LeaseLost``, operator reconcile
and abort, release on graceful stop, failures and delays. Every test runs unchanged on every backend, so a
behaviour present on one backend and missing on another fails here.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest
from outbox_contract_support import KIND, OTHER, Running, command, exists, history, insert, worker

from fencepost.core.errors import (
    FencepostError,
    IntegrityViolation,
    LeaseActive,
    LeaseLost,
    RecoverableFinalization,
    StoreUnavailable,
)
from fencepost.core.statuses import CommandStatus
from fencepost.outbox import CommandContext
from fencepost.store import Store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import StoreBackend
from helpers.waiting import wait_until


def test_a_worker_claims_only_its_kinds_and_delivers_each_batch_in_one_transaction(
        store: Store, backend: StoreBackend) -> None:
    seen: list[tuple[str, int, str]] = []
    for i in range(3):
        insert(store, f"c{i}")
    insert(store, "c-other", kind=OTHER)
    w = worker(store, backend, lambda ctx: seen.append((ctx.command.id, ctx.delivery, ctx.lease.owner)),
               worker_id="w-a", batch_size=2, lease=backend.long_lease)
    assert [w.run_once(), w.run_once(), w.run_once()] == [2, 1, 0]
    assert sorted(seen) == [("c0", 1, "w-a"), ("c1", 1, "w-a"), ("c2", 1, "w-a")]
    assert (w.stats.claimed, w.stats.delivered, w.stats.lost) == (3, 3, 0)
    for i in range(3):
        record = command(store, f"c{i}")
        assert (record.status, record.delivery_count, record.lease_owner) == (CommandStatus.DELIVERED, 1, None)
        assert history(store, f"c{i}") == [("claim", "w-a", 1), ("deliver", "w-a", 1)]
    assert command(store, "c-other").status is CommandStatus.PENDING
    # The first batch's two deliveries were one transaction: one instant of the store's clock.
    delivered_at = {c: next(e.at for e in store.read(lambda tx, c=c: tx.outbox.lease_events(c)) if e.event == "deliver")
                    for c in ("c0", "c1")}
    assert delivered_at["c0"] == delivered_at["c1"]


def _a_backlog_and_ten_of_another(tx: UnitOfWork) -> None:
    """1,000 commands of ``KIND`` and 10 of ``OTHER``."""
    for i in range(1000):
        tx.outbox.insert(command_id=f"a{i:04d}", kind=KIND, payload={})
    for i in range(10):
        tx.outbox.insert(command_id=f"b{i}", kind=OTHER, payload={})


def test_a_small_kind_is_not_starved_by_a_backlog_of_another(store: Store, backend: StoreBackend) -> None:
    # Issue 10's proof: 1,000 commands of kind A and 10 of kind B, one worker with batch and concurrency
    # 10: every B is handled within the first two claim cycles.
    seen: list[str] = []
    store.transact(_a_backlog_and_ten_of_another)
    w = worker(store, backend, lambda ctx: seen.append(ctx.command.kind), worker_id="w-fair", batch_size=10,
               lease=backend.long_lease, kinds=(KIND, OTHER))
    assert [w.run_once(), w.run_once()] == [10, 10]
    assert seen.count(OTHER) == 10, seen


# A real worker also serves built-in kinds that are usually empty (deliveries, workflow tasks, rehearsals): with
# them, shares were computed over every served kind and an empty kind handed its turn to the kind after it, so B
# was spread over five claims at batch 10, and got one claim in six at batch 1 (an issue-10 re-check trial).
EMPTY_KINDS = ("a.empty", "contract.empty", "host.invoke:fencepost.deliver@1", "rehearsal.attempt")


@pytest.mark.parametrize("batch", [10, 1])
def test_kinds_with_work_share_claims_evenly_whatever_empty_kinds_the_worker_also_serves(
        store: Store, backend: StoreBackend, batch: int) -> None:
    seen: list[str] = []
    store.transact(_a_backlog_and_ten_of_another)
    w = worker(store, backend, lambda ctx: seen.append(ctx.command.kind), worker_id="w-fair", batch_size=batch,
               lease=backend.long_lease, kinds=(KIND, OTHER, *EMPTY_KINDS))
    if batch == 10:
        assert [w.run_once(), w.run_once()] == [10, 10]
        assert seen.count(OTHER) == 10, seen  # every B within the first two claim cycles
    else:
        assert [w.run_once() for _ in range(10)] == [1] * 10
        assert seen.count(OTHER) == 5 and seen.count(KIND) == 5, seen  # one claim each, in turn
        assert all(seen[i] != seen[i + 1] for i in range(9)), seen


def test_the_heartbeat_keeps_a_long_handler_s_lease_alive(store: Store, backend: StoreBackend) -> None:
    lease = backend.short_lease
    rival = backend.open()
    rival_claims: list[int] = []

    def long_handler(ctx: CommandContext) -> None:
        for _ in range(4):  # twice the lease in all, a heartbeat every half lease
            backend.advance(lease / 2)
            w.heartbeat.beat()  # what the heartbeat thread does every lease/3
            assert not ctx.lost
            rival_claims.append(len(rival.transact(lambda tx: tx.outbox.claim(
                owner="rival", kinds=[KIND], limit=10, lease_seconds=lease))))

    insert(store, "c1")
    w = worker(store, backend, long_handler, worker_id="w-a", lease=lease)
    assert w.run_once() == 1
    assert rival_claims == [0, 0, 0, 0], "an active lease was handed to another worker"
    assert (w.stats.delivered, w.stats.lost) == (1, 0)
    events = store.read(lambda tx: tx.outbox.lease_events("c1"))
    assert [e.event for e in events] == ["claim"] + ["heartbeat"] * 4 + ["deliver"]
    for e in events[:-1]:
        assert e.lease_until is not None
        assert abs((e.lease_until - e.at) - timedelta(seconds=lease)) < timedelta(milliseconds=1)
    assert [e.at for e in events] == sorted(e.at for e in events)


def test_an_expired_lease_is_taken_over_and_the_stale_worker_is_fenced(store: Store, backend: StoreBackend) -> None:
    stale: dict[str, object] = {}

    def slow_then_stale(ctx: CommandContext) -> None:
        if ctx.delivery == 1:
            backend.expire()  # worker A stalls past its lease ...
            assert b.run_once() == 1  # ... and worker B takes the command over and finishes it
            stale["renewed"] = ctx.heartbeat()

            def side_effect(tx: UnitOfWork) -> None:
                tx.outbox.insert(command_id="side-a", kind=OTHER, payload={"from": "stale"})

            ctx.fenced(side_effect, name="contract.stale")  # must raise LeaseLost and persist nothing

    insert(store, "c1")
    a = worker(store, backend, slow_then_stale, worker_id="w-a")
    b = worker(store, backend, slow_then_stale, worker_id="w-b")
    assert a.run_once() == 1
    assert stale == {"renewed": False}
    assert (a.stats.delivered, a.stats.lost) == (0, 1)
    assert (b.stats.delivered, b.stats.lost) == (1, 0)
    record = command(store, "c1")
    assert (record.status, record.delivery_count) == (CommandStatus.DELIVERED, 2)
    assert history(store, "c1") == [("claim", "w-a", 1), ("takeover", "w-b", 2), ("deliver", "w-b", 2)]
    assert not exists(store, "side-a"), "a write under a stale lease was persisted"


def test_a_stale_worker_refused_at_settlement_after_a_takeover_reports_a_lost_lease(
        store: Store, backend: StoreBackend, caplog: pytest.LogCaptureFixture) -> None:
    """A handler whose settlement is refused because another delivery took the command over and settled it
    (the host's ``RecoverableFinalization``, "Invocation is no longer running") lost its lease: it says so, not
    "outcome not recorded; the lease is left to expire" when there is no lease left (a new-user trial)."""

    def stale_settlement(ctx: CommandContext) -> None:
        if ctx.delivery == 1:
            backend.expire()
            assert b.run_once() == 1  # B takes it over and settles it
            raise RecoverableFinalization("Invocation is no longer running")

    insert(store, "c1")
    a = worker(store, backend, stale_settlement, worker_id="w-a")
    b = worker(store, backend, stale_settlement, worker_id="w-b")
    with caplog.at_level(logging.INFO, logger="fencepost.worker"):
        assert a.run_once() == 1
    seen = [getattr(r, "event", None) for r in caplog.records if r.name == "fencepost.worker"]
    assert "lease_lost" in seen and "command_abandoned" not in seen, seen
    assert (a.stats.lost, b.stats.delivered) == (1, 1)
    # The taker has settled it, so no lease owner is left to name: the log says what it is now instead of
    # ``taken_by=None`` (a new-user trial).
    (lost,) = [r for r in caplog.records if getattr(r, "event", None) == "lease_lost"]
    assert (lost.delivery_now, lost.status_now) == (2, "DELIVERED")  # type: ignore[attr-defined]
    assert not hasattr(lost, "taken_by")


def test_a_stale_finish_after_takeover_raises_lease_lost(store: Store, backend: StoreBackend) -> None:
    insert(store, "c1")
    dead = store.transact(lambda tx: tx.outbox.claim(owner="dead", kinds=[KIND], limit=1,
                                                     lease_seconds=backend.short_lease))[0]
    backend.expire()
    deliveries: list[int] = []
    w = worker(store, backend, lambda ctx: deliveries.append(ctx.delivery), worker_id="w-b")
    assert w.run_once() == 1
    assert deliveries == [2]
    for stale_write in (lambda tx: tx.outbox.finish(dead.lease, CommandStatus.FAILED, "stale"),
                        lambda tx: tx.outbox.renew(dead.lease, lease_seconds=backend.short_lease),
                        lambda tx: tx.outbox.release(dead.lease)):
        with pytest.raises(LeaseLost):
            store.transact(stale_write)
    record = command(store, "c1")
    assert (record.status, record.delivery_count, record.last_error) == (CommandStatus.DELIVERED, 2, None)
    assert history(store, "c1") == [("claim", "dead", 1), ("takeover", "w-b", 2), ("deliver", "w-b", 2)]


def test_reconcile_refuses_an_active_lease_and_returns_an_expired_one_to_pending(
        store: Store, backend: StoreBackend) -> None:
    refused: list[str] = []

    def handler(ctx: CommandContext) -> None:
        if ctx.command.id == "c-active":
            with pytest.raises(LeaseActive) as caught:
                store.transact(lambda tx: tx.outbox.reconcile("c-active"))
            refused.append(str(caught.value))

    insert(store, "c-active")
    w = worker(store, backend, handler, worker_id="w-a", lease=backend.long_lease)
    assert w.run_once() == 1
    assert len(refused) == 1 and "active" in refused[0]
    assert command(store, "c-active").status is CommandStatus.DELIVERED

    insert(store, "c-dead")
    store.transact(lambda tx: tx.outbox.claim(owner="dead", kinds=[KIND], limit=1,
                                              lease_seconds=backend.short_lease))
    backend.expire()
    reconciled = store.transact(lambda tx: tx.outbox.reconcile("c-dead"))
    assert (reconciled.status, reconciled.lease_owner, reconciled.delivery_count) == (CommandStatus.PENDING, None, 1)
    assert w.run_once() == 1
    record = command(store, "c-dead")
    assert (record.status, record.delivery_count) == (CommandStatus.DELIVERED, 2)
    assert history(store, "c-dead") == [("claim", "dead", 1), ("reconcile", None, 1), ("takeover", "w-a", 2),
                                        ("deliver", "w-a", 2)]


def test_abort_fences_the_running_worker(store: Store, backend: StoreBackend) -> None:
    outcome: dict[str, object] = {}

    def aborted_meanwhile(ctx: CommandContext) -> None:
        assert store.transact(lambda tx: tx.outbox.abort(ctx.command.id, "operator abort"))
        outcome["renewed"] = ctx.heartbeat()

        def side_effect(tx: UnitOfWork) -> None:
            tx.outbox.insert(command_id="side-aborted", kind=OTHER, payload={"from": "aborted"})

        ctx.fenced(side_effect, name="contract.after-abort")

    insert(store, "c1")
    insert(store, "c-pending")
    assert store.transact(lambda tx: tx.outbox.abort("c-pending", "not needed"))
    w = worker(store, backend, aborted_meanwhile, worker_id="w-a", lease=backend.long_lease)
    assert w.run_once() == 1, "an aborted PENDING command was claimed"
    assert w.run_once() == 0
    assert outcome == {"renewed": False}
    assert (w.stats.delivered, w.stats.lost, w.stats.failed) == (0, 1, 0)
    record = command(store, "c1")
    assert (record.status, record.last_error, record.lease_owner) == (CommandStatus.ABORTED, "operator abort", None)
    assert history(store, "c1") == [("claim", "w-a", 1), ("abort", None, 1)]
    assert not exists(store, "side-aborted"), "a write after abort was persisted"
    assert command(store, "c-pending").status is CommandStatus.ABORTED
    assert not store.transact(lambda tx: tx.outbox.abort("c1", "again")), "a terminal command was aborted twice"


def test_a_stop_past_its_grace_period_releases_the_batch_for_the_next_worker(
        store: Store, backend: StoreBackend) -> None:
    ran: list[tuple[str, str, int]] = []
    both_running = threading.Barrier(2, timeout=10)

    def stop_midway(ctx: CommandContext) -> None:
        ran.append((ctx.command.id, ctx.lease.owner, ctx.delivery))
        if ctx.lease.owner == "w-a":
            both_running.wait()  # both commands run on their slots ...
            a.request_stop(0.0)  # ... when a stop with no grace period comes (SIGTERM with --grace-period 0)
            ctx.check()  # each raises StopRequested at its next check, and the worker releases the lease

    insert(store, "c1")
    insert(store, "c2", delay=0.0)
    a = worker(store, backend, stop_midway, worker_id="w-a", batch_size=2, lease=backend.long_lease)
    assert a.run_once() == 2
    assert a.stats.released == 2 and a.stats.delivered == 0
    for c in ("c1", "c2"):
        record = command(store, c)
        assert (record.status, record.lease_owner, record.lease_until) == (CommandStatus.PENDING, None, None)
        assert history(store, c) == [("claim", "w-a", 1), ("release", "w-a", 1)]
    assert a.run_once() == 0, "a stopping worker claims nothing more"
    b = worker(store, backend, stop_midway, worker_id="w-b", batch_size=2, lease=backend.long_lease)
    assert b.run_once() == 2  # released commands are due at once, no lease to wait for
    for c in ("c1", "c2"):
        assert command(store, c).status is CommandStatus.DELIVERED
        assert history(store, c)[-2:] == [("takeover", "w-b", 2), ("deliver", "w-b", 2)]
    assert sorted(ran) == [("c1", "w-a", 1), ("c1", "w-b", 2), ("c2", "w-a", 1), ("c2", "w-b", 2)]


def test_within_its_grace_period_a_running_command_finishes(store: Store, backend: StoreBackend) -> None:
    def stop_then_finish(ctx: CommandContext) -> None:
        w.request_stop(60.0)  # SIGTERM with a grace period: the command goes on ...
        ctx.check()  # ... its checks pass, and it returns normally

    insert(store, "c1")
    insert(store, "c2", delay=0.0)
    w = worker(store, backend, stop_then_finish, worker_id="w-a", batch_size=1, lease=backend.long_lease)
    assert w.run_once() == 1
    assert w.stats.delivered == 1 and w.stats.released == 0
    assert w.run_once() == 0, "a stopping worker claims nothing more"
    assert [command(store, c).status for c in ("c1", "c2")] == [CommandStatus.DELIVERED, CommandStatus.PENDING]


def test_a_failing_handler_fails_only_its_command(store: Store, backend: StoreBackend) -> None:
    def maybe_fail(ctx: CommandContext) -> None:
        if ctx.command.id == "c-bad":
            raise ValueError("bad payload")

    insert(store, "c-bad")
    insert(store, "c-good")
    w = worker(store, backend, maybe_fail, worker_id="w-a", lease=backend.long_lease)
    assert w.run_once() == 2
    assert (w.stats.failed, w.stats.delivered) == (1, 1)
    bad = command(store, "c-bad")
    assert (bad.status, bad.last_error, bad.lease_owner) == (CommandStatus.FAILED, "ValueError: bad payload", None)
    assert history(store, "c-bad") == [("claim", "w-a", 1), ("fail", "w-a", 1)]
    assert command(store, "c-good").status is CommandStatus.DELIVERED


def test_a_delayed_command_waits_for_its_available_at(store: Store, backend: StoreBackend) -> None:
    delay = 0.5 if backend.is_postgres else 60.0
    insert(store, "c-later", delay=delay)
    w = worker(store, backend, lambda ctx: None, worker_id="w-a", lease=backend.long_lease)
    assert w.run_once() == 0
    backend.advance(delay + (0.1 if backend.is_postgres else 0.0))
    assert w.run_once() == 1
    assert command(store, "c-later").status is CommandStatus.DELIVERED


def test_the_run_loop_drains_wakes_on_request_and_stops_cleanly(store: Store, backend: StoreBackend) -> None:
    for i in range(25):
        insert(store, f"c{i}")
    handled: list[str] = []
    w = worker(store, backend, lambda ctx: handled.append(ctx.command.id), worker_id="w-loop", batch_size=4,
               lease=backend.long_lease, poll=30.0)
    running = Running(w)
    try:
        wait_until(lambda: len(handled) == 25, what="the queue to drain")
        insert(store, "c-late")
        w.wake()  # an in-process producer wakes the idle worker on every backend
        wait_until(lambda: "c-late" in handled, timeout=10, what="the woken worker to claim the new command")
    finally:
        running.stop()
    assert sorted(handled) == sorted([f"c{i}" for i in range(25)] + ["c-late"])
    assert w.stats.delivered == 26 and w.stats.lost == 0
    counts = store.read(lambda tx: tx.outbox.count_by_status())
    assert counts == {CommandStatus.DELIVERED: 26}


def test_a_worker_that_takes_over_its_own_command_tracks_each_delivery_apart(
        store: Store, backend: StoreBackend) -> None:
    """Break-it finding: the stale delivery's end must not untrack the new delivery of the same command."""
    first_running, release_first = threading.Event(), threading.Event()
    second_running, release_second = threading.Event(), threading.Event()

    def handle(ctx: CommandContext) -> None:
        if ctx.delivery == 1:
            first_running.set()
            release_first.wait(10)
            ctx.check_lease()  # the lease was taken over (by this same worker): LeaseLost
        else:
            second_running.set()
            release_second.wait(10)

    insert(store, "c1")
    w = worker(store, backend, handle, worker_id="w-a", batch_size=2, lease=backend.short_lease, poll=0.01)
    runner = threading.Thread(target=w.run, kwargs={"max_idle_polls": 10_000})
    runner.start()
    try:
        assert first_running.wait(10)
        beat = w.heartbeat.beat
        w.heartbeat.beat = lambda: None  # type: ignore[method-assign]  # a late heartbeat: the lease lapses ...
        backend.expire()
        assert second_running.wait(10), "the worker took its own command over on a free slot"
        w.heartbeat.beat = beat  # type: ignore[method-assign]  # ... and renewals resume
        release_first.set()

        def held() -> list[int]:
            return sorted(ctx.delivery for ctx in w.heartbeat._held.values())

        wait_until(lambda: w.stats.lost == 1 and 1 not in held(), what="the stale delivery to end, lost")
        assert held() == [2], "the stale delivery's end untracked the current one"
        assert w.in_flight == 1
        release_second.set()
        wait_until(lambda: command(store, "c1").status is CommandStatus.DELIVERED, what="delivery 2 to finish")
    finally:
        release_first.set()
        release_second.set()
        w.request_stop(0.0)
        runner.join(30)
    assert [e for e in history(store, "c1") if e[0] != "heartbeat"] == [
        ("claim", "w-a", 1), ("takeover", "w-a", 2), ("deliver", "w-a", 2)]


@pytest.mark.parametrize("error", [StoreUnavailable, IntegrityViolation], ids=["store-unavailable", "other-error"])
def test_a_failed_claim_never_makes_a_batch_that_ran_run_again(
        store: Store, backend: StoreBackend, error: type[FencepostError]) -> None:
    # ADR 0093, from a break-it trial: on SQLite the claim rides on the transaction that completes the batch
    # that just ran. When that claim fails, the completion is committed alone: the batch is not run again after
    # its lease expires. One command at a time, so the second claim is the one riding on c0's completion.
    for i in range(4):
        insert(store, f"c{i}")
    runs: list[tuple[str, int]] = []
    faulty = FaultInjectingStore(store, nth=2, query="claim_commands", error=error)
    w = worker(faulty, backend, lambda ctx: runs.append((ctx.command.id, ctx.delivery)), worker_id="w-claim",
               batch_size=1, lease=backend.short_lease)
    if error is StoreUnavailable:
        w.run(max_idle_polls=3)  # logged; the next claim goes on
        assert sorted(runs) == [(f"c{i}", 1) for i in range(4)], runs
        assert w.stats.claimed == w.stats.delivered == 4
    else:
        with pytest.raises(IntegrityViolation):  # a claim's other errors still reach the caller
            w.run(max_idle_polls=3)
        assert runs == [("c0", 1)]
        assert [command(store, f"c{i}").status for i in range(4)] == [CommandStatus.DELIVERED] + [
            CommandStatus.PENDING] * 3
    assert faulty.fired == 1
    record = command(store, "c0")
    assert (record.status, record.delivery_count) == (CommandStatus.DELIVERED, 1)
    assert history(store, "c0") == [("claim", "w-claim", 1), ("deliver", "w-claim", 1)]


def test_a_second_signal_releases_at_once_a_command_whose_handler_ignores_it(
        store: Store, backend: StoreBackend) -> None:
    # Issue 10 item 1, from a new user's trial: ``fencepost worker`` exits two seconds after a second Ctrl-C
    # whatever still runs. A handler that ignores its interrupt (a provider call in flight) used to keep the
    # worker in its five-second interrupt wait, so the process died holding the lease and its registration.
    insert(store, "c0")
    started = threading.Event()

    def stubborn(ctx: CommandContext) -> None:
        started.set()
        time.sleep(4)  # never looks at ctx.interrupted

    w = worker(store, backend, stubborn, worker_id="w-stubborn", batch_size=1, lease=backend.long_lease)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    assert started.wait(10), "the handler never started"
    w.request_stop()  # the first signal: a grace period of 30 s
    w.interrupt_now()  # the second
    thread.join(timeout=2.0)
    assert not thread.is_alive(), "the worker was still waiting for the handler when the process would exit"
    record = command(store, "c0")
    assert (record.status, record.lease_owner) == (CommandStatus.PENDING, None)
    assert history(store, "c0")[-1] == ("release", "w-stubborn", 1)
    assert w.stats.released == 1 and w.stats.failed == 0 and w.stats.delivered == 0
    assert [r.worker_id for r in store.read(lambda tx: tx.workers.list_workers())] == []


@pytest.mark.parametrize("stored", ["deep", "long-integer", "not-utf8"])
def test_a_payload_that_cannot_be_read_fails_its_command_alone(store: Store, backend: StoreBackend,
                                                               stored: str) -> None:
    """A break-it trial: a command row written past the outbox port with a payload the worker cannot read back
    (nesting past the parser's limit, an integer past Python's digit limit, text that is not UTF-8) failed the
    whole claim at every worker of its kind, forever; the good commands behind it never ran."""
    for i in range(4):
        insert(store, f"good{i}")
    insert(store, "poison")
    text = {"deep": '{"pad": ' + "[" * 990 + "]" * 990 + "}",
            "long-integer": '{"pad": ' + "1" * 5000 + "}"}.get(stored)

    def tamper(tx: UnitOfWork) -> None:
        if text is not None:
            literal = text.replace("'", "''")
            backend.inspect(tx, f"UPDATE commands SET payload = '{literal}' WHERE id = 'poison'")
        elif backend.is_postgres:
            backend.inspect(tx, "UPDATE commands SET payload = convert_from('\\x7b2261223a2280227d'::bytea, "
                                "'UTF8') WHERE id = 'poison'")
        else:  # bytes 0x80 inside a JSON string: valid JSON to SQLite's json_valid, not UTF-8 text
            backend.inspect(tx, "UPDATE commands SET payload = CAST(X'7b2261223a2280227d' AS TEXT) "
                                "WHERE id = 'poison'")

    if stored == "not-utf8" and backend.is_postgres:  # the server refuses such text: the case cannot arise
        with pytest.raises(FencepostError, match="invalid byte sequence"):
            store.transact(tamper)
        return
    store.transact(tamper)
    ran: list[str] = []
    w = worker(store, backend, lambda ctx: ran.append(ctx.command.id), worker_id="w-a", batch_size=10,
               lease=backend.long_lease)
    assert w.run_once() == 5
    assert sorted(ran) == ["good0", "good1", "good2", "good3"]  # the poison's handler never ran
    assert all(command(store, f"good{i}").status is CommandStatus.DELIVERED for i in range(4))
    [(status, deliveries, error)] = store.read(lambda tx: backend.inspect(
        tx, "SELECT status, delivery_count, last_error FROM commands WHERE id = 'poison'"))
    assert (status, deliveries) == ("FAILED", 1) and "payload cannot be read" in error, error
    assert history(store, "poison") == [("claim", "w-a", 1), ("fail", "w-a", 1)]
    if stored != "not-utf8":  # an operator's read of the row shows it, empty and saying why
        record = command(store, "poison")
        assert record.payload == {} and record.unreadable is not None and record.status is CommandStatus.FAILED
    assert (w.stats.delivered, w.stats.failed) == (4, 1)
    assert w.run_once() == 0  # never claimed again


def test_a_failure_message_no_backend_can_store_as_given_fails_the_command_once(store: Store,
                                                                                backend: StoreBackend) -> None:
    """A break-it trial: a handler's error naming a file whose name is not UTF-8 (``os.fsdecode`` gives a lone
    surrogate) made the FAILED write itself fail, and the handler ran again on every delivery until the budget."""
    import os

    insert(store, "c-odd")
    runs: list[int] = []

    def fail(ctx: CommandContext) -> None:
        runs.append(ctx.delivery)
        raise RuntimeError("cannot import " + os.fsdecode(b"report-\xff.csv") + " (NUL \x00 inside)")

    w = worker(store, backend, fail, worker_id="w-a", batch_size=1, lease=backend.long_lease)
    assert w.run_once() == 1
    record = command(store, "c-odd")
    assert (record.status, record.delivery_count, runs) == (CommandStatus.FAILED, 1, [1])
    assert record.last_error == "RuntimeError: cannot import report-\\udcff.csv (NUL \\0 inside)"
    assert w.run_once() == 0
