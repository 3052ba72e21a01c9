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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from fencepost.core.errors import InvalidInput, LeaseLost, StoreUnavailable
from fencepost.core.statuses import CommandStatus
from fencepost.outbox.context import CommandContext, EnvironmentFailed, StopRequested
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.heartbeat import Heartbeat
from fencepost.store.base import Store, WorkWaiter
from fencepost.store.ports import FencedUnit

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
        listen: while idle, wake as soon as new work is announced (PostgreSQL LISTEN/NOTIFY, ADR 0014)
            instead of sleeping out the poll interval; no effect on SQLite. Polling stays the fallback.
    """

    poll_interval: float = 1.0
    batch_size: int = 10
    lease_seconds: float = 30.0
    worker_id: str = field(default_factory=default_worker_id)
    listen: bool = True

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
        # Overlapping a batch's completion with the next claim pays on PostgreSQL (the server works while
        # this process does); on SQLite both would wait for the one write lock, so there it stays inline.
        self._overlap = store.backend == "postgres"
        self._completer: ThreadPoolExecutor | None = None  # exists while ``run`` runs
        self._pending: tuple[list[CommandContext], Future[list[bool]]] | None = None
        self._waiter: WorkWaiter | None = None  # opened at the first idle wait of ``run``

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
        if self._overlap:
            self._completer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fencepost-completer")
        idle = 0
        log.info("worker started", extra={"event": "worker_started", "worker": self.config.worker_id,
                                          "kinds": self.registry.kinds, "lease_seconds": self.config.lease_seconds,
                                          "batch_size": self.config.batch_size})
        try:
            while not self._stop.is_set():
                try:
                    handled = self.run_once(pipelined=True)
                except StoreUnavailable as error:
                    log.warning("store unavailable", extra={"event": "store_unavailable", "error": str(error)})
                    handled = 0
                if handled:
                    idle = 0
                    continue
                self._collect_completion()  # nothing due: let the last batch's completion land first
                idle += 1
                if max_idle_polls is not None and idle >= max_idle_polls:
                    break
                self._idle_wait(first=idle == 1)
        finally:
            self._collect_completion()
            if self._waiter is not None:
                self._waiter.close()
                self._waiter = None
            if self._completer is not None:
                self._completer.shutdown(wait=True)
                self._completer = None
            self.heartbeat.stop()
            log.info("worker stopped", extra={"event": "worker_stopped", "worker": self.config.worker_id,
                                              "claimed": self.stats.claimed, "delivered": self.stats.delivered,
                                              "failed": self.stats.failed, "lost": self.stats.lost})
        return self.stats

    def _idle_wait(self, *, first: bool) -> None:
        """Wait for new work: up to the poll interval, less when it is announced (ADR 0014) or on ``wake``.

        The waiter is opened at the first wait. A listening waiter announces itself once it listens, so
        a command enqueued before that is claimed at once rather than after a poll interval.
        """
        if self._waiter is None:
            self._waiter = self.store.work_waiter(self.registry.kinds, listen=self.config.listen,
                                                  name=self.config.worker_id)
        if first:
            log.info("worker idle", extra={"event": "worker_idle", "worker": self.config.worker_id,
                                           "waiting": self._waiter.mode, "poll_interval": self.config.poll_interval})
        self._waiter.wait_for_work(self.config.poll_interval, wake=self._wake)
        self._wake.clear()

    def run_once(self, *, pipelined: bool = False) -> int:
        """Claim one batch and handle it. Returns the number of commands claimed.

        By default the batch's completion (one fenced transaction marking the returned commands DELIVERED)
        has committed when this returns. With ``pipelined=True`` (what ``run`` uses) that completion is
        handed to a background thread and commits while this thread claims and handles the next batch;
        at most one completion is in flight (the next one waits for it), the leases stay tracked by the
        heartbeat until it commits, and ``run`` collects it before any idle wait and before returning.
        Each completion is the same transaction either way, fenced by every lease's own token.
        """
        cfg = self.config
        claimed = self.store.transact(
            lambda tx: tx.outbox.claim(owner=cfg.worker_id, kinds=self.registry.kinds, limit=cfg.batch_size,
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
        handed_over = False
        try:
            for ctx in contexts:
                if self._stop.is_set():
                    self._release(ctx)
                    continue
                if self._handle(ctx):
                    to_finish.append(ctx)
            if pipelined and self._completer is not None:
                self._collect_completion()
                self._pending = (to_finish, self._completer.submit(self._complete, to_finish, contexts))
                handed_over = True
            else:
                self._apply_outcome(to_finish, self._deliver(to_finish))
        finally:
            if not handed_over:
                for ctx in contexts:
                    self.heartbeat.untrack(ctx)
        return len(claimed)

    def _complete(self, to_finish: list[CommandContext], contexts: list[CommandContext]) -> list[bool]:
        """Background completion of one batch; the leases stay tracked until it has committed."""
        try:
            return self._deliver(to_finish)
        finally:
            for ctx in contexts:
                self.heartbeat.untrack(ctx)

    def _collect_completion(self) -> None:
        """Wait for the completion in flight (if any) and account for it on this thread."""
        if self._pending is None:
            return
        to_finish, future = self._pending
        self._pending = None
        try:
            outcome = future.result()
        except StoreUnavailable as error:
            # As in the synchronous path: the commands stay PROCESSING and a takeover replays them.
            log.warning("store unavailable", extra={"event": "store_unavailable", "error": str(error)})
            return
        self._apply_outcome(to_finish, outcome)

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
        except (StoreUnavailable, EnvironmentFailed) as error:
            # Leave the lease to expire: a takeover replays the command; nothing partial was committed, and
            # a failure of this machine is not the command's verdict.
            log.error("command abandoned to its lease", extra={"event": "command_abandoned",
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

        def unit(tx: FencedUnit) -> None:
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
            self.store.transact(lambda tx: tx.outbox.release(ctx.lease), name="outbox.release")
            self.stats.released += 1
            log.info("lease released", extra={"event": "released", "command_id": ctx.command.id,
                                              "delivery": ctx.delivery})
        except LeaseLost:
            self.stats.lost += 1

    def _deliver(self, contexts: list[CommandContext]) -> list[bool]:
        """One fenced transaction marking every returned command DELIVERED (ADR 0008)."""
        if not contexts:
            return []
        for ctx in contexts:
            ctx.completing = True
        outcome: list[bool] = self.store.transact(lambda tx: tx.outbox.finish_many([c.lease for c in contexts]),
                                                  name="outbox.deliver")
        for ctx, ok in zip(contexts, outcome, strict=True):
            if ok:
                ctx.finished = True  # the heartbeat stops renewing it at once
        return outcome

    def _apply_outcome(self, contexts: list[CommandContext], outcome: list[bool]) -> None:
        for ctx, ok in zip(contexts, outcome, strict=True):
            if ok:
                self.stats.delivered += 1
            else:
                self.stats.lost += 1
                log.warning("lease lost before delivery", extra={"event": "lease_lost",
                                                                 "command_id": ctx.command.id})


