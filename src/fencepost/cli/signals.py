"""Signal handlers that never take a lock.

A Python signal handler runs on the main thread between two bytecodes, possibly while that thread holds a lock:
inside ``threading.Event.wait`` it holds the event's condition lock for a few bytecodes before and after each
wait. A handler that calls ``Event.set()`` on that same event (or anything else that takes that lock) then
waits for itself forever. ``fencepost rehearse`` hung so on a Ctrl-C that came at the end of one of its 0.1 s
waits (the CI run of 2026-12-06); ``StopSignals`` in ``cli/worker_cmd.py`` fixed the same for ``fencepost worker``.

``acting_on_signals`` installs handlers that only count, and a watcher thread that acts on the count: the action
runs on a thread that holds none of the main thread's locks, so it cannot deadlock with the code it stops, and
it runs at once even while the main thread is busy in a long call.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from fencepost.cli import stdio

#: How often the watcher looks at the count (seconds): the delay between a signal and its action.
WATCH_SECONDS = 0.02


@contextmanager
def acting_on_signals(act: Callable[[int], None],
                      signals: Sequence[signal.Signals] = (signal.SIGINT,), *,
                      interrupt_at: int | None = None) -> Iterator[None]:
    """While inside, each of ``signals`` only counts; a watcher thread calls ``act(n)`` for the n-th signal
    received (n = 1, 2, ...), in order, each once. The previous handlers come back on exit.

    Args:
        act: what a signal asks for, given how many have come so far; it runs on the watcher thread (it may take
            locks, set events, stop workers; an exception it raises is not caught).
        signals: the signals counted (default SIGINT).
        interrupt_at: from this many signals on, the handler raises ``KeyboardInterrupt`` in the main thread
            instead (what an unhandled Ctrl-C does), and ``act`` is not called for them: a second Ctrl-C that
            abandons what the first asked to finish.
    """
    received = [0]
    done = threading.Event()

    def count(signum: int, frame: FrameType | None) -> None:
        received[0] += 1  # nothing else: no lock, no event, no I/O
        if interrupt_at is not None and received[0] >= interrupt_at:
            raise KeyboardInterrupt

    def watch() -> None:
        acted = 0
        while True:
            finished = done.wait(WATCH_SECONDS)
            while acted < received[0] and (interrupt_at is None or acted + 1 < interrupt_at):
                acted += 1  # also the ones counted just before the handlers were restored
                act(acted)
            if finished:
                return

    previous = {s: signal.signal(s, count) for s in signals}
    if signal.SIGINT in signals:  # SIGINTs that came while the process started, ignored then (a background job)
        received[0] += stdio.interrupts.take_ignored()
    watcher = threading.Thread(target=watch, name="fencepost-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        done.set()
        watcher.join(timeout=5)
