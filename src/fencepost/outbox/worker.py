"""The worker loop: claim a batch, run each handler under its lease, finish, repeat.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Heartbeat And Takeover". Execution is
at-least-once (a crash before the terminal commit leaves PROCESSING state for takeover); the recorded
outcome is exactly-once, because every outcome write is fenced by the current token.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import traceback
from dataclasses import dataclass, field

from fencepost.core.errors import InvalidInput, LeaseLost, StoreUnavailable
from fencepost.core.statuses import CommandStatus
from fencepost.outbox.context import CommandContext, StopRequested
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.heartbeat import Heartbeat
from fencepost.store.base import Store, Transaction

log = logging.getLogger("fencepost.worker")

MAX_ERROR_CHARS = 4000


def default_worker_id() -> str:
    """``host:pid:4 hex`` — names the machine and process, unique across restarts of the same pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


@dataclass
class WorkerConfig:
    """Worker settings (CLI flags and ``FENCEPOST_*`` environment variables, see docs/configuration.md).

    Attributes:
        poll_interval: seconds to wait after an empty claim, 0.01..60 (default 1.0).
        batch_size: commands claimed per claim transaction, 1..1000 (default 10).
        lease_seconds: lease duration in seconds, 0.1..3600 (default 30); heartbeat every third of it.
        worker_id: lease owner name; defaults to ``host:pid:rand``.
    """

    poll_interval: float = 1.0
    batch_size: int = 10
    lease_seconds: float = 30.0
    worker_id: str = field(default_factory=default_worker_id)

    def validate(self) -> None:
        """Raises InvalidInput naming the first out-of-range setting."""
        if not 0.01 <= self.poll_interval <= 60:
            raise InvalidInput("poll interval must be between 0.01 and 60 seconds")
        if not 1 <= self.batch_size <= 1000:
            raise InvalidInput("batch size must be between 1 and 1000")
        if not 0.1 <= self.lease_seconds <= 3600:
            raise InvalidInput("lease duration must be between 0.1 and 3600 seconds")
        if not self.worker_id or len(self.worker_id) > 200:
            raise InvalidInput("worker id must be 1 to 200 characters")


@dataclass
class WorkerStats:
    claimed: int = 0
    delivered: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0


