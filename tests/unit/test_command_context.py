"""The command context's clock and interruptions (issue 10; break-it finding: a time limit must not carry over)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fencepost.outbox.context import CommandContext, Interrupt, StopRequested, TimeLimitExceeded
from fencepost.store.records import ClaimedCommand, Lease


def context(limit: float | None) -> CommandContext:
    lease = Lease(command_id="c1", owner="w", token="t", delivery=1, until=datetime(2026, 1, 1, tzinfo=UTC))
    return CommandContext(store=None, command=ClaimedCommand(id="c1", kind="k", payload={}, lease=lease),  # type: ignore[arg-type]
                          lease_seconds=30, time_limit=limit)


def test_past_its_limit_a_step_is_interrupted_and_the_next_step_starts_clean() -> None:
    ctx = context(2.0)
    ctx.start(now=100.0)
    assert not ctx.past_deadline(now=101.9) and ctx.past_deadline(now=102.0)
    ctx.interrupt(Interrupt.TIME_LIMIT)
    with pytest.raises(TimeLimitExceeded, match=r"time limit exceeded \(2 s\)"):
        ctx.check()
    ctx.start()  # the next scenario: the earlier step recorded its limit; nothing carries over
    assert ctx.interrupted is None
    ctx.check()


def test_paused_time_never_counts() -> None:
    ctx = context(1.0)
    ctx.start()
    ctx.pause()  # recording the step, waiting on the store: no deadline runs
    assert not ctx.past_deadline(now=10**9)
    assert not ctx.should_interrupt()


def test_a_stop_survives_the_next_step_and_wins_over_a_time_limit() -> None:
    ctx = context(1.0)
    ctx.interrupt(Interrupt.STOP)
    ctx.interrupt(Interrupt.TIME_LIMIT)  # the first reason wins
    ctx.start()
    assert ctx.interrupted is Interrupt.STOP
    with pytest.raises(StopRequested):
        ctx.check()


class PausedBetweenReads(CommandContext):
    """A context whose deadline is cleared by ``pause`` (on the slot thread) right after a watcher first reads it:
    every second read of ``_deadline`` sees None, the interleaving a loaded machine produced in CI."""

    reads = 0

    @property  # type: ignore[override]
    def _deadline(self) -> float | None:
        self.reads += 1
        return 5.0 if self.reads % 2 else None

    @_deadline.setter
    def _deadline(self, value: float | None) -> None:
        return None


def test_a_pause_racing_a_deadline_check_never_raises() -> None:
    ctx = context(1.0)
    racing = PausedBetweenReads.__new__(PausedBetweenReads)
    racing.__dict__.update(ctx.__dict__)
    racing.__dict__.pop("_deadline", None)
    assert racing.past_deadline(now=10.0) is True  # one read: the deadline as it was when asked
    assert racing.past_deadline(now=1.0) is False
