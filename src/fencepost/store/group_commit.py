"""Group commit: fenced units that threads of one process submit together share one write transaction.

Each unit keeps its own atomicity: it runs inside a savepoint of the shared transaction, and when it raises,
the savepoint is rolled back and only that unit's caller gets the error, exactly as if the unit had run alone
and rolled back. The units that did not raise commit together with one COMMIT (on SQLite one WAL fsync, on
PostgreSQL one WAL flush and one round trip), and each caller returns only after that COMMIT: a unit's
durability before its caller goes on (a step's ``running`` row before the provider is called, host-spec E5) is
the same as with its own transaction. ADR 0079 gives the reasons and the limits.

There is no timer and no batching window. The first thread to arrive while no group is being written leads:
it takes every unit queued by then (at most ``max_units``, its own first) and writes them; threads arriving
meanwhile queue for the next group, whose first unit's thread leads it. A lone unit therefore costs what its
own transaction costs, and units wait only for the group being written when they arrived.

Crash points: each unit's ``<name>:before-commit`` fires before the shared COMMIT, its ``<name>:after-commit``
after it, so a SIGKILL there leaves each unit of the group exactly as it would leave a unit of its own.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fencepost.core.crashpoints import crashpoint
from fencepost.core.errors import StoreUnavailable, TransactionAborted
from fencepost.store.base import StoreBusy

if TYPE_CHECKING:
    from fencepost.store.base import Store
    from fencepost.store.ports import UnitOfWork

T = TypeVar("T")

#: The most units one shared transaction writes. Larger groups hold the write lock (SQLite) and the rows they
#: lock (PostgreSQL) longer for every unit in them.
DEFAULT_MAX_UNITS = 64


@dataclass
class _Unit(Generic[T]):
    fn: Callable[[UnitOfWork], T]
    name: str | None
    context: contextvars.Context
    ready: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # this unit's thread writes the next group
    done: bool = False
    result: Any = None
    error: BaseException | None = None


class GroupCommit:
    """The group committer of one store (one per process and store; thread-safe).

    Args:
        store: the store whose ``transact`` writes each group (its busy retries re-run the whole group).
        max_units: at most this many units per shared transaction (>= 1).
    """

    def __init__(self, store: Store, *, max_units: int | None = None) -> None:
        max_units = DEFAULT_MAX_UNITS if max_units is None else max_units
        if max_units < 1:
            raise ValueError("a group holds at least one unit")
        self.store = store
        self.max_units = max_units
        self._lock = threading.Lock()
        self._queue: list[_Unit[Any]] = []
        self._leading = False
        #: Groups written and units in them (for the benchmarks' counts and the tests).
        self.groups = 0
        self.units = 0

    @property
    def waiting(self) -> int:
        """Units queued for the next group (not yet being written)."""
        with self._lock:
            return len(self._queue)

    def run(self, fn: Callable[[UnitOfWork], T], *, name: str | None = None) -> T:
        """Run ``fn(tx)`` as one unit of a shared write transaction; return what it returned once committed.

        ``fn`` runs on whichever thread leads its group, in a copy of the caller's ``contextvars`` context; like
        any ``Store.transact`` unit it may run more than once (a busy retry re-runs the group) and must have no
        effect outside the transaction.

        Raises:
            What ``fn`` raised (its writes rolled back, the group's others unaffected); StoreBusy or
            StoreUnavailable when the shared transaction itself could not commit (then no unit of it committed).
        """
        unit: _Unit[T] = _Unit(fn, name, contextvars.copy_context())
        with self._lock:
            self._queue.append(unit)
            if not self._leading:
                self._leading = unit.lead = True
        while not unit.done:
            if unit.lead:
                self._write_next_group()
            else:
                unit.ready.wait()
                unit.ready.clear()
        if unit.error is not None:
            raise unit.error
        result: T = unit.result
        return result

    def _write_next_group(self) -> None:
        with self._lock:
            group, self._queue = self._queue[:self.max_units], self._queue[self.max_units:]
        try:
            self._write(group)
        finally:
            with self._lock:
                self.groups += 1
                self.units += len(group)
                if self._queue:  # the first waiting unit's thread leads the next group
                    nxt = self._queue[0]
                    nxt.lead = True
                    nxt.ready.set()
                else:
                    self._leading = False
            for unit in group:
                unit.lead = False
                unit.done = True
                unit.ready.set()

    def _write(self, group: list[_Unit[Any]]) -> None:
        if len(group) == 1:  # alone: its own transaction, named, exactly as without group commit
            [unit] = group
            try:
                unit.result = unit.context.run(self.store.transact, unit.fn, name=unit.name)
            except Exception as error:
                unit.error = error
            return

        def shared(tx: UnitOfWork) -> None:
            for unit in group:
                unit.result, unit.error = None, None
                try:
                    with tx.savepoint():
                        unit.result = unit.context.run(unit.fn, tx)
                except (StoreBusy, TransactionAborted):
                    raise  # contention, or the transaction itself is gone: the whole group is retried or fails
                except Exception as error:  # this unit's outcome alone; its savepoint is rolled back
                    unit.error = error
            for unit in group:
                if unit.error is None and unit.name:
                    crashpoint(f"{unit.name}:before-commit")

        try:
            self.store.transact(shared)
        except StoreUnavailable as error:
            for unit in group:
                unit.result, unit.error = None, _copy(error)
            return
        except BaseException as error:  # KeyboardInterrupt, SystemExit on the leading thread: nothing committed
            for unit in group:
                unit.result, unit.error = None, StoreUnavailable(
                    f"the shared transaction was interrupted ({type(error).__name__}); nothing of it committed")
            raise
        for unit in group:
            if unit.error is None and unit.name:
                crashpoint(f"{unit.name}:after-commit")


def _copy(error: StoreUnavailable) -> StoreUnavailable:
    """An error of the same type for each waiting caller (one exception object raised in several threads would
    share one traceback), chained to the original."""
    try:
        copy = type(error)(str(error))
    except TypeError:
        copy = StoreUnavailable(str(error))
    copy.__cause__ = error
    return copy
