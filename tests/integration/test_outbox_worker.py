"""The outbox worker on plain commands (no rehearsal): claiming, batch delivery, failures, availability,
heartbeats and the sandbox interrupt when a lease is lost mid-statement."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from fencepost.core.errors import InvalidInput, LeaseLost
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.outbox import CommandContext, FunctionHandler, HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.heartbeat import Heartbeat
from fencepost.outbox.worker import Sweep
from fencepost.rehearsal.scenarios import ScenarioEnv, ScenarioFailed
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from integration.rig import LEASE_SECONDS, Rig, Scenario, copy_example, write_package


def _insert(rig: Rig, command_id: str, kind: str = "test.echo", payload: dict[str, Any] | None = None,
            delay: float = 0.0) -> None:
    def unit(tx: UnitOfWork) -> None:
        tx.outbox.insert(command_id=command_id, kind=kind, payload=payload or {"n": command_id},
                         available_at=tx.now() + timedelta(seconds=delay))

    rig.store.transact(unit)


def _worker(rig: Rig, handlers: dict[str, FunctionHandler], batch_size: int = 10) -> Worker:
    registry = HandlerRegistry()
    for kind, handler in handlers.items():
        registry.register(kind, handler)
    worker = Worker(rig.store, registry, WorkerConfig(poll_interval=0.01, batch_size=batch_size,
                                                      concurrency=batch_size,
                                                      lease_seconds=LEASE_SECONDS, worker_id="plain"))
    rig.workers.append(worker)
    return worker


def _status(rig: Rig, command_id: str) -> CommandStatus:
    record = rig.store.read(lambda tx: tx.outbox.get(command_id))
    assert record is not None
    return record.status


def test_batch_is_delivered_in_one_transaction_and_only_registered_kinds_are_claimed(rig: Rig) -> None:
    seen: list[tuple[str, int, dict[str, Any]]] = []

    def echo(ctx: CommandContext) -> None:
        seen.append((ctx.command.id, ctx.delivery, ctx.command.payload))

    for i in range(3):
        _insert(rig, f"cmd_{i}")
    _insert(rig, "cmd_other", kind="test.unregistered")
    worker = _worker(rig, {"test.echo": FunctionHandler(echo)}, batch_size=2)
    assert worker.run_once() == 2
    assert worker.run_once() == 1
    assert worker.run_once() == 0
    assert sorted(s[0] for s in seen) == ["cmd_0", "cmd_1", "cmd_2"]
    assert all(delivery == 1 for _, delivery, _ in seen)
    assert seen[0][2] == {"n": seen[0][0]}
    assert worker.stats.delivered == 3 and worker.stats.claimed == 3
    assert [_status(rig, f"cmd_{i}") for i in range(3)] == [CommandStatus.DELIVERED] * 3
    assert _status(rig, "cmd_other") is CommandStatus.PENDING
    assert [e.event for e in rig.lease_events("cmd_0")] == ["claim", "deliver"]


def test_available_at_delays_the_first_delivery(rig: Rig) -> None:
    _insert(rig, "cmd_later", delay=60)
    worker = _worker(rig, {"test.echo": FunctionHandler(lambda ctx: None)})
    assert worker.run_once() == 0
    rig.clock.advance(59)
    assert worker.run_once() == 0
    rig.clock.advance(1)
    assert worker.run_once() == 1
    assert _status(rig, "cmd_later") is CommandStatus.DELIVERED


def test_a_failing_function_handler_fails_only_its_command(rig: Rig) -> None:
    def maybe_fail(ctx: CommandContext) -> None:
        if ctx.command.id == "cmd_bad":
            raise ValueError("bad payload")

    _insert(rig, "cmd_bad")
    _insert(rig, "cmd_good")
    worker = _worker(rig, {"test.echo": FunctionHandler(maybe_fail)})
    worker.run(max_idle_polls=1)
    assert (worker.stats.failed, worker.stats.delivered) == (1, 1)
    bad = rig.store.read(lambda tx: tx.outbox.get("cmd_bad"))
    assert bad is not None and bad.status is CommandStatus.FAILED
    assert bad.last_error == "ValueError: bad payload"
    assert _status(rig, "cmd_good") is CommandStatus.DELIVERED


def test_a_sweep_that_fails_with_a_fault_is_logged_and_backed_off_and_claims_go_on(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """ADR 0089: one sweep's fault (here a bug in its code) does not stop the worker: every worker would stop
    on the same data. The sweep runs again only after the back-off; the commands are still delivered."""
    calls: list[float] = []

    def broken(store: Store, budget_seconds: float) -> int:
        calls.append(budget_seconds)
        raise KeyError("a sweep's own bug")

    _insert(rig, "cmd_1")
    _insert(rig, "cmd_2")
    worker = _worker(rig, {"test.echo": FunctionHandler(lambda ctx: None)}, batch_size=1)
    worker.sweeps.append(Sweep(name="test.broken", run=broken, interval_seconds=0.0, budget_seconds=0.5))
    with caplog.at_level(logging.ERROR, logger="fencepost.worker"):
        assert worker.run_once() == 1
        assert worker.run_once() == 1
    assert calls == [0.5]  # the second cycle came before the back-off ended
    assert (_status(rig, "cmd_1"), _status(rig, "cmd_2")) == (CommandStatus.DELIVERED, CommandStatus.DELIVERED)
    [failed] = [r for r in caplog.records if getattr(r, "event", None) == "sweep_failed"]
    assert failed.sweep == "test.broken" and "KeyError" in failed.error and failed.exc_info is not None  # type: ignore[attr-defined]


def test_a_handler_that_loses_its_lease_is_not_delivered(rig: Rig) -> None:
    def aborted_meanwhile(ctx: CommandContext) -> None:
        assert rig.store.transact(lambda tx: tx.outbox.abort(ctx.command.id, "operator"))

    _insert(rig, "cmd_1")
    worker = _worker(rig, {"test.echo": FunctionHandler(aborted_meanwhile)})
    worker.run_once()
    assert (worker.stats.delivered, worker.stats.lost) == (0, 1)
    assert _status(rig, "cmd_1") is CommandStatus.ABORTED
    assert [e.event for e in rig.lease_events("cmd_1")] == ["claim", "abort"]


def test_worker_config_is_validated() -> None:
    for bad in (WorkerConfig(poll_interval=0), WorkerConfig(batch_size=0), WorkerConfig(lease_seconds=0.01),
                WorkerConfig(worker_id="")):
        with pytest.raises(InvalidInput):
            bad.validate()
    registry = HandlerRegistry()
    registry.register("k", FunctionHandler(lambda ctx: None))
    with pytest.raises(InvalidInput, match="already registered"):
        registry.register("k", FunctionHandler(lambda ctx: None))


def test_heartbeat_renews_from_the_store_clock_and_records_history(rig: Rig) -> None:
    _insert(rig, "cmd_hb")
    claimed = rig.store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["test.echo"], limit=1,
                                                            lease_seconds=LEASE_SECONDS))[0]
    ctx = CommandContext(rig.store, claimed, LEASE_SECONDS)
    heartbeat = Heartbeat(LEASE_SECONDS)
    assert heartbeat.interval == LEASE_SECONDS / 3
    heartbeat.track(ctx)
    rig.clock.advance(10)
    heartbeat.beat()
    record = rig.store.read(lambda tx: tx.outbox.get("cmd_hb"))
    assert record is not None
    assert record.lease_until == rig.clock.now() + timedelta(seconds=LEASE_SECONDS)
    assert record.last_heartbeat_at == rig.clock.now()
    assert ctx.lease.until == record.lease_until
    last = rig.lease_events("cmd_hb")[-1]
    assert (last.event, last.delivery, last.lease_until) == ("heartbeat", 1, record.lease_until)

    assert rig.store.transact(lambda tx: tx.outbox.abort("cmd_hb", "stop"))
    heartbeat.beat()
    assert ctx.lost
    with pytest.raises(LeaseLost):
        ctx.check()
    heartbeat.untrack(ctx)


def test_the_heartbeat_thread_outlives_a_store_error_that_is_not_unavailability(
        rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A break-it trial moved the SQLite file away mid-command: the renewal raised SchemaNotReady, the thread died
    with a traceback and the command ran on with no heartbeat. Now each failed renewal is one warning and the next
    tick tries again."""
    import threading

    from fencepost.core.errors import SchemaNotReady

    _insert(rig, "cmd_gone")
    claimed = rig.store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["test.echo"], limit=1,
                                                            lease_seconds=LEASE_SECONDS))[0]
    ctx = CommandContext(rig.store, claimed, LEASE_SECONDS)
    calls: list[int] = []
    again = threading.Event()

    def gone() -> bool:
        calls.append(1)
        if len(calls) >= 3:
            again.set()
        raise SchemaNotReady("no control database exists yet")

    monkeypatch.setattr(ctx, "heartbeat", gone)
    heartbeat = Heartbeat(0.03)  # a tick every 10 ms
    heartbeat.track(ctx)
    with caplog.at_level(logging.WARNING, logger="fencepost.heartbeat"):
        heartbeat.start()
        try:
            assert again.wait(10), "the heartbeat thread stopped after the first failed renewal"
        finally:
            heartbeat.stop()
    failed = [r for r in caplog.records if getattr(r, "event", None) == "heartbeat_failed"]
    assert failed and all(r.exc_info is None for r in failed), "a store error is one line, not a traceback"
    assert "no control database exists yet" in failed[0].error  # type: ignore[attr-defined]


