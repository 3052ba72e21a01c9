"""The SQL unit of work: every port over one ``Executor``, and its fenced view under a lease.

``SqlUnitOfWork.run`` is the one path from a port to the executor, so a wrapper of the executor
(``fencepost.store.faults``) sees every statement by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from fencepost.core.errors import LeaseLost
from fencepost.store.claim_rotation import ClaimRotation
from fencepost.store.records import Lease
from fencepost.store.sql.admission import SqlAdmission
from fencepost.store.sql.audit import SqlAudit
from fencepost.store.sql.catalog import SqlCatalog
from fencepost.store.sql.delivery import SqlDelivery
from fencepost.store.sql.event_leases import SqlEventLeases
from fencepost.store.sql.events import SqlEvents
from fencepost.store.sql.executor import Executor, Result
from fencepost.store.sql.host import SqlHost
from fencepost.store.sql.lease import lease_held
from fencepost.store.sql.outbox import SqlOutbox
from fencepost.store.sql.progress import SqlProgress
from fencepost.store.sql.queries import Query
from fencepost.store.sql.rehearsal import SqlFencedRehearsal, SqlRehearsal
from fencepost.store.sql.workers import SqlWorkers

_SAVEPOINT = "fencepost_unit"


class SqlUnitOfWork:
    """A ``UnitOfWork`` (``fencepost.store.ports``) over one open transaction of a SQL backend.

    Args:
        executor: the open transaction.
        queries: the dialect's queries by name (``fencepost.store.sql.queries.load_dialect``).
        claim_rotation: the store's rotation of the first kind a claim serves (``SqlOutbox``).
    """

    def __init__(self, executor: Executor, queries: Mapping[str, Query],
                 claim_rotation: ClaimRotation | None = None) -> None:
        self.executor = executor
        self.queries = queries
        self.backend = executor.backend
        self.outbox = SqlOutbox(self, claim_rotation)
        self.rehearsal = SqlRehearsal(self)
        self.catalog = SqlCatalog(self)
        self.admission = SqlAdmission(self)
        self.audit = SqlAudit(self, queries, settle_events=lambda: self.events.settle())
        self.workers = SqlWorkers(self)
        self.host = SqlHost(self)
        self.events = SqlEvents(self)
        # ADR 0040: the store conformance checks
        self.event_leases = SqlEventLeases(self, settle_events=lambda: self.events.settle())
        self.delivery = SqlDelivery(self)  # ADRs 0055, 0056
        self.progress = SqlProgress(self)  # ADR 0072: workflow execution
        #: The lease whose fence ``Store.fenced`` runs last in this unit, once ``_fence`` made it a fenced unit.
        self.fenced_by: Lease | None = None

    def now(self) -> datetime:
        return self.executor.now()

    @property
    def single_statement(self) -> bool:
        """The unit runs its one statement without a transaction block (``Executor.single_statement``)."""
        return self.executor.single_statement

    def begin_block(self) -> None:
        """Open the transaction block before a second statement (``Executor.begin_block``)."""
        self.executor.begin_block()

    def run(self, name: str, params: Mapping[str, Any]) -> Result:
        """Execute the named query of this dialect."""
        return self.executor.run(self.queries[name], params)

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Ad-hoc SQL for tests and benchmarks (see ``Executor.execute_raw``)."""
        return self.executor.execute_raw(sql, params)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested unit: its writes are rolled back alone when the block raises (the error propagates), and
        kept as part of this transaction otherwise (``fencepost.store.group_commit``).

        Raises:
            TransactionAborted: the nested unit failed and could not be rolled back alone.
        """
        self.executor.savepoint(_SAVEPOINT)
        try:
            yield
        except BaseException:
            self.executor.rollback_to(_SAVEPOINT)
            raise
        self.executor.release(_SAVEPOINT)

    def _fence(self, lease: Lease) -> SqlFencedUnit:
        self.fenced_by = lease  # Store.fenced ends this unit with the fence on it (hold, renew or finish)
        return SqlFencedUnit(self, lease)


class SqlFencedUnit:
    """A ``FencedUnit``: the unit's ports, with the rehearsal port's delivery writes under ``lease``."""

    def __init__(self, unit: SqlUnitOfWork, lease: Lease) -> None:
        self.unit = unit
        self.lease = lease
        self.backend = unit.backend
        self.outbox = unit.outbox
        self.catalog = unit.catalog
        self.admission = unit.admission
        self.audit = unit.audit
        self.workers = unit.workers
        self.host = unit.host
        self.events = unit.events
        self.event_leases = unit.event_leases
        self.delivery = unit.delivery
        self.progress = unit.progress
        self.rehearsal = SqlFencedRehearsal(unit, lease)

    def now(self) -> datetime:
        return self.unit.now()

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Ad-hoc SQL for tests (see ``Executor.execute_raw``): a write here has no lease condition of its own,
        so it stands for any child row the unit's fence alone protects."""
        return self.unit.execute_raw(sql, params)

    def require_lease(self) -> None:
        if not lease_held(self.unit, self.lease):
            raise LeaseLost(f"lease on command {self.lease.command_id} (delivery {self.lease.delivery}) was lost")
