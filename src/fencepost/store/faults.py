"""Fault injection: a store wrapper that makes the Nth executed query fail (DESIGN.md, "Fault injection").

``FaultInjectingStore`` wraps a real SQL ``Store``. Every unit of work it opens is the real backend's,
except that its executor is wrapped by a counting shim: every port runs its queries through the unit's
executor (``fencepost.store.sql.unit``), so the shim sees each one by name, counts those that match, and
raises the chosen error *inside* the open transaction when the count reaches ``nth``. The real transaction
then rolls back exactly as it would on a genuine driver failure, which is what lets a test drive every
fallback path (a partial enqueue, a lost commit, a busy retry) without touching the backend code.

The fault fires once (then the wrapper is disarmed) unless ``times`` says otherwise; ``arm`` re-arms it.
``plan`` instead names, per query, exactly which of its occurrences fail (``{"insert_event": {2, 3, 5}}``):
several queries, non-consecutive occurrences, as the fallback paths of the action host need (issue 13).
Counting is shared by all threads and transactions of the wrapper, and is thread-safe. ``committed`` lists
each unit that committed, by name, with the queries it ran, so a test can assert commit order.

Example::

    faulty = FaultInjectingStore(store, nth=3, query="insert_receipt")
    RehearsalService(faulty).enqueue_attempt(run_id)   # raises StoreUnavailable; nothing persists
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from fencepost.core.errors import FencepostError, StoreUnavailable
from fencepost.store.base import MigrationStep, Store
from fencepost.store.sql.executor import Executor, Result
from fencepost.store.sql.queries import Query
from fencepost.store.sql.unit import SqlUnitOfWork


class FaultInjectingStore(Store):
    """A ``Store`` that delegates to ``inner`` and fails a chosen query.

    Args:
        inner: the real store (any backend).
        nth: fail the ``nth`` matching query (1-based), counted from construction or the last ``arm``.
        query: count only queries with this name (e.g. ``"insert_receipt"``); None counts every query.
        error: the error raised: a ``FencepostError`` subclass (instantiated with ``message``) or an
            instance. Defaults to ``StoreUnavailable``. A ``StoreBusy`` makes ``Store.transact`` retry.
        message: text of the raised error when ``error`` is a class.
        times: how many consecutive matching queries fail once ``nth`` is reached (default 1).
        plan: query name -> the 1-based occurrences of that query that fail; when given, ``nth``, ``query`` and
            ``times`` are ignored and the wrapper stays armed (``disarm`` stops it).

    Attributes:
        seen: matching queries executed since the last ``arm``.
        fired: how many times the fault has been raised since the last ``arm``.
        executed: names of every query executed through the wrapper, in order (all names, for assertions).
        committed: ``(unit name, [query names])`` of every unit that committed through ``transaction``, in
            commit order.
    """

    def __init__(self, inner: Store, *, nth: int = 1, query: str | None = None,
                 error: type[FencepostError] | FencepostError = StoreUnavailable,
                 message: str = "injected fault", times: int = 1,
                 plan: Mapping[str, Collection[int]] | None = None) -> None:
        super().__init__(clock=inner.clock, busy_wait_seconds=inner.busy_wait_seconds)
        self.inner = inner
        self.backend = inner.backend
        self.display_url = inner.display_url
        self._lock = threading.Lock()
        self.executed: list[str] = []
        self.committed: list[tuple[str | None, list[str]]] = []
        self.arm(nth=nth, query=query, error=error, message=message, times=times, plan=plan)

    def arm(self, *, nth: int, query: str | None = None,
            error: type[FencepostError] | FencepostError = StoreUnavailable,
            message: str = "injected fault", times: int = 1,
            plan: Mapping[str, Collection[int]] | None = None) -> None:
        """(Re)arm the fault and reset the counters (see the class docstring for the arguments).

        Raises:
            ValueError: ``nth`` or ``times`` is below 1, or a planned occurrence is.
        """
        if nth < 1 or times < 1:
            raise ValueError("nth and times are 1 or more")
        if plan is not None and any(n < 1 for occurrences in plan.values() for n in occurrences):
            raise ValueError("planned occurrences are 1 or more")
        with self._lock:
            self.plan = None if plan is None else {name: frozenset(o) for name, o in plan.items()}
            self.plan_seen: dict[str, int] = {}
            self.nth = nth
            self.query = query
            self.error = error
            self.message = message
            self.times = times
            self.seen = 0
            self.fired = 0
            self.armed = True

    def disarm(self) -> None:
        """Let every query through from now on."""
        with self._lock:
            self.armed = False

    def _should_fail(self, name: str) -> bool:
        with self._lock:
            self.executed.append(name)
            if self.plan is not None:
                if not self.armed or name not in self.plan:
                    return False
                self.plan_seen[name] = count = self.plan_seen.get(name, 0) + 1
                if count in self.plan[name]:
                    self.fired += 1
                    return True
                return False
            if not self.armed or (self.query is not None and name != self.query):
                return False
            self.seen += 1
            if self.seen < self.nth:
                return False
            self.fired += 1
            if self.fired >= self.times:
                self.armed = False
            return True

    def _raise(self) -> None:
        error = self.error
        if isinstance(error, FencepostError):
            raise error
        raise error(self.message)

    # ── units of work ──
    @contextmanager
    def transaction(self, *, write: bool = True, name: str | None = None) -> Iterator[SqlUnitOfWork]:
        """The inner store's unit of work, its executor wrapped by the counting shim.

        Raises:
            TypeError: the inner store is not a SQL store.
        """
        ran: list[str] = []
        with self.inner.transaction(write=write, name=name) as opened:
            if not isinstance(opened, SqlUnitOfWork):
                raise TypeError("FaultInjectingStore wraps SQL stores only")
            opened.executor = _CountingExecutor(opened.executor, self, ran)
            yield opened
        with self._lock:  # reached only when the unit committed
            self.committed.append((name, ran))

    # ── schema: straight delegation ──
    def migrations(self) -> list[MigrationStep]:
        return self.inner.migrations()

    def schema_version(self) -> int:
        return self.inner.schema_version()

    def migrate(self) -> list[MigrationStep]:
        return self.inner.migrate()

    def close(self) -> None:
        self.inner.close()


class _CountingExecutor:
    """An ``Executor`` that asks its ``FaultInjectingStore`` before each statement whether to fail it."""

    def __init__(self, inner: Executor, faults: FaultInjectingStore, ran: list[str]) -> None:
        self._inner = inner
        self._faults = faults
        self._ran = ran
        self.backend = inner.backend

    def run(self, query: Query, params: Mapping[str, Any]) -> Result:
        self._ran.append(query.name)
        if self._faults._should_fail(query.name):
            self._faults._raise()
        return self._inner.run(query, params)

    def now(self) -> datetime:
        return self._inner.now()

    @property
    def single_statement(self) -> bool:
        return self._inner.single_statement

    def begin_block(self) -> None:
        self._inner.begin_block()

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._inner.execute_raw(sql, params)

    def savepoint(self, name: str) -> None:
        self._inner.savepoint(name)

    def release(self, name: str) -> None:
        self._inner.release(name)

    def rollback_to(self, name: str) -> None:
        self._inner.rollback_to(name)
