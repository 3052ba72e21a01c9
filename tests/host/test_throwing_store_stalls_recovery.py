"""Why first-write-wins matters (host-spec T6): a store that raises on a duplicate event append keeps recovery
from converging, so the invocation stays ``running`` until the recovery budget settles it, even though the
provider's effect succeeded. This pins that documented consequence; the event-append checks (host-spec U,
``fencepost.events.conformance``) are what catch such a store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

from fencepost.core.errors import Conflict
from fencepost.core.statuses import AdapterStatus, InvocationStatus
from fencepost.events.conformance import EventAppendSubject, run_event_append_checks
from fencepost.events.fencepost_subject import FencepostEventStore
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.sql.executor import Executor, Result
from fencepost.store.sql.queries import Query
from fencepost.store.sql.unit import SqlUnitOfWork
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, make_host, run_worker


class _RaisingOnDuplicate:
    """An executor whose event append raises where fencepost's returns False (the id is already stored)."""

    def __init__(self, inner: Executor, refused: list[str]) -> None:
        self._inner, self._refused, self.backend = inner, refused, inner.backend

    def run(self, query: Query, params: Mapping[str, Any]) -> Result:
        result = self._inner.run(query, params)
        duplicate = ((query.name == "next_event_sequence" and not result.rows)  # SQLite's three statements
                     or (query.name == "append_event_fused" and result.rows and not result.rows[0]["inserted"]))
        if duplicate:
            self._refused.append(str(params["id"]))
            raise Conflict(f"duplicate event id {params['id']}")
        return result

    def now(self) -> datetime:
        return self._inner.now()

    @property
    def single_statement(self) -> bool:
        return self._inner.single_statement

    def begin_block(self) -> None:
        self._inner.begin_block()

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._inner.execute_raw(sql, params)


class ThrowingOnDuplicateStore(FaultInjectingStore):
    """A real store (no injected fault) whose duplicate event appends raise instead of being no-ops."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, plan={})
        self.refused: list[str] = []

    @contextmanager
    def transaction(self, *, write: bool = True, name: str | None = None) -> Iterator[SqlUnitOfWork]:
        with self.inner.transaction(write=write, name=name) as opened:
            assert isinstance(opened, SqlUnitOfWork)
            opened.executor = _RaisingOnDuplicate(opened.executor, self.refused)
            yield opened


def _recover_after_a_crash_between_steps(store: Any, backend: StoreBackend, ledger: Ledger) -> Any:
    """Step ``charge`` succeeds and is checkpointed with its event; the worker dies before calling ``ship``;
    the next claims recover the invocation (idempotent: ``ship`` is called again, ``charge`` never). The
    recovery re-appends ``charge``'s success under its stable id (G11)."""
    adapter = Scripted(ledger, None, Crash())
    host = make_host(store, charge_action(Spy(), steps=("charge", "ship"), idempotent=True), adapter, recovery=2)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    with suppress(Crash):  # the worker dies between the steps
        run_worker(host, backend)
    assert [s.status for s in host.get(queued.id).steps] == [AdapterStatus.SUCCEEDED, AdapterStatus.RUNNING]
    for _ in range(3):
        backend.expire()
        run_worker(host, backend)
    assert len(ledger.charges) == 2  # both effects happened
    return host.get(queued.id)


def test_first_write_wins_store_converges(backend: StoreBackend, ledger: Ledger) -> None:
    view = _recover_after_a_crash_between_steps(backend.migrated(), backend, ledger)
    assert view.status is InvocationStatus.SUCCEEDED, view.error


def test_throwing_store_stalls_recovery(backend: StoreBackend, ledger: Ledger) -> None:
    """fencepost does not leave the invocation ``running`` until the budget: the refused re-append is a store
    error during finalization, settled as ``reconciliation_required`` at once (ADR 0040). Either way the
    effects succeeded and the invocation does not say so; the event checks fail such a store."""
    store = ThrowingOnDuplicateStore(backend.migrated())
    view = _recover_after_a_crash_between_steps(store, backend, ledger)
    assert len(store.refused) == 1
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert f"duplicate event id {store.refused[0]}" in (view.error or "")
    result = run_event_append_checks(EventAppendSubject(FencepostEventStore(store), "probe-tenant"))
    assert not result.passed
    assert {c.id for c in result.checks if c.status == "failed"} >= {"plain-append", "tx-append"}
