"""The context a handler works in: its lease, fenced writes, and the lost/stop signals."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from fencepost.core.errors import LeaseLost
from fencepost.core.statuses import CommandStatus
from fencepost.store.base import Store
from fencepost.store.ports import FencedUnit
from fencepost.store.records import ClaimedCommand, Lease

T = TypeVar("T")


class StopRequested(Exception):
    """Raised by ``CommandContext.check`` at a safe point when the worker is stopping gracefully."""


class EnvironmentFailed(Exception):
    """The worker's own environment failed (disk I/O error, unwritable work directory), not the command.

    A handler raises it so that no verdict is invented: the worker records nothing and leaves the lease to
    expire, and another worker (perhaps on a healthy machine) takes the command over. An operator who
    knows better can abort the command meanwhile.
    """


class CommandContext:
    """One claimed command being handled.

    Attributes:
        command: the claimed command (id, kind, payload, initial lease).
        store: the control store.
        lease_seconds: the lease duration used for every renewal (seconds).
    """

    def __init__(self, store: Store, command: ClaimedCommand, lease_seconds: float,
                 stop: threading.Event | None = None) -> None:
        self.store = store
        self.command = command
        self.lease_seconds = lease_seconds
        self._lease = command.lease
        self._lock = threading.Lock()
        self._lost = threading.Event()
        self._stop = stop or threading.Event()
        self.finished = False
        # Set while the worker's batched completion of this command commits: a renewal that finds the lease
        # gone then is most likely that completion, whose own outcome says whether the lease was lost.
        self.completing = False

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
        return self._lost.is_set()

    def check(self) -> None:
        """Raise ``LeaseLost`` if fenced out, ``StopRequested`` if the worker is stopping."""
        self.check_lease()
        if self._stop.is_set():
            raise StopRequested()

    def check_lease(self) -> None:
        """Raise ``LeaseLost`` if a renewal found the lease gone (nothing more may be done or claimed)."""
        if self._lost.is_set():
            raise LeaseLost(f"lease on command {self.command.id} (delivery {self.delivery}) was lost")

    def _set_lease(self, lease: Lease) -> None:
        with self._lock:
            self._lease = lease

    def fenced(self, fn: Callable[[FencedUnit], T], *, name: str, finish: CommandStatus | None = None,
               error: str | None = None) -> T:
        """Run ``fn(tx)`` on a fenced unit of work and the lease fence in one write transaction.

        ``fn`` writes the parent records first, through the ``FencedUnit`` it is given (the only place the
        delivery's writes exist, ADR 0015); then, last in the transaction (Attempt-then-Outbox lock order),
        either the lease is renewed (heartbeat) or, with ``finish``, the command is finished
        (``Store.fenced``). A stale token makes that last statement touch zero rows: ``LeaseLost`` is raised
        and everything ``fn`` wrote is rolled back (DESIGN.md: a stale worker never persists anything).

        Args:
            fn: the writes of this decision; may run more than once on busy retries (no side effects).
            name: commit-boundary name for crash points (``<name>:before-commit``/``after-commit``).
            finish: DELIVERED or FAILED to finish the command in the same transaction.
            error: error text stored with a FAILED finish.
        Returns:
            What ``fn`` returned.
        Raises:
            LeaseLost: fenced out (also sets ``lost``).
        """
        if self._lost.is_set():
            raise LeaseLost(f"lease on command {self.command.id} (delivery {self.delivery}) was lost")

        try:
            result, renewed = self.store.fenced(self.lease, fn, name=name, lease_seconds=self.lease_seconds,
                                                finish=finish, error=error)
        except LeaseLost:
            self._lost.set()
            raise
        if renewed is None:
            self.finished = True
        else:
            self._set_lease(renewed)
        return result

    def heartbeat(self) -> bool:
        """Renew the lease in its own transaction and record it in heartbeat history.

        Returns:
            False when the lease is lost (``lost`` becomes True); True otherwise.
        """
        if self._lost.is_set() or self.finished:
            return not self._lost.is_set()
        try:
            renewed = self.store.transact(
                lambda tx: tx.outbox.renew(self.lease, lease_seconds=self.lease_seconds), name="outbox.heartbeat")
        except LeaseLost:
            self._lost.set()
            return False
        self._set_lease(renewed)
        return True
