"""``acting_on_signals``: a real signal that arrives while the main thread holds the very lock the action takes
(``threading.Event.wait`` holds its condition lock for a few bytecodes around each wait) is acted on once the
lock is free, never inside the handler. ``fencepost rehearse`` hung forever on such a Ctrl-C (CI, 2026-12-06)
with a handler that called ``Event.set()`` itself. Each case runs in a subprocess with a timeout, so that a
deadlock is a failure, not a hung test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import os, signal, sys, threading, time
    from fencepost.cli.signals import acting_on_signals

    stop = threading.Event()
    acted = []

    def act(received):
        acted.append(received)
        stop.set()

    def naive(signum, frame):
        stop.set()

    if sys.argv[1] == "naive":
        signal.signal(signal.SIGINT, naive)
        context = None
    else:
        context = acting_on_signals(act)
        context.__enter__()
    with stop._cond:  # the main thread inside Event.wait's locked region
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the handler runs here, on this thread, while the lock is held
    assert stop.wait(5), "the signal was never acted on"
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 5
    while len(acted) < 2 and sys.argv[1] != "naive" and time.monotonic() < deadline:
        time.sleep(0.01)
    if context is not None:
        context.__exit__(None, None, None)
    print("acted", acted, flush=True)
''')


def run(mode: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=timeout)


def test_a_signal_while_the_main_thread_holds_the_lock_is_acted_on_after_it_once_per_signal() -> None:
    done = run("watched")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "acted [1, 2]"  # each signal once, in order


def test_the_naive_handler_deadlocks_there_which_is_why_the_watcher_exists() -> None:
    """The control: the same script with a handler that sets the event itself never finishes. It deadlocks 0.2 s
    after it starts (and would finish in well under a second if it did not), so 6 s tell the two apart."""
    with pytest.raises(subprocess.TimeoutExpired):
        run("naive", timeout=6.0)
