"""SIGKILL on each side of every target COMMIT and control COMMIT of a three-migration delivery
(``delivery_flow``): afterwards each migration is on the target exactly once, ledger and schema agree, the
invocation converges to ``succeeded`` by recovery and ``fencepost audit`` is clean. An unfenced (own-transaction)
migration interrupted after it started ends ``reconciliation_required`` with the target's evidence and is never
run twice.

Default run: a sample (``SAMPLED``) on SQLite WAL/FULL, the unfenced window and one target CLI window. The full
matrix (``FULL`` and ``TARGET_POINTS``) on SQLite WAL, SQLite DELETE and PostgreSQL is soak.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crash_flows import require_backend
from crash_harness import BACKENDS, Workers, crash_db, wait_until
from delivery_flow import (
    FULL,
    SAMPLED,
    TARGET_POINTS,
    agree,
    crash_free_schema,
    prepare,
    run_delivery_flow,
    run_target_flow,
)

from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import DeliveryService
from helpers.store_backends import BackendUnreachable


def _params(points: tuple[str, ...], sampled: tuple[str, ...]) -> list[object]:
    params: list[object] = []
    for backend in BACKENDS:
        for point in points:
            default = backend == "sqlite-wal" and point in sampled
            marks = [] if default else [pytest.mark.soak]
            if backend == "postgres":
                marks.append(pytest.mark.postgres)
            params.append(pytest.param(backend, point, id=f"{backend}-{point}", marks=marks))
    return params


@pytest.mark.parametrize(("backend", "point"), _params(FULL, SAMPLED))
def test_delivery_window(backend: str, point: str, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path / "reference") as reference_db:
            reference = crash_free_schema(reference_db)
        with crash_db(backend, tmp_path / "crash") as db:
            run_delivery_flow(db, point, reference)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


@pytest.mark.parametrize(("backend", "point"), _params(TARGET_POINTS, ("target.add:after-commit",)))
def test_target_window(backend: str, point: str, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_target_flow(db, point)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


UNFENCED = {"0001_base": "CREATE TABLE books (id INTEGER);\n",
            "0002_own_tx": "BEGIN;\nCREATE TABLE ledger_entries (id INTEGER PRIMARY KEY);\nCOMMIT;\n"}


def test_an_interrupted_unfenced_migration_needs_reconciliation_and_never_runs_twice(tmp_path: Path) -> None:
    require_backend("sqlite-wal")
    with crash_db("sqlite-wal", tmp_path) as db:
        invocation_id, path = prepare(db, UNFENCED)
        workers = Workers(db)
        try:
            workers.start("crash", crash="delivery.target:0002_own_tx:after-intent").wait_killed()
            workers.start("recover")
            wait_until(lambda: DeliveryService(db.store).host.get(invocation_id).status.terminal, 60,
                       what="the delivery to settle")
        finally:
            workers.kill_all()
        view = DeliveryService(db.store).host.get(invocation_id)
        assert view.status is InvocationStatus.RECONCILIATION_REQUIRED, (view.status, view.error)
        assert "unfenced migration 0002_own_tx was started by an earlier run" in (view.error or "")
        assert "'ledger': [" in (view.error or "") and "table books" in (view.error or "")
        agree(path, {"0001_base": UNFENCED["0001_base"]})
        import sqlite3

        with sqlite3.connect(path) as conn:  # the script never ran: the crash was before it, and it is not re-run
            assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'ledger_entries'").fetchone() is None
            assert conn.execute("SELECT state FROM fencepost_delivery WHERE migration = '0002_own_tx'").fetchone() \
                == ("started",)
        (entry,) = [d for d in DeliveryService(db.store).deliveries("shop")]
        assert entry["reconciliation"] is not None and entry["reconciliation"]["kind"] == "adapter_outcome_ambiguous"


def _interrupted_after_the_intent(workers: Workers, service: DeliveryService, invocation_id: str) -> None:
    """A worker SIGKILLed right after 0002_own_tx's started row committed, and another that recovers the
    delivery: it ends ``reconciliation_required`` (the script may have run). The recovering worker keeps running."""
    workers.start("crash", crash="delivery.target:0002_own_tx:after-intent").wait_killed()
    workers.start("recover")
    wait_until(lambda: service.host.get(invocation_id).status.terminal, 60, what="the delivery to settle")
    assert service.host.get(invocation_id).status is InvocationStatus.RECONCILIATION_REQUIRED


def _succeeded_with_ledger(service: DeliveryService, invocation_id: str, path: Path,
                           ledger: list[tuple[str, str]]) -> None:
    """The delivery succeeded and the target's ledger holds exactly ``ledger`` (migration, state)."""
    import sqlite3

    view = service.host.get(invocation_id)
    assert view.status is InvocationStatus.SUCCEEDED, (view.status, view.error)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT migration, state FROM fencepost_delivery ORDER BY migration").fetchall()
    assert rows == ledger, rows