class Worker:
    """Runs handlers for claimed commands until stopped.

    Args:
        store: the control store (schema must be current).
        registry: handlers by kind; only registered kinds are claimed.
        config: ``WorkerConfig``.
    """

    def __init__(self, store: Store, registry: HandlerRegistry, config: WorkerConfig | None = None) -> None:
        self.store = store
        self.registry = registry
        self.config = config or WorkerConfig()
        self.config.validate()
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.heartbeat = Heartbeat(self.config.lease_seconds)

    def request_stop(self) -> None:
        """Stop claiming; the current handler reaches a safe point and its lease is released."""
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Skip the rest of the current idle wait (a producer in this process just enqueued)."""
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, max_idle_polls: int | None = None) -> WorkerStats:
        """Loop until ``request_stop`` (or, for tests and one-shot use, ``max_idle_polls`` empty claims).

        Transient store errors are logged and retried after the poll interval; nothing is lost since
        a command stays PENDING or PROCESSING until a fenced terminal write commits.
        """
        self.heartbeat.start()
        idle = 0
        log.info("worker started", extra={"event": "worker_started", "worker": self.config.worker_id,
                                          "kinds": self.registry.kinds, "lease_seconds": self.config.lease_seconds,
                                          "batch_size": self.config.batch_size})
        try:
            while not self._stop.is_set():
                try:
                    handled = self.run_once()
                except StoreUnavailable as error:
                    log.warning("store unavailable", extra={"event": "store_unavailable", "error": str(error)})
                    handled = 0
                if handled:
                    idle = 0
                    continue
                idle += 1
                if max_idle_polls is not None and idle >= max_idle_polls:
                    break
                self._wake.wait(self.config.poll_interval)
                self._wake.clear()
        finally:
            self.heartbeat.stop()
            log.info("worker stopped", extra={"event": "worker_stopped", "worker": self.config.worker_id,
                                              "claimed": self.stats.claimed, "delivered": self.stats.delivered,
                                              "failed": self.stats.failed, "lost": self.stats.lost})
        return self.stats

    def run_once(self) -> int:
        """Claim one batch and handle it. Returns the number of commands claimed."""
        cfg = self.config
        claimed = self.store.transact(
            lambda tx: tx.claim_commands(owner=cfg.worker_id, kinds=self.registry.kinds, limit=cfg.batch_size,
                                         lease_seconds=cfg.lease_seconds), name="outbox.claim")
        if not claimed:
            return 0
        self.stats.claimed += len(claimed)
        contexts = [CommandContext(self.store, c, cfg.lease_seconds, self._stop) for c in claimed]
        for ctx in contexts:
            self.heartbeat.track(ctx)
            log.info("claimed", extra={"event": "takeover" if ctx.delivery > 1 else "claimed",
                                       "command_id": ctx.command.id, "kind": ctx.command.kind,
                                       "delivery": ctx.delivery, "worker": cfg.worker_id})
        to_finish: list[CommandContext] = []
        try:
            for ctx in contexts:
                if self._stop.is_set():
                    self._release(ctx)
                    continue
                if self._handle(ctx):
                    to_finish.append(ctx)
            self._finish_batch(to_finish)
        finally:
            for ctx in contexts:
                self.heartbeat.untrack(ctx)
        return len(claimed)

    def _handle(self, ctx: CommandContext) -> bool:
        """Run the handler; True when the worker still has to mark the command DELIVERED."""
        handler = self.registry.get(ctx.command.kind)
        try:
            handler.handle(ctx)
        except LeaseLost:
            self.stats.lost += 1
            log.warning("lease lost; work stopped", extra={"event": "lease_lost", "command_id": ctx.command.id,
                                                          "delivery": ctx.delivery})
            return False
        except StopRequested:
            self._release(ctx)
            return False
        except StoreUnavailable as error:
            # Leave the lease to expire: a takeover replays the command; nothing partial was committed.
            log.error("store unavailable during command", extra={"event": "command_abandoned",
                                                                 "command_id": ctx.command.id, "error": str(error)})
            return False
        except Exception as error:
            self._fail(ctx, error)
            return False
        if ctx.finished:
            self.stats.delivered += 1
            return False
        return True

    def _fail(self, ctx: CommandContext, error: BaseException) -> None:
        text = "".join(traceback.format_exception_only(type(error), error)).strip()[:MAX_ERROR_CHARS]
        handler = self.registry.get(ctx.command.kind)

        def unit(tx: Transaction) -> None:
            handler.on_failure(tx, ctx, text)

        try:
            ctx.fenced(unit, name="outbox.fail", finish=CommandStatus.FAILED, error=text)
            self.stats.failed += 1
            log.error("command failed", extra={"event": "command_failed", "command_id": ctx.command.id,
                                               "delivery": ctx.delivery, "error": text})
        except LeaseLost:
            self.stats.lost += 1

    def _release(self, ctx: CommandContext) -> None:
        try:
            self.store.transact(lambda tx: tx.release_command(ctx.lease), name="outbox.release")
            self.stats.released += 1
            log.info("lease released", extra={"event": "released", "command_id": ctx.command.id,
                                              "delivery": ctx.delivery})
        except LeaseLost:
            self.stats.lost += 1

    def _finish_batch(self, contexts: list[CommandContext]) -> None:
        if not contexts:
            return
        outcome = self.store.transact(lambda tx: tx.finish_commands([c.lease for c in contexts]),
                                      name="outbox.deliver")
        for ctx, ok in zip(contexts, outcome, strict=True):
            if ok:
                ctx.finished = True
                self.stats.delivered += 1
            else:
                self.stats.lost += 1
                log.warning("lease lost before delivery", extra={"event": "lease_lost",
                                                                 "command_id": ctx.command.id})


