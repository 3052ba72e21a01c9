"""The store: a ``Store`` opens units of work (``fencepost.store.ports.UnitOfWork``) on a control database.

Every backend implements this abstract class; the ports a unit of work offers are listed in
``fencepost.store.ports`` (SQL backends get them from ``fencepost.store.sql``). Driver errors are translated
into ``fencepost.core.errors`` at this boundary.
"""

from __future__ import annotations

import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from fencepost.core.clock import Clock, SystemClock
from fencepost.core.errors import InvalidInput, SchemaNotReady, StoreUnavailable
from fencepost.core.statuses import CommandStatus
from fencepost.store.claim_rotation import ClaimRotation
from fencepost.store.ports import FencedUnit, UnitOfWork
from fencepost.store.records import Lease

if TYPE_CHECKING:
    from fencepost.store.group_commit import GroupCommit

T = TypeVar("T")
_GROUP_COMMIT_LOCK = threading.Lock()


class StoreBusy(StoreUnavailable):
    """A transient contention error (SQLite busy, PostgreSQL serialization failure or deadlock).

    ``Store.transact`` retries these within a bounded wait; only then do they surface.
    """


class WorkWaiter:
    """How an idle worker waits for new work. This default polls: it sleeps out the wait.

    A backend that can announce new work (PostgreSQL LISTEN/NOTIFY, ADR 0014) returns a waiter whose wait
    ends early when a command of one of its kinds becomes due. Either way the worker claims again after
    every wait, so polling stays the fallback and a missed announcement only costs one poll interval.
    """

    #: ``"notify"`` when this waiter listens for announcements, ``"poll"`` when it only sleeps.
    mode = "poll"

    def wait_for_work(self, timeout_seconds: float, wake: threading.Event | None = None) -> bool:
        """Wait up to ``timeout_seconds`` (seconds) for new work.

        Args:
            timeout_seconds: the longest wait (the worker's poll interval).
            wake: an event that ends the wait early when set (stop requested, in-process enqueue); the
                caller clears it.
        Returns:
            True when work was announced (claim now), False when the wait timed out or ``wake`` ended it.
        """
        (wake or threading.Event()).wait(timeout_seconds)
        return False

    def close(self) -> None:
        """Release what the waiter holds (a listening connection). Idempotent."""


@dataclass(frozen=True)
class MigrationStep:
    version: int
    name: str
    sql: str
    checksum: str


