"""The context a handler works in: its lease, fenced units, and the signals that stop it.

A handler learns three things from its context, and each has one meaning (seed: "Heartbeat And Takeover";
issue 10):

- **lost**: a renewal found the lease gone. Stop at once and persist nothing (``LeaseLost``).
- **interrupted by a stop**: the worker is stopping and the grace period is over, or a second signal came.
  A stop is never a fact about the work: nothing more is recorded (``fenced`` refuses) and the worker
  releases the lease (``StopRequested``).
- **interrupted by the time limit**: the command ran past its kind's limit. That *is* a fact about the work,
  a definite outcome the handler records with the limit (``TimeLimitExceeded``).

``should_interrupt()`` is true for all three, so a long statement (the sandbox's SQLite progress handler)
stops within milliseconds; the handler then tells them apart with ``check()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

from fencepost.core.errors import LeaseLost
from fencepost.core.statuses import CommandStatus
from fencepost.store.base import Store
from fencepost.store.ports import FencedUnit
from fencepost.store.records import ClaimedCommand, Lease

T = TypeVar("T")


class StopRequested(Exception):
    """The worker is stopping and this command was interrupted: record nothing; the worker releases it."""


class TimeLimitExceeded(Exception):
    """The command ran past its time limit: a definite outcome of the work, recorded with the limit.

    Attributes:
        limit_seconds: the limit that was exceeded (seconds).
    """

    def __init__(self, limit_seconds: float) -> None:
        super().__init__(f"time limit exceeded ({limit_seconds:g} s)")
        self.limit_seconds = limit_seconds


class EnvironmentFailed(Exception):
    """The worker's own environment failed (disk I/O error, unwritable work directory), not the command.

    A handler raises it so that no verdict is invented: the worker records nothing and leaves the lease to
    expire, and another worker (perhaps on a healthy machine) takes the command over. An operator who
    knows better can abort the command meanwhile.
    """


class Interrupt(StrEnum):
    """Why a running command was interrupted."""

    STOP = "stop"
    TIME_LIMIT = "time_limit"


class CommandContext:
    """One claimed command being handled.

    Args:
        store: the control store.
        command: the claimed command (id, kind, payload, initial lease).
        lease_seconds: the lease duration used for every renewal (seconds).
        time_limit: the command's time limit (seconds from ``start()``), or None for none.

    Attributes:
        finished: the command's terminal write committed (by the handler or the worker's completion).
        completing: the worker's batched completion of this command is committing.
    """

    def __init__(self, store: Store, command: ClaimedCommand, lease_seconds: float,
                 time_limit: float | None = None) -> None:
        self.store = store
        self.command = command
        self.lease_seconds = lease_seconds
        self.time_limit = time_limit
        self._lease = command.lease
        self._lock = threading.RLock()  # reentrant: a signal handler on the main thread may take it
        self._lost = False  # set once by the thread that found the lease gone; never cleared
        self._interrupt: Interrupt | None = None
        self._interrupted_at: float | None = None
        self._deadline: float | None = None
        self.finished = False
        #: The status the handler's own finishing unit wrote (DELIVERED or FAILED), once it committed.
        self.finished_status: CommandStatus | None = None
        # Set while the worker's batched completion of this command commits: a renewal that finds the lease
        # gone then is most likely that completion, whose own outcome says whether the lease was lost.
        self.completing = False
        #: Whether a fenced unit without ``finish`` renews the lease (True) or only holds it (ADR 0079): a
        #: handler whose units are frequent and short (the action host) sets False and leaves renewal to the
        #: heartbeat, so each unit writes no lease history row.
        self.renew_at_fence = True
        #: Whether fenced units share commits with other threads' units by default (ADR 0079).
        self.group_units = False

    @property
    def lease(self) -> Lease:
        with self._lock:
            return self._lease

    @property
    def delivery(self) -> int:
        """The public delivery number (1 for the first delivery, +1 per takeover)."""
        return self.command.lease.delivery

    @property
    def lost(self) -> bool:
        """True once any renewal found the lease gone: stop the work, persist nothing more."""
        return self._lost

    @property
    def interrupted(self) -> Interrupt | None:
        """Why the command was interrupted, or None."""
        return self._interrupt

    def start(self, now: float | None = None) -> None:
        """The work starts now (``time.monotonic()``): the time limit counts from here. A handler whose limit
        applies per step (a rehearsal's per scenario) calls it at each step; an earlier step's time limit
        interruption, if any, does not carry over (that step recorded it)."""
        if self.time_limit is not None:
            self._deadline = (time.monotonic() if now is None else now) + self.time_limit
        with self._lock:
            if self._interrupt is Interrupt.TIME_LIMIT:
                self._interrupt = None
                self._interrupted_at = None

    def pause(self) -> None:
        """Stop the clock (between steps): time spent recording a step, waiting on the store, never counts
        against the next step's limit."""
        self._deadline = None

    def past_deadline(self, now: float | None = None) -> bool:
        """Whether the time limit has run out (False without a limit or before ``start``)."""
        deadline = self._deadline  # read once: ``pause`` on the slot thread may clear it while a watcher asks
        return deadline is not None and (time.monotonic() if now is None else now) >= deadline

    def interrupt(self, reason: Interrupt) -> None:
        """Interrupt the command; the first reason wins (a stop after a time limit changes nothing)."""
        with self._lock:
            if self._interrupt is None:
                self._interrupt = reason
                self._interrupted_at = time.monotonic()

    def interrupted_for(self, now: float | None = None) -> float:
        """Seconds since the command was interrupted (0 when it was not)."""
        if self._interrupted_at is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self._interrupted_at

    def should_interrupt(self) -> bool:
        """True when the running work should stop now: lease lost, interrupted, or past its time limit."""
        if self._lost or self._interrupt is not None:
            return True
        if self.past_deadline():
            self.interrupt(Interrupt.TIME_LIMIT)
            return True
        return False

    def check(self) -> None:
        """At a safe point: raise if the work must stop.

        Raises:
            LeaseLost: fenced out. StopRequested: interrupted by a stop.
            TimeLimitExceeded: past the time limit.
        """
        self.check_lease()
        self.should_interrupt()
        if self._interrupt is Interrupt.STOP:
            raise StopRequested()
        if self._interrupt is Interrupt.TIME_LIMIT:
            assert self.time_limit is not None
            raise TimeLimitExceeded(self.time_limit)

    def check_lease(self) -> None:
        """Raise ``LeaseLost`` if a renewal found the lease gone (nothing more may be done or claimed)."""
        if self._lost:
            raise LeaseLost(f"lease on command {self.command.id} (delivery {self.delivery}) was lost")

    def _set_lease(self, lease: Lease) -> None:
        with self._lock:
            self._lease = lease

    def fenced(self, fn: Callable[[FencedUnit], T], *, name: str, finish: CommandStatus | None = None,
               error: str | None = None, renew: bool | None = None, group: bool | None = None) -> T:
        """Run ``fn(tx)`` on a fenced unit of work and the lease fence in one write transaction.

        ``fn`` writes the parent records first, through the ``FencedUnit`` it is given (the only place the
        delivery's writes exist, ADR 0015); then, last in the transaction (Attempt-then-Outbox lock order),
        either the lease is renewed (heartbeat) or, with ``finish``, the command is finished
        (``Store.fenced``). A stale token makes that last statement touch zero rows: ``LeaseLost`` is raised
        and everything ``fn`` wrote is rolled back (DESIGN.md: a stale worker never persists anything).
        After a stop interrupted the command nothing is written at all (issue 10: a stop is never a fact
        about the work).

        Args:
            fn: the writes of this decision; may run more than once on busy retries (no side effects).
            name: commit-boundary name for crash points (``<name>:before-commit``/``after-commit``).
            finish: DELIVERED or FAILED to finish the command in the same transaction.
            error: error text stored with a FAILED finish.
            renew: without ``finish``, whether the fence renews the lease (and records a heartbeat) or only holds
                it until COMMIT (``OutboxPort.hold``; the heartbeat thread renews it, ADR 0079). None: the
                context's ``renew_at_fence``.
            group: whether the unit may share its COMMIT with other threads' units (``Store.fenced``, ADR 0079);
                None: the context's ``group_units``. Never for a unit that runs user code.
        Returns:
            What ``fn`` returned.
        Raises:
            LeaseLost: fenced out (also sets ``lost``). StopRequested: interrupted by a stop.
        """
        self.check_lease()
        if self._interrupt is Interrupt.STOP:
            raise StopRequested()
        # A heartbeat racing this unit's finish finds the lease gone once it commits: not a lost lease.
        self.completing = finish is not None
        try:
            result, renewed = self.store.fenced(self.lease, fn, name=name, lease_seconds=self.lease_seconds,
                                                finish=finish, error=error,
                                                renew=self.renew_at_fence if renew is None else renew,
                                                group=self.group_units if group is None else group)
        except LeaseLost:
            self._lost = True
            raise
        except BaseException:
            self.completing = False
            raise
        if renewed is None:
            self.finished = True
            self.finished_status = finish
        else:
            self._set_lease(renewed)
        return result

    def heartbeat(self) -> bool:
        """Renew the lease in its own transaction and record it in heartbeat history.

        Returns:
            False when the lease is lost (``lost`` becomes True); True otherwise.
        """
        if self._lost or self.finished:
            return not self._lost
        try:
            renewed = self.store.transact(
                lambda tx: tx.outbox.renew(self.lease, lease_seconds=self.lease_seconds), name="outbox.heartbeat")
        except LeaseLost:
            self._lost = True
            return False
        self._set_lease(renewed)
        return True
