"""``StopSignals``: a signal handler that only counts, so a signal arriving in the middle of a stop never
re-enters the stop (the break-it trial deadlocked a worker with a burst of SIGTERMs that way)."""

from __future__ import annotations

import signal
import threading

from fencepost.cli.worker_cmd import StopSignals


class _Worker:
    """Records the calls; its ``request_stop`` holds a non-reentrant lock, as ``threading.Event.set`` does, and a
    signal arrives while it is held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.signals: StopSignals | None = None

    def request_stop(self) -> None:
        assert self.lock.acquire(timeout=1), "a stop re-entered a stop in progress"
        try:
            self.calls.append("stop")
            assert self.signals is not None
            self.signals._count(signal.SIGTERM, None)  # the second SIGTERM lands here
        finally:
            self.lock.release()

    def interrupt_now(self) -> None:
        self.calls.append("interrupt")


def test_a_signal_during_a_stop_is_acted_on_after_it_never_inside_it() -> None:
    worker = _Worker()
    exits: list[str] = []
    signals = StopSignals(lambda: exits.append("exit"))
    worker.signals = signals
    signals._count(signal.SIGTERM, None)
    assert worker.calls == [] and signals.count == 1  # the handler itself does nothing but count
    signals.act(worker)  # type: ignore[arg-type]
    assert worker.calls == ["stop", "interrupt"] and exits == ["exit"]
    signals.act(worker)  # type: ignore[arg-type]
    assert worker.calls == ["stop", "interrupt"] and exits == ["exit"]  # each only once


def test_one_signal_is_a_graceful_stop_only() -> None:
    worker = _Worker()
    worker.signals = StopSignals(lambda: None)
    worker.request_stop = lambda: worker.calls.append("stop")  # type: ignore[method-assign]
    worker.signals._count(signal.SIGINT, None)
    worker.signals.act(worker)  # type: ignore[arg-type]
    assert worker.calls == ["stop"]
