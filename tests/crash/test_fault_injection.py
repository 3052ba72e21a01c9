"""Fault injection over every write of a whole rehearsal Attempt's path (``fencepost.store.faults``).

The path of one successful Attempt writes 39 times in 9 kinds of transaction (38 on PostgreSQL, whose claim
writes its history rows itself): enqueue (command, Attempt, six Receipts), claim, start, five Receipt
transitions and the final succeed (``PATH`` below, checked against a real run first). For each N, the N-th
write raises a *driver* error (``sqlite3.OperationalError`` "disk I/O
error", PostgreSQL ``XX000`` internal error) inside the open transaction, as a failing disk or server would.
Each time:

- the operation fails cleanly: the caller sees a fencepost error (``StoreUnavailable``), never a driver
  exception, and the worker abandons the command for takeover rather than failing the Attempt;
- nothing partial stays: the durable state is exactly the one before the failed transaction (``state``
  below), ``fencepost audit``'s checks and the structural check are clean;
- the next worker converges: the Attempt ends SUCCEEDED with one terminal lease event, and the gate passes.

Default: SQLite WAL/FULL and PostgreSQL; SQLite DELETE/FULL is soak.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg.errors
import pytest
from crash_flows import EXAMPLE_PACKAGE, selected_backend
from crash_harness import claim_count, receipt_codes_of, terminal_events, unsound

from fencepost.core.errors import FencepostError, StoreUnavailable
from fencepost.core.statuses import AttemptStatus
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.heartbeat import Heartbeat
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.sql.queries import load_dialect
from helpers.store_backends import StoreBackend


@dataclass(frozen=True)
class Step:
    """One transaction of the path: its writes, and the durable state if any of them fails.

    ``state`` is ``"<Attempt> <command> <receipts> <delivery_count>"``, or None when no Attempt may exist.
    """

    transaction: str
    writes: tuple[str, ...]
    state: str | None
    deliveries: int  # delivery_count once the next worker has converged


def _receipt_steps() -> list[Step]:
    return [Step(f"rehearsal.receipt {k}", ("receipt_finish", "receipt_running", "renew_lease", "insert_lease_event"),
                 f"RUNNING PROCESSING {'S' * (k - 1)}R{'P' * (6 - k)} 1", 2) for k in range(1, 6)]


PATH: tuple[Step, ...] = (
    Step("rehearsal.enqueue", ("insert_command", "insert_attempt", *["insert_receipt"] * 6), None, 1),
    Step("outbox.claim", ("claim_commands", "insert_lease_events"), "PENDING PENDING PPPPPP 0", 1),
    Step("rehearsal.start", ("start_attempt", "reset_receipts", "receipt_running", "renew_lease",
                             "insert_lease_event"), "PENDING PROCESSING PPPPPP 1", 2),
    *_receipt_steps(),
    Step("rehearsal.succeed", ("receipt_finish", "finish_attempt", "finish_command", "insert_lease_event"),
         "RUNNING PROCESSING SSSSSR 1", 2),
)
WRITES: tuple[tuple[Step, str], ...] = tuple((step, name) for step in PATH for name in step.writes)
#: Writes a dialect folds into another statement: PostgreSQL's claim writes its lease history rows in the
#: claim statement itself (a data-modifying CTE, ADR 0018).
FOLDED: dict[str, dict[str, set[str]]] = {"postgres": {"outbox.claim": {"insert_lease_events"}}}


def writes_of(backend_name: str) -> tuple[tuple[Step, str], ...]:
    """``WRITES`` as ``backend_name`` runs them (``sqlite-wal``, ``sqlite-delete``, ``postgres``)."""
    folded = FOLDED.get(backend_name, {})
    return tuple((step, name) for step, name in WRITES if name not in folded.get(step.transaction, set()))
_SQL = load_dialect("fencepost.store.sqlite")


def is_write(query: str) -> bool:
    """A query that changes rows (by its SQLite text; both dialects share the names)."""
    lines = [line for line in _SQL[query].sql.splitlines() if line.strip() and not line.strip().startswith("--")]
    return lines[0].split()[0].upper() in ("INSERT", "UPDATE", "DELETE")


class DriverFaults(FaultInjectingStore):
    """``FaultInjectingStore`` raising the backend's own driver exception, not an already translated one, so
    the store's error translation is part of what runs."""

    def _raise(self) -> None:
        if self.backend == "sqlite":
            raise sqlite3.OperationalError("disk I/O error (injected)")
        raise psycopg.errors.lookup("XX000")("internal error (injected)")


# ── the rig ──
def _params() -> list[object]:
    return [pytest.param("sqlite-wal", id="sqlite-wal"),
            pytest.param("sqlite-delete", id="sqlite-delete", marks=pytest.mark.soak),
            pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=_params())
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    with selected_backend(str(request.param), tmp_path) as b:
        yield b


def worker(store: Store, work_dir: Path, lease_seconds: float, worker_id: str, heartbeat: bool = True) -> Worker:
    registry = HandlerRegistry()
    registry.register(KIND, AttemptHandler(work_dir))
    w = Worker(store, registry, WorkerConfig(poll_interval=0.01, batch_size=1, lease_seconds=lease_seconds,
                                             worker_id=worker_id))
    if not heartbeat:
        # The faulty delivery runs without background heartbeats, so the write sequence is exactly PATH.
        w.heartbeat = Heartbeat(3600.0)
    return w


