"""A worker's execution slots: at most ``size`` threads, each running one claimed command at a time.

Why not ``concurrent.futures.ThreadPoolExecutor``: the worker never reads a call's result through a future (each
slot reports its command's outcome on the worker's own queue), and at a batch of 100 the future per command
(a ``Future`` with its ``Condition``) was a tenth of a worker process's CPU. Here a submission is one put on a
C ``SimpleQueue``, and a thread is started only when no started thread is idle, as the executor does.

Slot threads are daemon threads: a handler that ignores its interrupt does not keep the process alive after
the worker released its lease (``Worker._drain``); whatever it was doing is then a crash, which the lease
model already covers.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
_STOP = None


class SlotPool:
    """Up to ``size`` daemon threads running submitted calls in submission order.

    Args:
        size: the most threads (the worker's ``concurrency``), 1 or more.
        name: thread-name prefix (threads are ``<name>_<n>``).
    """

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError("a slot pool needs at least one slot")
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one release per thread waiting for a call
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a slot thread. An exception it raises is the caller's bug: it is logged and the
        slot goes on.

        Raises:
            RuntimeError: the pool was shut down.
        """
        if self._closed:
            raise RuntimeError("the slot pool is shut down")
        self._calls.put((fn, args))
        if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
            thread = threading.Thread(target=self._run, name=f"{self._name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self) -> None:
        while True:
            call = self._calls.get()
            if call is _STOP:
                return
            try:
                call[0](*call[1])
            except Exception:  # the worker's own calls catch everything; this keeps the slot alive regardless
                log.exception("a slot's call failed", extra={"event": "slot_call_failed"})
            call = None  # drop the finished command before waiting for the next
            self._idle.release()

    def shutdown(self) -> None:
        """Let every thread end once the calls already submitted have run; returns at once."""
        self._closed = True
        for _ in self._threads:
            self._calls.put(_STOP)
