"""The heartbeat thread: renews every held lease each ``lease_seconds / 3`` (seed: Heartbeat And Takeover)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fencepost.core.errors import FencepostError
from fencepost.outbox.context import CommandContext

#: An interrupted command whose handler has not returned after this long keeps no lease: the lease expires
#: and a takeover (within the delivery budget) replaces a handler that ignores interruption.
STUCK_AFTER_SECONDS = 5.0

log = logging.getLogger("fencepost.heartbeat")


class Heartbeat:
    """Background renewal of the leases a worker holds.

    Args:
        lease_seconds: lease duration (seconds); the interval is a third of it.
    """

    def __init__(self, lease_seconds: float, on_tick: Callable[[], object] | None = None) -> None:
        self.interval = lease_seconds / 3.0
        self.on_tick = on_tick  # also called every tick, idle ones included (the worker's registration)
        self._held: dict[int, CommandContext] = {}
        self._stuck: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fencepost-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def track(self, ctx: CommandContext) -> None:
        with self._lock:
            self._held[id(ctx)] = ctx  # by delivery: a command may be held twice (a stale and a new one)

    def untrack(self, ctx: CommandContext) -> None:
        with self._lock:
            self._held.pop(id(ctx), None)
            self._stuck.discard(id(ctx))

    def beat(self) -> None:
        """Renew every held lease once (also callable directly, e.g. from tests)."""
        with self._lock:
            held = list(self._held.values())
        for ctx in held:
            if ctx.finished or ctx.lost:
                continue
            ctx.should_interrupt()  # past its time limit: interrupted now, even if the handler never checks
            if ctx.interrupted_for() > STUCK_AFTER_SECONDS:
                if id(ctx) not in self._stuck:
                    self._stuck.add(id(ctx))
                    log.error("handler ignores its interruption; letting its lease expire", extra={
                        "event": "handler_stuck", "command_id": ctx.command.id, "reason": str(ctx.interrupted)})
                continue
            try:
                if not ctx.heartbeat() and not ctx.completing:
                    # The worker says why (abort, takeover) once the handler stops.
                    log.info("lease no longer held", extra={"event": "lease_gone", "command_id": ctx.command.id,
                                                            "delivery": ctx.delivery})
            except (FencepostError, MemoryError) as error:
                # Transient: try again next tick; if the lease lapses meanwhile, the next fenced write fails.
                # MemoryError is SQLite's NOMEM: a sandbox of this process hit the shared heap limit (ADR 0021)
                # and frees its memory as its statement fails. Any store error counts, not only an unavailable
                # store: a SQLite file moved away mid-run raised SchemaNotReady here and killed this thread, so
                # the command ran on with no heartbeat at all (a break-it trial).
                log.warning("heartbeat failed", extra={"event": "heartbeat_failed", "command_id": ctx.command.id,
                                                       "error": str(error) or type(error).__name__})
            except Exception:  # a bug: said with its traceback, but the other leases are still renewed
                log.exception("heartbeat failed", extra={"event": "heartbeat_failed", "command_id": ctx.command.id})

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()
            if self.on_tick is not None:
                try:
                    self.on_tick()
                except MemoryError:  # as above: the registry row is renewed at the next tick
                    log.warning("heartbeat tick failed", extra={"event": "heartbeat_failed", "error": "MemoryError"})
                except Exception:  # the tick's own code logs store errors; this thread must outlive a bug in it
                    log.exception("heartbeat tick failed", extra={"event": "heartbeat_failed"})