def _finished_by_hand_and_resolved_succeeded(service: DeliveryService, invocation_id: str, path: Path) -> None:
    """The operator runs 0002_own_tx by hand, as it was meant to run, and resolves the delivery ``succeeded``."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.executescript(UNFENCED["0002_own_tx"])
    service.host.resolve(invocation_id, "succeeded", operator="ops:trial",
                         note="ran 0002_own_tx by hand: ledger_entries exists")


def test_a_resolved_interrupted_unfenced_migration_is_delivered_again(tmp_path: Path) -> None:
    """After the operator resolves the interrupted delivery ``failed`` (the evidence shows the script never ran),
    a redelivery replaces the ``started`` row and runs the script once (ADR 0103). It stayed refused with
    "reconcile that delivery", with no way forward short of editing the ledger by hand (a break-it trial)."""
    require_backend("sqlite-wal")
    with crash_db("sqlite-wal", tmp_path) as db:
        invocation_id, path = prepare(db, UNFENCED)
        service = DeliveryService(db.store)
        workers = Workers(db)
        try:
            _interrupted_after_the_intent(workers, service, invocation_id)
            blocked = service.submit("shop", target="tenant-a", redeliver=True)
            assert blocked.deliveries[0][1].id == invocation_id  # unresolved: nothing new starts
            service.host.resolve(invocation_id, "failed", operator="ops:trial",
                                 note="no ledger_entries table on the target: the script never ran")
            (_, again), = service.submit("shop", target="tenant-a", redeliver=True).deliveries
            assert again.id != invocation_id
            wait_until(lambda: service.host.get(again.id).status.terminal, 60, what="the redelivery to settle")
        finally:
            workers.kill_all()
        view = service.host.get(again.id)
        assert view.status is InvocationStatus.SUCCEEDED, (view.status, view.error)
        agree(path, UNFENCED)
        import sqlite3

        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT migration, state FROM fencepost_delivery ORDER BY migration").fetchall()
            assert rows == [("0001_base", "applied"), ("0002_own_tx", "applied")]
            assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'ledger_entries'").fetchone() == (1,)


def test_a_migration_resolved_applied_is_marked_applied_by_the_next_delivery(tmp_path: Path) -> None:
    """Resolved ``succeeded`` (the operator found the script applied: here they finish it by hand), the started
    row counts as applied, and the next delivery reaching the migration (an upgrade) marks it ``applied`` without
    running the script, then applies what is new (ADR 0103)."""
    require_backend("sqlite-wal")
    import sqlite3

    from delivery.kit import release, write_package

    with crash_db("sqlite-wal", tmp_path) as db:
        invocation_id, path = prepare(db, UNFENCED)
        service = DeliveryService(db.store)
        workers = Workers(db)
        try:
            _interrupted_after_the_intent(workers, service, invocation_id)
            _finished_by_hand_and_resolved_succeeded(service, invocation_id, path)
            newer = {**UNFENCED, "0003_more": "CREATE TABLE more_entries (id INTEGER);\n"}
            release(db.store, write_package(db.root, "shop", "1.1.0", newer), db.root / "upgrade-work",
                    ungated=True)
            (_, upgrade), = service.submit("shop", target="tenant-a").deliveries
            wait_until(lambda: service.host.get(upgrade.id).status.terminal, 60, what="the upgrade to settle")
        finally:
            workers.kill_all()
        _succeeded_with_ledger(service, upgrade.id, path,
                               [("0001_base", "applied"), ("0002_own_tx", "applied"), ("0003_more", "applied")])
        with sqlite3.connect(path) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                  "AND name NOT LIKE 'fencepost%' ORDER BY name")]
            assert tables == ["books", "ledger_entries", "more_entries"]


def test_a_delivery_resolved_succeeded_is_finished_by_a_redelivery(tmp_path: Path) -> None:
    """Resolved ``succeeded`` at an own-transaction migration, the delivery stopped there: the migrations after it
    and ``verify`` never ran, and ``install`` answered the resolved invocation, with ``--redeliver`` too (a
    break-it trial: no way to finish the delivery). ``--redeliver`` now starts the delivery that runs them; the
    resolved ``started`` row is marked applied without running its script again (ADR 0103)."""
    require_backend("sqlite-wal")

    three = {**UNFENCED, "0003_after": "CREATE TABLE after_entries (id INTEGER);\n"}
    with crash_db("sqlite-wal", tmp_path) as db:
        invocation_id, path = prepare(db, three)
        service = DeliveryService(db.store)
        workers = Workers(db)
        try:
            _interrupted_after_the_intent(workers, service, invocation_id)
            _finished_by_hand_and_resolved_succeeded(service, invocation_id, path)
            (_, same), = service.submit("shop", target="tenant-a").deliveries
            assert same.id == invocation_id  # a plain install still answers the settled delivery
            (_, again), = service.submit("shop", target="tenant-a", redeliver=True).deliveries
            assert again.id != invocation_id
            wait_until(lambda: service.host.get(again.id).status.terminal, 60, what="the redelivery to settle")
        finally:
            workers.kill_all()
        _succeeded_with_ledger(service, again.id, path,
                               [("0001_base", "applied"), ("0002_own_tx", "applied"), ("0003_after", "applied")])