class Store(ABC):
    """A control database. Thread-safe: each thread gets its own connection.

    Attributes:
        backend: ``"sqlite"`` or ``"postgres"``.
        display_url: the URL with any password and path removed, safe to print.
        clock: the lease clock on SQLite; informational on PostgreSQL (the server's clock rules).
        busy_wait_seconds: bound on retrying transient contention inside ``transact``.
    """

    backend: str
    display_url: str

    def __init__(self, clock: Clock | None = None, busy_wait_seconds: float = 30.0) -> None:
        self.clock: Clock = clock or SystemClock()
        self.busy_wait_seconds = busy_wait_seconds
        #: Where the next claim starts among the sorted kinds (fair claims, issue 10 item 4): one per store,
        #: shared by its threads.
        self.claim_rotation = ClaimRotation()

    # ── units of work ──
    @abstractmethod
    def transaction(self, *, write: bool = True,
                    name: str | None = None) -> AbstractContextManager[UnitOfWork, bool | None]:
        """Context manager yielding a ``UnitOfWork``.

        ``write=True`` takes the write reservation first (SQLite ``BEGIN IMMEDIATE``); commits on normal
        exit, rolls back on any exception. Raises ``StoreBusy``/``StoreUnavailable`` on driver errors.
        ``name`` labels the commit boundary: crash points ``<name>:before-commit`` and
        ``<name>:after-commit`` fire around COMMIT (``fencepost.core.crashpoints``).
        """

    def transact(self, fn: Callable[[UnitOfWork], T], *, write: bool = True, name: str | None = None) -> T:
        """Run ``fn(tx)`` in one transaction, retrying it whole on ``StoreBusy``.

        ``fn`` must be free of side effects outside the transaction, since it may run more than once.
        Retries back off with jitter (5 ms doubling to 250 ms) until ``busy_wait_seconds`` elapse, then
        the last ``StoreBusy`` is raised.
        """
        deadline = time.monotonic() + self.busy_wait_seconds
        delay = 0.005
        while True:
            try:
                with self.transaction(write=write, name=name) as tx:
                    return fn(tx)
            except StoreBusy:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.25)

    def unit_on(self, connection: Any) -> AbstractContextManager[UnitOfWork, bool | None]:
        """A unit of work on an application-owned connection that is already inside a transaction, for writes
        that must commit with the application's own (``Host.submit(..., tx=)``, host-spec §1.Y-16, ADR 0033).
        The unit never commits, rolls back or closes the connection: the application does.

        Only PostgreSQL offers it (``PostgresStore.unit_on``). On SQLite the application writes its rows in
        fencepost's own unit instead: ``store.transaction()`` runs on ``SQLiteStore.connection()``.

        Raises:
            InvalidInput: this backend cannot work on an application connection.
        """
        raise InvalidInput(f"a {self.backend} store cannot work on an application's connection: open "
                           "store.transaction() and write your rows on store.connection() inside it")

    def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        """Run a read-only ``fn(tx)`` on one consistent snapshot."""
        return self.transact(fn, write=False)

    def fenced(self, lease: Lease, fn: Callable[[FencedUnit], T], *, name: str, lease_seconds: float,
               finish: CommandStatus | None = None, error: str | None = None,
               renew: bool = True, group: bool = False) -> tuple[T, Lease | None]:
        """Run ``fn`` on a fenced unit under ``lease``, then the fence, last, in the same write transaction.

        The fence is the renewal of ``lease`` by ``lease_seconds`` (seconds) or, with ``renew=False``, the
        check that holds it until COMMIT without writing (``OutboxPort.hold``, ADR 0079), or, with ``finish``
        (DELIVERED or FAILED, ``error`` stored with FAILED), the command's terminal write. A stale token
        makes the fence touch zero rows: ``LeaseLost`` is raised and everything ``fn`` wrote is rolled back
        (ADR 0002: the fence is the last statement; a stale worker never persists anything). This is the
        only way to reach a ``FencedUnit`` (ADR 0015). ``fn`` may run more than once on busy retries.

        With ``group``, the unit may share its transaction with units other threads of this process submit at the
        same time (``group_commit``; each in its own savepoint, one COMMIT for all, ADR 0079). ``fn`` must then not
        call back into code that waits for another thread.

        Returns:
            ``(what fn returned, the renewed lease)``: ``lease`` itself when held without renewal, None after
            ``finish``.
        Raises:
            LeaseLost: fenced out. StoreUnavailable: the store failed or stayed busy.
        """

        def unit(tx: UnitOfWork) -> tuple[T, Lease | None]:
            result = fn(tx._fence(lease))
            if finish is not None:
                tx.outbox.finish(lease, finish, error)
                return result, None
            if not renew:
                tx.outbox.hold(lease)
                return result, lease
            return result, tx.outbox.renew(lease, lease_seconds=lease_seconds)

        if group:
            return self.group_commit.run(unit, name=name)
        return self.transact(unit, name=name)

    @property
    def group_commit(self) -> GroupCommit:
        """This store's group committer (made on first use; ``fencepost.store.group_commit``)."""
        from fencepost.store.group_commit import GroupCommit  # imported here: it imports StoreBusy from here

        committer = self.__dict__.get("_group_commit")
        if committer is None:
            with _GROUP_COMMIT_LOCK:
                committer = self.__dict__.setdefault("_group_commit", GroupCommit(self))
        assert isinstance(committer, GroupCommit)
        return committer

    def work_waiter(self, kinds: Sequence[str], *, listen: bool = True, name: str | None = None) -> WorkWaiter:
        """A waiter for one idle worker claiming ``kinds`` (close it when the worker stops).

        ``listen`` asks for announcements of new work where the backend has them (PostgreSQL); this
        default, and ``listen=False``, poll: the waiter sleeps out each wait. ``name`` (the worker id)
        labels what the waiter holds, e.g. the listening connection's ``application_name``.
        """
        return WorkWaiter()

    # ── schema ──
    @abstractmethod
    def migrations(self) -> list[MigrationStep]:
        """Every migration of this backend, in order."""

    @abstractmethod
    def schema_version(self) -> int:
        """The highest applied migration version (0 when unmigrated)."""

    @abstractmethod
    def migrate(self) -> list[MigrationStep]:
        """Apply pending migrations in order, each in its own transaction; return those applied.

        Raises:
            SchemaNotReady: an applied migration's checksum differs from the shipped file, or the
                database is newer than this fencepost.
        """

    @property
    def expected_version(self) -> int:
        return max((m.version for m in self.migrations()), default=0)

    def require_schema(self) -> None:
        """Refuse to work on an unmigrated, older or newer schema (seed: migration remains required).

        Raises:
            SchemaNotReady: with one line that names ``fencepost migrate``.
        """
        found, expected = self.schema_version(), self.expected_version
        if found == expected:
            return
        if found > expected:
            raise SchemaNotReady(
                f"the control database schema is version {found}, newer than this fencepost "
                f"understands ({expected}); upgrade fencepost"
            )
        what = "unmigrated" if found == 0 else f"at schema version {found}"
        raise SchemaNotReady(
            f"the control database is {what}; this fencepost needs version {expected}: "
            "run `fencepost migrate` first"
        )

    def physical_checks(self) -> list[tuple[str, str, str]]:
        """Engine-level integrity findings ``(check, subject, detail)``; none by default (PostgreSQL
        enforces constraints itself). SQLite runs ``integrity_check`` and ``foreign_key_check``."""
        return []

    @abstractmethod
    def close(self) -> None:
        """Close every connection this store opened."""
