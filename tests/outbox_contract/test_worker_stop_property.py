"""A stop is never a verdict (issue 10): a property test over interleavings of signals and command ends.

Each example runs a real ``Worker`` (SQLite, several slots) over a few commands whose handlers block until
the test lets each end its own way (return, raise, or check and return), while the test interleaves a
graceful stop, a stop past its grace period and a second signal at random points. Whatever the order:

- a command has a verdict (DELIVERED or FAILED) only if its handler ended on its own before any interruption
  reached it, and FAILED only if it raised;
- a command whose handler was interrupted by a stop ends PENDING, released, with no verdict;
- no FAILED command carries an error caused by the stop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencepost.core.clock import ManualClock
from fencepost.core.statuses import CommandStatus
from fencepost.outbox import CommandContext, FunctionHandler, HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.context import Interrupt
from fencepost.store import open_store

KIND = "property.stop"
ENDINGS = ("return", "raise", "check")
ACTIONS = st.one_of(
    st.tuples(st.just("end"), st.integers(0, 3)),
    st.tuples(st.just("stop"), st.sampled_from([0.0, 60.0])),
    st.tuples(st.just("interrupt"), st.just(0)),
)


@dataclass
class Handled:
    """What one handler saw when it ended: whether an interruption had reached it first."""

    started: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)
    interrupted_at_end: Interrupt | None = None
    ended: bool = False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endings=st.lists(st.sampled_from(ENDINGS), min_size=1, max_size=4),
       actions=st.lists(ACTIONS, min_size=1, max_size=8))
def test_no_interleaving_of_stops_and_ends_writes_a_verdict_for_a_stop(
        tmp_path_factory: pytest.TempPathFactory, endings: list[str], actions: list[tuple[str, float]]) -> None:
    root = tmp_path_factory.mktemp("stop")
    store = open_store(f"sqlite:///{root / 'c.db'}", clock=ManualClock())
    store.migrate()
    ids = [f"c{i}" for i in range(len(endings))]
    for command_id in ids:
        store.transact(lambda tx, c=command_id: tx.outbox.insert(command_id=c, kind=KIND, payload={"id": c}))
    seen = {command_id: Handled() for command_id in ids}

    def handle(ctx: CommandContext) -> None:
        h = seen[ctx.command.id]
        h.started.set()
        while not h.go.wait(0.01):
            if ctx.should_interrupt():
                break
        h.interrupted_at_end = ctx.interrupted
        h.ended = True
        ending = endings[ids.index(ctx.command.id)]
        if ctx.interrupted is not None:
            ctx.check()  # raises StopRequested: what the worker turns into a release
        if ending == "raise":
            raise ValueError("the handler's own failure")
        if ending == "check":
            ctx.check()

    registry = HandlerRegistry()
    registry.register(KIND, FunctionHandler(handle))
    worker = Worker(store, registry, WorkerConfig(poll_interval=0.01, batch_size=len(ids), concurrency=len(ids),
                                                  lease_seconds=60, grace_seconds=60, worker_id="w"))
    runner = threading.Thread(target=worker.run, kwargs={"max_idle_polls": 1000})
    runner.start()
    try:
        for h in seen.values():
            assert h.started.wait(10), "every command starts on its own slot"
        for action, value in actions:
            if action == "end":
                seen[ids[int(value) % len(ids)]].go.set()
            elif action == "stop":
                worker.request_stop(value)
            else:
                worker.interrupt_now()
        for h in seen.values():
            h.go.set()
        worker.request_stop(0.0)
        runner.join(30)
        assert not runner.is_alive(), "the worker stopped"
    finally:
        for h in seen.values():
            h.go.set()
        runner.join(30)
    for command_id in ids:
        record = store.read(lambda tx, c=command_id: tx.outbox.get(c))
        assert record is not None
        h = seen[command_id]
        ending = endings[ids.index(command_id)]
        if record.status is CommandStatus.DELIVERED:
            assert h.interrupted_at_end is None and ending in ("return", "check"), (command_id, ending, h)
        elif record.status is CommandStatus.FAILED:
            assert h.interrupted_at_end is None and ending == "raise", (command_id, ending, h)
            assert record.last_error is not None and "own failure" in record.last_error
        else:
            assert record.status is CommandStatus.PENDING, record
            assert record.lease_owner is None, "released, not left holding a lease"
        if h.interrupted_at_end is Interrupt.STOP:
            assert record.status is CommandStatus.PENDING, f"a stop became a verdict for {command_id}"
    store.close()