def expire(backend: StoreBackend, lease_seconds: float) -> None:
    if backend.clock is not None:
        backend.clock.advance(lease_seconds + 1)
    else:
        time.sleep(lease_seconds + 0.05)


def lease_for(backend: StoreBackend) -> float:
    return backend.short_lease


# ── tests ──
def test_the_path_writes_exactly_as_listed(backend: StoreBackend, tmp_path: Path) -> None:
    """``PATH`` is the real write sequence of one Attempt (if this fails, update ``PATH`` with the code)."""
    store = backend.migrated()
    run = RehearsalService(store).create_run(EXAMPLE_PACKAGE)
    spy = FaultInjectingStore(store, nth=10**9)  # never fires: records every query
    RehearsalService(spy).enqueue_attempt(run.id)
    assert worker(spy, tmp_path / "work", lease_for(backend), "spy", heartbeat=False).run_once() == 1
    assert [q for q in spy.executed if is_write(q)] == [name for _, name in writes_of(backend.name)]
    assert RehearsalService(store).attempts(run.id)[0].status is AttemptStatus.SUCCEEDED


def _write_cases() -> list[object]:
    """One case per write of each backend's own path (``writes_of``)."""
    cases: list[object] = []
    for param in _params():
        assert isinstance(param, type(pytest.param(None)))
        name = str(param.values[0])
        writes = writes_of(name)
        cases += [pytest.param(name, n, id=f"{name}-write{n:02d}-{writes[n - 1][1]}", marks=param.marks)
                  for n in range(1, len(writes) + 1)]
    return cases


@pytest.mark.parametrize(("backend", "nth"), _write_cases(), indirect=["backend"])
def test_nth_write_fails_cleanly_and_the_next_worker_converges(
        backend: StoreBackend, tmp_path: Path, nth: int, caplog: pytest.LogCaptureFixture) -> None:
    writes = writes_of(backend.name)
    step, query = writes[nth - 1]
    occurrence = [name for _, name in writes[:nth]].count(query)
    store = backend.migrated()
    service = RehearsalService(store)
    run = service.create_run(EXAMPLE_PACKAGE)
    lease = lease_for(backend)
    faulty = DriverFaults(store, nth=occurrence, query=query)
    caplog.set_level(logging.INFO)

    # The faulty path: enqueue, then one worker delivery (claim, start, receipts, succeed).
    attempt_id: str | None = None
    try:
        attempt_id = RehearsalService(faulty).enqueue_attempt(run.id).id
    except FencepostError as error:
        assert step.transaction == "rehearsal.enqueue", f"enqueue failed at write {nth} ({query}): {error}"
        assert isinstance(error, StoreUnavailable) and "injected" in str(error), repr(error)
    else:
        w = worker(faulty, tmp_path / "work", lease, "faulty", heartbeat=False)
        try:
            w.run_once()
        except FencepostError as error:
            assert step.transaction == "outbox.claim", f"the worker raised at write {nth} ({query}): {error!r}"
            assert isinstance(error, StoreUnavailable) and "injected" in str(error), repr(error)
        else:
            assert step.transaction not in ("rehearsal.enqueue", "outbox.claim")
            # The handler's fenced write failed: the command is abandoned to takeover (never FAILED, never
            # delivered), and what was logged is the translated error.
            assert (w.stats.delivered, w.stats.failed) == (0, 0), w.stats
            abandoned = [r for r in caplog.records if getattr(r, "event", None) == "command_abandoned"]
            assert len(abandoned) == 1, [r.getMessage() for r in caplog.records]
            assert "injected" in str(getattr(abandoned[0], "error", "")), abandoned[0].__dict__
    assert faulty.fired == 1, f"write {nth} ({query}) never ran"
    for record in caplog.records:
        assert "Traceback" not in record.getMessage()
        assert record.exc_info is None, f"a driver exception reached the logs: {record.getMessage()}"

    # Nothing partial: exactly the state before the failed transaction, and a sound database.
    assert not unsound(store), unsound(store)
    if step.state is None:
        assert service.attempts(run.id) == []
        assert sum(store.read(lambda tx: tx.outbox.count_by_status()).values()) == 0
        attempt_id = service.enqueue_attempt(run.id).id  # the client asks again
    else:
        assert attempt_id is not None
        attempt = service.attempt(attempt_id)
        seen = f"{attempt.status} {attempt.command_status} {receipt_codes_of(store, attempt_id)} " \
               f"{attempt.delivery_count}"
        assert seen == step.state, f"after a failed write {nth} ({query}) in {step.transaction}"
        expire(backend, lease)

    # The next worker converges.
    worker(store, tmp_path / "work", lease, "next").run(max_idle_polls=1)
    attempt = service.attempt(attempt_id)
    assert attempt.status is AttemptStatus.SUCCEEDED, attempt
    assert attempt.delivery_count == step.deliveries, attempt
    events = store.read(lambda tx: tx.outbox.lease_events(attempt.command_id))
    assert terminal_events(events) == ["deliver"], [e.event for e in events]
    assert claim_count(events) == attempt.delivery_count, [e.event for e in events]
    assert service.gate(run.id).passed, service.gate(run.id).blocking
    assert not unsound(store), unsound(store)