def test_a_lost_lease_interrupts_the_running_sandbox_statement(rig: Rig) -> None:
    """After an abort, the next heartbeat marks the lease lost and the sandbox interrupts its statement;
    the interruption is reported as a lost lease, never as a scenario failure."""
    package = copy_example(rig.tmp / "inventory")
    # A seed that runs for seconds unless interrupted (bounded, so a regression fails instead of hanging).
    write_package(package, {"seed/demo.sql": "CREATE TABLE busy AS WITH RECURSIVE c(x) AS "
                                             "(SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 3000000) "
                                             "SELECT x FROM c;\n"})
    run = rig.service.create_run(package)
    attempt = rig.service.enqueue_attempt(run.id)
    worker = rig.worker(worker_id="worker-a")
    interrupted: list[str] = []

    def wrap(original: Scenario) -> Scenario:
        def scenario(env: ScenarioEnv) -> dict[str, Any]:
            rig.service.abort(attempt.id, "operator abort")
            worker.heartbeat.beat()  # what the heartbeat thread does every lease/3
            try:
                return original(env)
            except ScenarioFailed as failure:
                interrupted.append(failure.message)
                raise

        return scenario

    rig.wrap_scenario(3, wrap)
    worker.run(max_idle_polls=1)
    assert len(interrupted) == 1 and "interrupted" in interrupted[0]
    assert (worker.stats.lost, worker.stats.failed) == (1, 0)
    aborted = rig.service.attempt(attempt.id)
    assert aborted.status is AttemptStatus.ABORTED and aborted.command_status is CommandStatus.ABORTED
    receipts = rig.receipts(attempt.id)
    assert [r.status for r in receipts] == [ReceiptStatus.SUCCEEDED] * 2 + [ReceiptStatus.ABORTED] * 4
    assert receipts[2].evidence is None, "the interrupted scenario recorded no FAILED evidence"
