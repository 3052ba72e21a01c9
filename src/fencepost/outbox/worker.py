"""The worker loop: sweeps, then claim only what free execution slots can start now, run, complete.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Heartbeat And Takeover"; issue 10. Execution is
at-least-once (a crash before the terminal commit leaves PROCESSING state for takeover); the recorded
outcome is exactly-once, because every outcome write is fenced by the current token. Bounds:

- **No hoarding.** A worker has ``concurrency`` execution slots and claims at most as many commands as it
  has free slots (and at most ``batch_size``); each claimed command starts on a slot at once.
- **A delivery budget per kind.** The claim after a command's last allowed delivery does not run it: the
  kind's handler fails it under the lease with ``delivery budget exhausted (n/max)`` (its
  ``on_budget_exhausted`` hook when it has one, ``BudgetAware``).
- **A time limit per kind** (overridable per worker): past it the command is interrupted and the handler
  records the limit as the command's outcome.
- **A stop is never a verdict.** A graceful stop claims nothing more, lets running commands finish until the
  grace period ends, then interrupts them: an interrupted command records nothing and is released.
  ``interrupt_now`` (a second signal) skips the grace period.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum

from fencepost.core.canonical import storable_text
from fencepost.core.errors import (
    IntegrityViolation,
    InvalidInput,
    LeaseLost,
    RecoverableFinalization,
    StoreUnavailable,
)
from fencepost.core.statuses import CommandStatus, LeaseEventKind
from fencepost.outbox.context import (
    CommandContext,
    EnvironmentFailed,
    Interrupt,
    StopRequested,
    TimeLimitExceeded,
)
from fencepost.outbox.handlers import BudgetAware, DeliveryBudget, FailureFollowUp, HandlerRegistry
from fencepost.outbox.heartbeat import Heartbeat
from fencepost.outbox.registry import WorkerRegistration
from fencepost.outbox.slots import SlotPool
from fencepost.store.base import Store, WorkWaiter
from fencepost.store.ports import FencedUnit, UnitOfWork
from fencepost.store.records import ClaimedCommand

log = logging.getLogger("fencepost.worker")

MAX_ERROR_CHARS = 4000
#: After the grace period, how long interrupted handlers get to return before their leases are released
#: regardless (their later fenced writes then fail: the token is gone).
INTERRUPT_WAIT_SECONDS = 5.0
#: Once stopping with nothing in flight, how long a worker's thread gets to give back its unstarted claims and
#: deregister before its process exits anyway (its leases then expire): a store that answers needs well under a
#: second; the pool's connect timeout is 5 s.
IDLE_STOP_WAIT_SECONDS = 10.0
#: After a second signal (``interrupt_now``), how long interrupted handlers get instead: the process exits two
#: seconds after that signal (``fencepost worker``), and the leases of what still runs are released before then.
HURRIED_INTERRUPT_WAIT_SECONDS = 0.5
#: While other commands still run, a returned command waits at most this long (seconds) for them, so that
#: one completion transaction marks a claimed batch DELIVERED together (ADR 0008).
COMPLETION_DELAY_SECONDS = 0.05
#: After a sweep fails with anything but an unavailable store (a fault in its code or its data), it is run
#: again no sooner than this many seconds later (ADR 0089).
SWEEP_FAILURE_BACKOFF_SECONDS = 5.0


def default_worker_id() -> str:
    """``host:pid:4 hex`` — names the machine and process, unique across restarts of the same pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


