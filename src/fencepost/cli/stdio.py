"""The command line's standard streams when their reader goes away, and interrupts nobody else answered.

``fencepost host list | head -1``: once ``head`` exits, the next write to stdout fails with ``BrokenPipeError``.
Click answers that with a silent exit 1, which for ``fencepost rehearse`` is the code of a blocked release gate
(a new user's trial). Here the failed write raises ``StdoutClosed`` instead, which no command's ``except
Exception`` swallows, and the process exits 141 (the shell's 128 + SIGPIPE, what ``cat`` or ``grep`` exit with
when killed by it). SIGPIPE itself stays ignored: restoring its default would also kill a worker or ``serve`` that
writes to a socket whose peer is gone, where Python raises an error the code handles.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, TextIO

#: The exit code when stdout's reader went away (128 + SIGPIPE).
STDOUT_CLOSED_EXIT = 128 + signal.SIGPIPE


#: The exit code when stdout cannot be written for another reason (a full disk: sysexits' EX_IOERR).
STDOUT_FAILED_EXIT = 74


class StdoutClosed(BaseException):
    """Standard output's reader went away. A ``BaseException``, so that it ends the command as an interrupt does."""


class StdoutFailed(BaseException):
    """Standard output refused a write for another reason than a closed pipe (``> /dev/full``: no space left)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))


class GuardedStdout:
    """``stream`` whose failed write (``BrokenPipeError``) raises ``StdoutClosed`` on the main thread.

    Output of other threads is dropped once the pipe is gone (an exception there would only print a thread
    traceback); the main thread's next write raises. Every other attribute is ``stream``'s.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.closed_by_reader = False

    @property
    def stream(self) -> TextIO:
        """The stream guarded."""
        return self._stream

    def _broken(self) -> None:
        self.closed_by_reader = True
        if threading.current_thread() is threading.main_thread():
            raise StdoutClosed

    def write(self, text: str) -> int:
        if self.closed_by_reader:
            self._broken()
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._broken()
            return len(text)
        except OSError as error:
            self._failed(error)
            return len(text)

    def flush(self) -> None:
        if self.closed_by_reader:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._broken()
        except OSError as error:
            self._failed(error)

    def _failed(self, error: OSError) -> None:
        self.closed_by_reader = True  # nothing more is written to it
        if threading.current_thread() is threading.main_thread():
            raise StdoutFailed(error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that the interpreter's last flush at exit finds no broken pipe
    (it would print ``Exception ignored ... BrokenPipeError``)."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
        os.close(devnull)


def say(line: str) -> None:
    """Write one line to stderr, which may be the same closed pipe (``2>&1 | head``): then nothing is said."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class InterruptWatch:
    """SIGINT as Python answers it (``KeyboardInterrupt``), remembering that it came.

    Typer turns a ``KeyboardInterrupt`` into a silent exit 130. A command that installs its own handlers (the
    worker, ``rehearse``, ``serve``) replaces this one and says itself what the interrupt did; for every other
    command ``interrupted`` tells the entry point to say it (``fencepost: interrupted``).
    """

    def __init__(self) -> None:
        self.interrupted = False
        #: Set by a command that said itself what the interrupt left (``host submit --inline``).
        self.explained = False
        #: SIGINTs received while SIGINT was ignored when the process started (``take_ignored``).
        self._ignored = 0

    def install(self) -> None:
        """Take SIGINT over from Python's default handler. An ignored SIGINT (a background job of a shell
        script) stays without effect, but each one is counted: a command that takes SIGINT over later (the
        worker, ``rehearse``, ``serve``) acts on those that came while it started (``take_ignored``). A
        background worker's SIGINT was otherwise lost when it came during start-up, and the worker ran on
        (a trial)."""
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGINT)
        if current is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_sigint)
        elif current is signal.SIG_IGN:
            signal.signal(signal.SIGINT, self._count_ignored)

    def take_ignored(self) -> int:
        """The SIGINTs counted while ignored, since the last call (the count is reset)."""
        taken, self._ignored = self._ignored, 0
        return taken

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True
        raise KeyboardInterrupt

    def _count_ignored(self, signum: int, frame: FrameType | None) -> None:
        self._ignored += 1  # nothing else: the signal stays without effect for commands that do not take it


#: The process's one watch, installed by the entry point.
interrupts = InterruptWatch()


def caused_by_interrupt(error: BaseException) -> bool:
    """Whether ``error`` was caused by a Ctrl-C: a KeyboardInterrupt in its chain of causes. Python 3.11 raises
    RuntimeError("Error calling __set_name__ ...") from a KeyboardInterrupt that lands while a class body is
    built (a break-it trial: a Ctrl-C during an import then exited 1 with a traceback)."""
    from fencepost.core.errors import in_chain  # here: this module is imported before anything else (cli.entry)

    return in_chain(error, KeyboardInterrupt) is not None


def ignore_interrupts() -> None:
    """Ignore SIGINT from now on (main thread only): called once a command's outcome is decided, so that a Ctrl-C
    while the interpreter shuts down does not kill a command that succeeded by the signal (exit 130, nothing
    said; a trial saw it in 7 of 50 runs of `migrate` interrupted just after its output)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
