"""A17 and A19 under SIGKILL (ADR 0077): with ``after_adapters``, the declared domain events, the Host's
``StateTransitioned`` fact, the entity's state change and the verdict commit together in ``host.finalize``; the
handler's own writes committed separately, before.

The subject is ``host_subject.py`` with behaviour ``domain``: ``shop.charge`` bound to order ``o-1`` (target
``charged``), whose handler inserts a row into the application's table ``shop_orders`` and declares
``OrderCharged``. A real worker process is killed on one side of the finalization's COMMIT:

- **before it**, the handler's row exists, and neither ``OrderCharged``, nor the fact, nor a recorded state, nor
  the verdict does; recovery then settles it (a non-idempotent action cannot continue a recorded effect:
  ``reconciliation_required``, which records none of them; an idempotent one finalizes once: all of them, once);
- **after it**, all of them exist exactly once, and a new worker changes nothing.

``fencepost audit`` is clean after the crash and at the end. Default run: SQLite WAL/FULL; SQLite DELETE/FULL and
PostgreSQL are soak (docs/crash-testing.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import CrashDB, assert_cli_audit_clean, crash_db
from host_flow import check_state_fact, run_subject

from fencepost.core.statuses import InvocationStatus
from fencepost.store.audit import audit_store
from helpers.processes import KILLED
from helpers.store_backends import BackendUnreachable


@dataclass(frozen=True)
class StateWindow:
    side: str  # before or after the COMMIT of host.finalize
    idempotent: bool

    @property
    def point(self) -> str:
        return f"host.finalize:{self.side}-commit"

    @property
    def id(self) -> str:
        return f"{self.point}-{'idempotent' if self.idempotent else 'non-idempotent'}"


WINDOWS = tuple(StateWindow(side, idempotent) for side in ("before", "after") for idempotent in (False, True))


def domain_rows(db: CrashDB) -> list[tuple[object, ...]]:
    return db.store.read(lambda tx: tx.execute_raw("SELECT order_id FROM shop_orders"))  # type: ignore[attr-defined]


def declared(db: CrashDB) -> list[str]:
    events = db.store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
    return [e.id for e in events if e.type == "OrderCharged"]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "window"), window_matrix(WINDOWS, lambda w: w.id))
def test_after_adapters_events_commit_with_finalization(backend: str, window: StateWindow, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_window(db, window)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


def run_window(db: CrashDB, window: StateWindow) -> None:
    ledger = db.root / "ledger"
    ledger.mkdir()
    db.store.transact(lambda tx: tx.execute_raw(  # type: ignore[attr-defined]
        "CREATE TABLE shop_orders (order_id TEXT PRIMARY KEY)"))
    submitted = run_subject(db, ledger, "submit", idempotent=window.idempotent, behaviour="domain")
    assert submitted.returncode == 0, submitted.stderr
    invocation_id = json.loads(submitted.stdout)["id"]
    killed = run_subject(db, ledger, "work", idempotent=window.idempotent, behaviour="domain", crash=window.point)
    assert killed.returncode == KILLED, f"expected SIGKILL at {window.point}: {killed.returncode}\n{killed.stderr}"
    crashed = db.store.read(lambda tx: tx.host.get_invocation(invocation_id))
    assert crashed is not None
    assert domain_rows(db) == [("o-1",)]  # the handler's write committed with its own unit, before the adapter
    committed = window.side == "after"
    assert crashed.status is (InvocationStatus.SUCCEEDED if committed else InvocationStatus.RUNNING)
    assert len(declared(db)) == (1 if committed else 0)
    check_state_fact(db, invocation_id, charged=committed)
    assert audit_store(db.store) == []
    converged = run_subject(db, ledger, "work", idempotent=window.idempotent, behaviour="domain")
    assert converged.returncode == 0, converged.stdout + converged.stderr
    verdict = json.loads(converged.stdout.strip().splitlines()[-1])
    succeeded = committed or window.idempotent
    assert verdict["status"] == ("succeeded" if succeeded else "reconciliation_required"), verdict
    assert domain_rows(db) == [("o-1",)]
    assert len(declared(db)) == (1 if succeeded else 0)
    check_state_fact(db, invocation_id, charged=succeeded)
    assert_cli_audit_clean(db)