@dataclass
class WorkerConfig:
    """Worker settings (CLI flags and ``FENCEPOST_*`` environment variables, see docs/configuration.md).

    Attributes:
        poll_interval: seconds to wait after an empty claim, 0.01..60 (default 1.0).
        batch_size: at most this many commands per claim transaction, 1..1000 (default 10).
        concurrency: execution slots, 1..1000 (default 1): commands run at once; a claim never takes more
            than the free slots, so no claimed command waits behind another.
        lease_seconds: lease duration in seconds, 0.1..3600 (default 30); heartbeat every third of it.
        grace_seconds: on a graceful stop, how long running commands may go on, 0..3600 (default 30).
        time_limits: per-kind time limits (seconds) that override the kinds' own.
        worker_id: lease owner name; defaults to ``host:pid:rand``.
        listen: while idle, wake as soon as new work is announced (PostgreSQL LISTEN/NOTIFY, ADR 0014)
            instead of sleeping out the poll interval; no effect on SQLite. Polling stays the fallback.
    """

    poll_interval: float = 1.0
    batch_size: int = 10
    concurrency: int = 1
    lease_seconds: float = 30.0
    grace_seconds: float = 30.0
    time_limits: dict[str, float] = field(default_factory=dict)
    worker_id: str = field(default_factory=default_worker_id)
    listen: bool = True

    def validate(self) -> None:
        """Raises InvalidInput naming the first out-of-range setting."""
        if not 0.01 <= self.poll_interval <= 60:
            raise InvalidInput("poll interval must be between 0.01 and 60 seconds")
        if not 1 <= self.batch_size <= 1000:
            raise InvalidInput("batch size must be between 1 and 1000")
        if not 1 <= self.concurrency <= 1000:
            raise InvalidInput("concurrency must be between 1 and 1000")
        if not 0.1 <= self.lease_seconds <= 3600:
            raise InvalidInput("lease duration must be between 0.1 and 3600 seconds")
        if not 0 <= self.grace_seconds <= 3600:
            raise InvalidInput("grace period must be between 0 and 3600 seconds")
        for kind, limit in self.time_limits.items():
            if not 0 < limit < float("inf"):
                raise InvalidInput(f"the time limit of {kind} must be above 0 seconds")
        if not self.worker_id or len(self.worker_id) > 200 or not self.worker_id.isprintable():
            raise InvalidInput("worker id must be 1 to 200 printable characters")


@dataclass
class WorkerStats:
    claimed: int = 0
    delivered: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    timed_out: int = 0
    exhausted: int = 0


@dataclass(frozen=True)
class Sweep:
    """Housekeeping a worker runs before it claims (issue 10 item 7).

    Attributes:
        name: names the sweep in logs; its transactions carry their own names (and so crash points).
        run: ``run(store, budget_seconds) -> items handled``; must return within about ``budget_seconds``
            (work in bounded pages) and be safe to run on many workers at once. ``StoreUnavailable`` is logged
            and the sweep runs again at its interval; any other error is logged with its traceback and the sweep
            waits ``SWEEP_FAILURE_BACKOFF_SECONDS`` (ADR 0089). Neither stops the worker.
        interval_seconds: at most one run per this many seconds on one worker.
        budget_seconds: the time a run may take.
    """

    name: str
    run: Callable[[Store, float], int]
    interval_seconds: float = 1.0
    budget_seconds: float = 1.0


class _Outcome(StrEnum):
    DELIVER = "deliver"      # returned: the worker marks it DELIVERED in its batched completion
    DONE = "done"            # the handler finished it itself
    FAILED = "failed"        # a verdict of failure was recorded
    LOST = "lost"            # fenced out: nothing recorded
    RELEASED = "released"    # a stop interrupted it: nothing recorded, lease given back
    ABANDONED = "abandoned"  # the store or this machine failed: nothing recorded, lease left to expire


