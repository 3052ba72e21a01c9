"""SIGKILL on each side of the COMMIT of an operator's resolution (``host.resolve``; host-spec §1.Y-13, ADR 0048):
a real ``fencepost host resolve`` process dies at the crash point, then the database holds all of the
resolution or none of it, the audit is clean, and the operator's repeat of the same command converges: it
resolves after a crash before COMMIT, and is the identical-request no-op after one past it (one
``InvocationResolved`` event either way).

Default run: both windows on SQLite WAL/FULL and the after-commit one on PostgreSQL; the rest are soak.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import CrashDB, cli, crash_db

from fencepost.core.statuses import InvocationStatus
from fencepost.host import Ambiguous, Host
from fencepost.host.resolution import RESOLVED
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.store.audit import audit_store
from helpers.store_backends import BackendUnreachable
from host.kit import Ledger, Scripted, Spy, charge_action

#: The crash points (the meta-test in test_crash_windows.py reads them).
WINDOWS = ("host.resolve:before-commit", "host.resolve:after-commit")
RESOLVE = ("host", "resolve", "--succeeded", "--as", "ops:1", "--note", "charge found at the provider",
           "--evidence", '{"charge_id": "ch_1"}', "--json")


def _ambiguous_invocation(db: CrashDB) -> str:
    """An invocation settled reconciliation_required by an ambiguous provider reply, run in-process."""
    host = Host(db.store, actions=[charge_action(Spy())], adapters=[Scripted(Ledger(), Ambiguous("reset"))])
    submitted = host.submit("shop.charge", {"order_id": "o-1", "amount_cents": 5}, actor="u1", idempotency_key="k")
    registry = HandlerRegistry()
    host.register(registry)
    worker = Worker(db.store, registry, WorkerConfig(poll_interval=0.01, lease_seconds=30, grace_seconds=0))
    try:
        worker.run_once()
    finally:
        worker.heartbeat.stop()
    assert host.get(submitted.id).status is InvocationStatus.RECONCILIATION_REQUIRED
    return submitted.id


def _state(db: CrashDB, invocation_id: str) -> tuple[InvocationStatus, bool, int]:
    """The invocation's status, whether a resolution is stored, and how many InvocationResolved events."""
    host = Host(db.store)
    view, told = host.history(invocation_id)
    return view.status, view.resolution is not None, sum(e["type"] == RESOLVED for e in told["events"])


def run_resolve_window(db: CrashDB, point: str) -> None:
    invocation_id = _ambiguous_invocation(db)
    cli(db, *RESOLVE[:2], invocation_id, *RESOLVE[2:], crash=point)
    committed = point.endswith("after-commit")
    expected = (InvocationStatus.SUCCEEDED, True, 1) if committed else (
        InvocationStatus.RECONCILIATION_REQUIRED, False, 0)
    assert _state(db, invocation_id) == expected, f"after the crash at {point}"
    assert audit_store(db.store) == [], f"after the crash at {point}"
    again = cli(db, *RESOLVE[:2], invocation_id, *RESOLVE[2:])
    assert again.returncode == 0, again.describe()
    assert json.loads(again.stdout)["resolution"]["operator"] == "ops:1"
    assert _state(db, invocation_id) == (InvocationStatus.SUCCEEDED, True, 1)
    assert audit_store(db.store) == []


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "point"), window_matrix(WINDOWS, postgres_default=("host.resolve:after-commit",)))
def test_resolve_window(backend: str, point: str, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_resolve_window(db, point)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