class Worker:
    """Runs handlers for claimed commands until stopped.

    Args:
        store: the control store (schema must be current).
        registry: handlers by kind; only registered kinds are claimed.
        config: ``WorkerConfig``.
        sweeps: run before claims (``Sweep``).
    """

    def __init__(self, store: Store, registry: HandlerRegistry, config: WorkerConfig | None = None, *,
                 sweeps: list[Sweep] | None = None) -> None:
        self.store = store
        self.registry = registry
        self.config = config or WorkerConfig()
        self.config.validate()
        unknown = set(self.config.time_limits) - set(registry.kinds)
        if unknown:
            raise InvalidInput(f"time limits for kinds this worker does not run: {', '.join(sorted(unknown))}")
        self.sweeps = list(sweeps or [])
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._hurry = False  # ``interrupt_now`` was called
        self._grace_deadline: float | None = None
        self._only: list[str] | None = None  # ``serve_only``
        self._lock = threading.RLock()  # reentrant: a signal handler on the main thread may take it
        # By delivery, not by command: this worker may take over its own command (its lease lapsed) while the
        # stale delivery still winds down on another slot; each is tracked and untracked on its own.
        self._running: dict[int, CommandContext] = {}
        self._returned: queue.SimpleQueue[tuple[CommandContext, _Outcome]] = queue.SimpleQueue()
        self._to_deliver: list[CommandContext] = []  # returned normally; marked DELIVERED in one completion
        self._first_returned: float | None = None  # when the oldest of ``_to_deliver`` returned
        self._pool: SlotPool | None = None
        self._swept: dict[str, float] = {}
        self.heartbeat = Heartbeat(self.config.lease_seconds, on_tick=lambda: self.registration.beat(self.in_flight))
        # Who runs, for operators (ADR 0019): written at start, renewed every heartbeat, deleted at stop.
        self.registration = WorkerRegistration(store, self.config.worker_id, registry.kinds,
                                               heartbeat_seconds=self.heartbeat.interval,
                                               concurrency=self.config.concurrency)
        # Overlapping a batch's completion with the next claim pays on PostgreSQL (the server works while
        # this process does); on SQLite both would wait for the one write lock, so there the claim rides on the
        # completion's transaction instead, one synced COMMIT for both (ADR 0093).
        self._overlap = store.backend == "postgres"
        self._completer: ThreadPoolExecutor | None = None  # exists while ``run`` runs
        self._pending: tuple[list[CommandContext], Future[tuple[list[bool], list[ClaimedCommand]]]] | None = None
        self._waiter: WorkWaiter | None = None  # opened at the first idle wait of ``run``

    # ── control (any thread, signal handlers included) ──
    def serve_only(self, command_ids: list[str] | None) -> None:
        """Claim only these commands from now on (None: every command of the registered kinds). An in-process
        worker that exists for its caller's own work (``fencepost rehearse``) never serves anyone else's first."""
        with self._lock:
            self._only = None if command_ids is None else list(command_ids)

    def request_stop(self, grace_seconds: float | None = None) -> None:
        """Stop claiming; running commands may finish within the grace period, then are interrupted.

        Args:
            grace_seconds: overrides ``config.grace_seconds`` (0: interrupt at once). A later call can
                only shorten the grace period.
        """
        grace = self.config.grace_seconds if grace_seconds is None else max(0.0, grace_seconds)
        deadline = time.monotonic() + grace
        with self._lock:
            if self._grace_deadline is None or deadline < self._grace_deadline:
                self._grace_deadline = deadline
        first = not self._stop.is_set()
        self._stop.set()
        self._wake.set()
        if first:
            log.info("stopping", extra={"event": "worker_stopping", "worker": self.config.worker_id,
                                        "in_flight": self.in_flight, "grace_seconds": grace})
        if grace <= 0:
            self._interrupt_running()

    def interrupt_now(self) -> None:
        """A second signal: no grace period; every running command is interrupted (nothing recorded), and what
        has not returned within ``HURRIED_INTERRUPT_WAIT_SECONDS`` has its lease released anyway (issue 10)."""
        self._hurry = True
        self.request_stop(0.0)

    def wake(self) -> None:
        """Skip the rest of the current wait (a producer in this process just enqueued)."""
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def in_flight(self) -> int:
        """Commands this worker holds a lease on and is running now."""
        with self._lock:
            return len(self._running)

    def _interrupt_running(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for ctx in running:
            ctx.interrupt(Interrupt.STOP)

    # ── the loop ──
    def run(self, *, max_idle_polls: int | None = None) -> WorkerStats:
        """Loop until ``request_stop`` (or, for tests and one-shot use, ``max_idle_polls`` empty claims with
        nothing running).

        Transient store errors are logged and retried after the poll interval; nothing is lost since
        a command stays PENDING or PROCESSING until a fenced terminal write commits.
        """
        self.registration.start()
        self.heartbeat.start()
        if self._overlap:
            self._completer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fencepost-completer")
        idle = 0
        log.info("worker started", extra={"event": "worker_started", "worker": self.config.worker_id,
                                          "kinds": self.registry.kinds, "lease_seconds": self.config.lease_seconds,
                                          "batch_size": self.config.batch_size,
                                          "concurrency": self.config.concurrency})
        try:
            while not self._stop.is_set():
                try:
                    self._housekeeping()
                    claimed = self._claim_and_start()
                except StoreUnavailable as error:
                    log.warning("store unavailable", extra={"event": "store_unavailable", "error": str(error)})
                    claimed = 0
                if claimed:
                    idle = 0
                    continue
                if self.in_flight:
                    self._wait(self.config.poll_interval)  # until a slot frees up
                    continue
                self._collect_completion()  # nothing due: let the last batch's completion land first
                idle += 1
                if max_idle_polls is not None and idle >= max_idle_polls:
                    break
                self._idle_wait(first=idle == 1)
            self._drain()
        finally:
            self._shutdown()
            log.info("worker stopped", extra={"event": "worker_stopped", "worker": self.config.worker_id,
                                              "claimed": self.stats.claimed, "delivered": self.stats.delivered,
                                              "failed": self.stats.failed, "lost": self.stats.lost,
                                              "released": self.stats.released})
        return self.stats

    def run_once(self) -> int:
        """Claim once (at most the free slots) and handle what was claimed to its end, completion included.

        Returns:
            The number of commands claimed.
        """
        self._housekeeping()
        claimed = self._claim_and_start()
        while self.in_flight:
            self._wait(self.config.poll_interval)
        self._collect_returned()
        self._deliver_returned(pipelined=False)
        return claimed

    def _housekeeping(self) -> None:
        """Sweeps that are due, then account for the returned commands (their completion rides on the next
        claim, ``_claim_and_start``)."""
        now = time.monotonic()
        for sweep in self.sweeps:
            if now - self._swept.get(sweep.name, float("-inf")) < sweep.interval_seconds:
                continue
            self._swept[sweep.name] = now
            try:
                handled = sweep.run(self.store, sweep.budget_seconds)
                if handled:
                    log.info("sweep", extra={"event": "sweep", "sweep": sweep.name, "handled": handled})
            except StoreUnavailable as error:
                log.warning("sweep failed", extra={"event": "sweep_failed", "sweep": sweep.name, "error": str(error)})
            except Exception as error:
                # The same data fails the same way on every worker: stopping would stop the whole fleet. The
                # sweep is retried after a back-off; claims go on; the traceback is logged for the operator.
                self._swept[sweep.name] = now + max(0.0, SWEEP_FAILURE_BACKOFF_SECONDS - sweep.interval_seconds)
                log.error("sweep failed", exc_info=True, extra={
                    "event": "sweep_failed", "sweep": sweep.name, "error": f"{type(error).__name__}: {error}"})
        self._collect_returned()

    def _completion_due(self) -> bool:
        """Returned commands wait to be marked DELIVERED until nothing else runs or the oldest has waited
        ``COMPLETION_DELAY_SECONDS`` (so that one completion covers a batch, ADR 0008)."""
        if not self._to_deliver:
            return False
        waited = time.monotonic() - (self._first_returned or time.monotonic())
        return not self.in_flight or waited >= COMPLETION_DELAY_SECONDS

    def _claim_and_start(self) -> int:
        """Claim at most the free slots, and start each claimed command at once. A completion that is due
        goes first: on SQLite the claim rides on it, one transaction named ``outbox.deliver`` committing both
        (ADR 0093); on PostgreSQL it runs on the completer thread while this thread claims.

        While commands run, a claim waits until at least half the claim size is free, so that claims (and
        completions) stay batches instead of crumbling into one command each.
        """
        cfg = self.config
        running = self.in_flight
        free = cfg.concurrency - running
        deliver = self._completion_due()
        if self._stop.is_set() or free <= 0 or (running and free < max(1, min(cfg.batch_size, cfg.concurrency) // 2)):
            if deliver:
                self._deliver_returned(pipelined=True)
            return 0

        most = min(cfg.batch_size, free)
        if deliver and not self._overlap:
            claimed = self._deliver_returned(pipelined=False, claim_limit=most)
        else:
            if deliver:
                self._deliver_returned(pipelined=True)
            claimed = self.store.transact(
                lambda tx: tx.outbox.claim(owner=cfg.worker_id, kinds=self.registry.kinds, limit=most,
                                           lease_seconds=cfg.lease_seconds, command_ids=self._only),
                name="outbox.claim")
        self.stats.claimed += len(claimed)
        pool = self._slots()
        for command in claimed:
            policy = self.registry.policy(command.kind)
            limit = cfg.time_limits.get(command.kind, policy.time_limit)
            ctx = CommandContext(self.store, command, cfg.lease_seconds, time_limit=limit)
            self.heartbeat.track(ctx)
            log.info("claimed", extra={"event": "takeover" if ctx.delivery > 1 else "claimed",
                                       "command_id": command.id, "kind": command.kind,
                                       "delivery": ctx.delivery, "worker": cfg.worker_id})
            if self._stop.is_set():
                if self._release(ctx) is _Outcome.RELEASED:  # claimed but not started: given back at once
                    self.stats.released += 1
                self.heartbeat.untrack(ctx)
                continue
            with self._lock:
                self._running[id(ctx)] = ctx
                pool.submit(self._run_one, ctx, policy.max_deliveries)
        return len(claimed)

    def _slots(self) -> SlotPool:
        if self._pool is None:
            self._pool = SlotPool(self.config.concurrency, "fencepost-slot")
        return self._pool

    def _run_one(self, ctx: CommandContext, max_deliveries: int) -> _Outcome:
        """On a slot thread: the command's budget, then its handler, then what to do with its outcome."""
        try:
            spent = self._spent(ctx) if ctx.delivery > max_deliveries else 0
            if ctx.command.unreadable is not None:  # nothing can run it, now or on any later delivery
                outcome = self._fail(ctx, f"the command's payload cannot be read ({ctx.command.unreadable}); "
                                          "its handler did not run", unreadable=True)
            elif spent >= max_deliveries:
                outcome = self._exhausted(ctx, spent, max_deliveries)
            else:
                ctx.start()
                if self._stop.is_set() and self._grace_over():
                    ctx.interrupt(Interrupt.STOP)
                outcome = self._handle(ctx)
        except BaseException:  # pragma: no cover - an internal error must not hang the loop
            log.exception("internal error while handling a command", extra={"command_id": ctx.command.id})
            outcome = _Outcome.ABANDONED
        self._returned.put((ctx, outcome))
        self._wake.set()
        return outcome

    def _grace_over(self) -> bool:
        with self._lock:
            return self._grace_deadline is not None and time.monotonic() >= self._grace_deadline

    def _handle(self, ctx: CommandContext) -> _Outcome:
        """Run the handler and turn what it did into an outcome; a stop never becomes a verdict."""
        handler = self.registry.get(ctx.command.kind)
        try:
            handler.handle(ctx)
        except LeaseLost:
            self._log_lost(ctx)
            return _Outcome.LOST
        except StopRequested:
            return self._release(ctx)
        except RecoverableFinalization as error:
            # An outcome that could not be recorded truthfully (host-spec C11): record nothing more, leave the
            # lease to expire; the next claim recovers it. A lost lease is reported as one.
            if isinstance(error.cause, LeaseLost):
                self._log_lost(ctx)
                return _Outcome.LOST
            if ctx.finished:  # the verdict committed and released the lease; some evidence did not (K8)
                log.error("verdict recorded with an evidence gap", extra={
                    "event": "evidence_gap", "command_id": ctx.command.id, "error": str(error)})
                return _Outcome.FAILED if ctx.finished_status is CommandStatus.FAILED else _Outcome.DONE
            if self._superseded(ctx):  # another delivery took over or settled it: there is no lease to expire
                self._log_lost(ctx)
                return _Outcome.LOST
            log.error("outcome not recorded; the lease is left to expire", extra={
                "event": "command_abandoned", "command_id": ctx.command.id, "error": str(error)})
            return _Outcome.ABANDONED
        except (StoreUnavailable, EnvironmentFailed) as error:
            # Leave the lease to expire: a takeover replays the command; nothing partial was committed, and
            # a failure of this machine is not the command's verdict.
            log.error("command abandoned to its lease", extra={"event": "command_abandoned",
                                                              "command_id": ctx.command.id, "error": str(error)})
            return _Outcome.ABANDONED
        except TimeLimitExceeded as error:
            return self._fail(ctx, str(error), timed_out=True)
        except Exception as error:
            if ctx.interrupted is Interrupt.STOP:
                return self._release(ctx)  # what an interruption made fail is not the work's verdict
            if ctx.interrupted is Interrupt.TIME_LIMIT and ctx.time_limit is not None:
                return self._fail(ctx, str(TimeLimitExceeded(ctx.time_limit)), timed_out=True)
            return self._fail(ctx, "".join(traceback.format_exception_only(type(error), error)).strip())
        self._note_overrun(ctx)
        if ctx.finished:
            return _Outcome.FAILED if ctx.finished_status is CommandStatus.FAILED else _Outcome.DONE
        if ctx.lost:
            return _Outcome.LOST
        if ctx.interrupted is Interrupt.STOP:
            return self._release(ctx)  # returned after an interruption: it may not have finished
        return _Outcome.DELIVER

    @staticmethod
    def _note_overrun(ctx: CommandContext) -> None:
        """Say so when a handler returned past its time limit without recording it: Python cannot stop a thread,
        so a limit is enforced only where the handler checks it (a rehearsal's SQL, the host's safe points before
        each adapter call); code that ran through it, such as an action's own handler, recorded its real outcome,
        which stands (an issue-10 trial found the overrun silent)."""
        if ctx.time_limit is None or ctx.lost or ctx.interrupted is Interrupt.STOP:
            return
        if ctx.interrupted is not Interrupt.TIME_LIMIT and not ctx.past_deadline():
            return
        if ctx.finished and ctx.finished_status is CommandStatus.FAILED:
            return  # recorded as a failure (a rehearsal's timed-out scenario names the limit itself)
        log.warning("ran past its time limit, which its code did not check; the outcome it recorded stands",
                    extra={"event": "time_limit_overrun", "command_id": ctx.command.id, "kind": ctx.command.kind,
                           "time_limit": ctx.time_limit})

    def _superseded(self, ctx: CommandContext) -> bool:
        """Whether the command has moved past this delivery (taken over, or finished by another): a refusal to
        settle is then a lost lease, not an outcome left for a lease to expire (a stale worker said so: a
        new-user trial). False when the store cannot tell."""
        try:
            record = self.store.read(lambda tx: tx.outbox.get(ctx.command.id))
        except StoreUnavailable:
            return False
        return record is not None and (record.delivery_count > ctx.delivery
                                       or record.status is not CommandStatus.PROCESSING)

    def _log_lost(self, ctx: CommandContext) -> None:
        """Say why the work stopped: an operator's abort is routine (info); a takeover or reconcile means this
        worker was presumed dead (warning)."""
        try:
            record = self.store.read(lambda tx: tx.outbox.get(ctx.command.id))
        except StoreUnavailable:
            record = None
        extra = {"event": "lease_lost", "command_id": ctx.command.id, "delivery": ctx.delivery}
        if record is not None and record.status is CommandStatus.ABORTED:
            log.info("command aborted by an operator; work stopped", extra={**extra, "event": "command_aborted"})
        elif record is not None and record.delivery_count > ctx.delivery:
            now = {"delivery_now": record.delivery_count, "status_now": str(record.status)}
            if record.lease_owner is not None:  # None once the taker has settled it (a new-user trial saw None)
                now["taken_by"] = record.lease_owner
            log.warning("lease taken over by another worker; work stopped", extra={**extra, **now})
        else:
            log.warning("lease lost; work stopped", extra=extra)

    def _fail(self, ctx: CommandContext, text: str, *, timed_out: bool = False,
              budget: DeliveryBudget | None = None, unreadable: bool = False) -> _Outcome:
        """FAILED under the lease, with the handler's failure verdict in the same unit (its budget verdict with
        ``budget``); with ``unreadable`` the handler is left out, since it cannot tell what the command is."""
        text = storable_text(text)[:MAX_ERROR_CHARS]
        handler = self.registry.get(ctx.command.kind)

        def unit(tx: FencedUnit) -> None:
            if unreadable:
                return
            if budget is not None and isinstance(handler, BudgetAware):
                handler.on_budget_exhausted(tx, ctx, budget)
            else:
                handler.on_failure(tx, ctx, text)

        try:
            ctx.fenced(unit, name="outbox.fail", finish=CommandStatus.FAILED, error=text)
        except IntegrityViolation as error:
            if unreadable:  # pragma: no cover - the unit ran nothing that could raise it
                raise
            # The handler cannot read its own record (written past the port): its verdict cannot be written, and
            # every later delivery would meet the same row. The command fails without it (ADR 0100).
            return self._fail(ctx, f"{text}; the handler's failure verdict could not be written: {error}",
                              timed_out=timed_out, unreadable=True)
        except LeaseLost:
            self._log_lost(ctx)
            return _Outcome.LOST
        except StopRequested:
            return self._release(ctx)
        except RecoverableFinalization as error:  # the handler's verdict could not be written under this lease
            if isinstance(error.cause, LeaseLost) or ctx.lost:
                self._log_lost(ctx)
                return _Outcome.LOST
            log.error("failure verdict not recorded; the lease is left to expire", extra={
                "event": "command_abandoned", "command_id": ctx.command.id, "error": str(error)})
            return _Outcome.ABANDONED
        except StoreUnavailable as error:
            log.error("failure verdict not recorded: the store failed; the lease is left to expire", extra={
                "event": "command_abandoned", "command_id": ctx.command.id, "error": str(error)})
            return _Outcome.ABANDONED
        if isinstance(handler, FailureFollowUp) and not unreadable:
            try:
                handler.after_failure(ctx, budget)
            except Exception as error:  # the verdict stands; the handler's evidence is what is missing
                log.error("evidence after the failure verdict was not recorded", extra={
                    "event": "evidence_gap", "command_id": ctx.command.id, "error": str(error)})
        if timed_out:
            self.stats.timed_out += 1
        log.error("command failed", extra={"event": "command_failed", "command_id": ctx.command.id,
                                           "delivery": ctx.delivery, "error": text})
        return _Outcome.FAILED

    def _spent(self, ctx: CommandContext) -> int:
        """Deliveries before this one that spent the budget: each that ended without a verdict and was not
        given back. A release (a stop, a claim this worker could not start) gives its delivery back, so rolling
        restarts never exhaust a command. Read only when the claim count alone would exceed the budget."""
        events = self.store.read(lambda tx: tx.outbox.lease_events(ctx.command.id))
        released = {e.delivery for e in events if e.event is LeaseEventKind.RELEASE}
        return sum(1 for delivery in range(1, ctx.delivery) if delivery not in released)

    def _exhausted(self, ctx: CommandContext, spent: int, max_deliveries: int) -> _Outcome:
        """The claim after the last allowed delivery: fail it under the lease, never run it again."""
        budget = DeliveryBudget(deliveries=spent, max_deliveries=max_deliveries)
        outcome = self._fail(ctx, budget.error, budget=budget)
        if outcome is _Outcome.FAILED:
            self.stats.exhausted += 1
        return outcome

    def _release(self, ctx: CommandContext) -> _Outcome:
        try:
            self.store.transact(lambda tx: tx.outbox.release(ctx.lease), name="outbox.release")
        except LeaseLost:
            return _Outcome.LOST
        except StoreUnavailable as error:
            log.warning("release failed; the lease will expire", extra={
                "event": "release_failed", "command_id": ctx.command.id, "error": str(error)})
            return _Outcome.ABANDONED
        log.info("lease released", extra={"event": "released", "command_id": ctx.command.id,
                                          "delivery": ctx.delivery})
        return _Outcome.RELEASED

    # ── completion ──
    def _collect_returned(self) -> None:
        """Account for the commands whose slot returned; queue those the worker has to mark DELIVERED."""
        while True:
            try:
                ctx, outcome = self._returned.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                self._running.pop(id(ctx), None)
            if outcome is _Outcome.DELIVER:
                if not self._to_deliver:
                    self._first_returned = time.monotonic()
                self._to_deliver.append(ctx)
                continue
            self.heartbeat.untrack(ctx)
            if outcome is _Outcome.DONE:
                self.stats.delivered += 1
            elif outcome is _Outcome.FAILED:
                self.stats.failed += 1
            elif outcome is _Outcome.LOST:
                self.stats.lost += 1
            elif outcome is _Outcome.RELEASED:
                self.stats.released += 1

    def _deliver_returned(self, *, pipelined: bool, claim_limit: int | None = None) -> list[ClaimedCommand]:
        """One fenced transaction marking every returned command DELIVERED (ADR 0008). With ``claim_limit``
        the next claim rides on it (ADR 0093: one COMMIT for both) and its claimed commands are returned;
        otherwise, on PostgreSQL and while claiming goes on, it runs on a completer thread (at most one
        completion in flight).

        When the transaction with the claim fails, the completion is tried again alone: commands that already
        ran are not run again because the claim riding on their completion failed. What the claim raised other
        than ``StoreUnavailable`` is then raised, as a claim's error always was.
        """
        to_finish = list(self._to_deliver)
        self._to_deliver.clear()
        self._first_returned = None
        if claim_limit is None and not to_finish:
            return []
        if claim_limit is None and pipelined and self._completer is not None:
            self._collect_completion()
            self._pending = (to_finish, self._completer.submit(self._complete, to_finish))
            return []
        claimed: list[ClaimedCommand] = []
        try:
            try:
                outcome, claimed = self._complete(to_finish, claim_limit)
            except Exception as error:
                if claim_limit is None:
                    raise
                log.warning("claim with the completion failed; completing alone", extra={
                    "event": "claim_failed", "error": f"{type(error).__name__}: {error}"})
                outcome, _ = self._complete(to_finish)
                if not isinstance(error, StoreUnavailable):
                    self._apply_outcome(to_finish, outcome)
                    raise
        except StoreUnavailable as error:
            # The commands stay PROCESSING and a takeover replays them.
            log.warning("store unavailable", extra={"event": "store_unavailable", "error": str(error)})
            return []
        self._apply_outcome(to_finish, outcome)
        return claimed

    def _complete(self, contexts: list[CommandContext], claim_limit: int | None = None,
                  ) -> tuple[list[bool], list[ClaimedCommand]]:
        """The completion transaction, with the next claim when ``claim_limit`` is given; the leases stay
        tracked by the heartbeat until it has committed.

        Returns:
            Per context, whether it was delivered; and what the claim claimed.
        """
        cfg = self.config

        def unit(tx: UnitOfWork) -> tuple[list[bool], list[ClaimedCommand]]:
            leases = [c.lease for c in contexts]
            if claim_limit is None:
                return tx.outbox.finish_many(leases), []
            return tx.outbox.finish_and_claim(leases, owner=cfg.worker_id, kinds=self.registry.kinds,
                                              limit=claim_limit, lease_seconds=cfg.lease_seconds,
                                              command_ids=self._only)

        committed = False
        try:
            for ctx in contexts:
                ctx.completing = True
            outcome, claimed = self.store.transact(unit, name="outbox.deliver")
            committed = True
            for ctx, ok in zip(contexts, outcome, strict=True):
                if ok:
                    ctx.finished = True  # the heartbeat stops renewing it at once
            return outcome, claimed
        finally:
            if committed or claim_limit is None:  # with a claim, a failure leaves them to a completion alone
                for ctx in contexts:
                    self.heartbeat.untrack(ctx)

    def _collect_completion(self) -> None:
        """Wait for the completion in flight (if any) and account for it on this thread."""
        if self._pending is None:
            return
        to_finish, future = self._pending
        self._pending = None
        try:
            outcome, _ = future.result()
        except StoreUnavailable as error:
            log.warning("store unavailable", extra={"event": "store_unavailable", "error": str(error)})
            return
        self._apply_outcome(to_finish, outcome)

    def _apply_outcome(self, contexts: list[CommandContext], outcome: list[bool]) -> None:
        for ctx, ok in zip(contexts, outcome, strict=True):
            if ok:
                self.stats.delivered += 1
            else:
                self.stats.lost += 1
                log.warning("lease lost before delivery", extra={"event": "lease_lost",
                                                                 "command_id": ctx.command.id})

    # ── waiting and stopping ──
    def _wait(self, seconds: float) -> None:
        """Wait until a slot returns, ``wake``, or ``seconds`` (less while a returned command waits for its
        completion); enforce time limits meanwhile."""
        timeout = min(seconds, 0.25)
        if self._first_returned is not None:
            timeout = min(timeout, max(0.0, self._first_returned + COMPLETION_DELAY_SECONDS - time.monotonic()))
        self._wake.wait(timeout)
        self._wake.clear()
        if self._pending is not None and self._pending[1].done():
            self._collect_completion()  # account for a finished completion while commands still run
        with self._lock:
            running = list(self._running.values())
        for ctx in running:
            ctx.should_interrupt()  # a handler past its time limit is interrupted even if it never checks
        self._collect_returned()

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

    def _drain(self) -> None:
        """After a stop: running commands finish within the grace period, are then interrupted, and after a
        bounded wait any still running gets its lease released anyway."""
        while self.in_flight and not self._grace_over():
            self._wait(0.25)
            self._deliver_returned(pipelined=False)
        if self.in_flight:
            self._interrupt_running()
            interrupted_at = time.monotonic()
            while self.in_flight and time.monotonic() < interrupted_at + (
                    HURRIED_INTERRUPT_WAIT_SECONDS if self._hurry else INTERRUPT_WAIT_SECONDS):
                self._wait(0.05)
        with self._lock:
            stuck = list(self._running.values())
        for ctx in stuck:
            log.error("handler did not stop when interrupted; releasing its lease", extra={
                "event": "handler_stuck", "command_id": ctx.command.id})
            if self._release(ctx) is _Outcome.RELEASED:
                self.stats.released += 1
        self._collect_returned()
        self._deliver_returned(pipelined=False)

    def _shutdown(self) -> None:
        self._collect_completion()
        if self._waiter is not None:
            self._waiter.close()
            self._waiter = None
        if self._completer is not None:
            self._completer.shutdown(wait=True)
            self._completer = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.heartbeat.stop()
        self.registration.stop()
