"""SIGKILL inside a shared COMMIT of the action host (group commit, ADR 0079): a worker whose slots reach the
same unit together (``group_subject.py``) is killed before or after the COMMIT that several invocations' units
share, then a new process converges them.

Checked: right after the kill, every invocation's command is finished exactly when it has a verdict (no partial
fact); exactly the units of the groups whose COMMIT completed took effect: all of the killed group after its
COMMIT, none of it before (the subject logs each group's units before writing it); after convergence every
verdict agrees with the provider's ledger (``succeeded``: one charge; ``reconciliation_required``: at most one;
never two), no lifecycle event twice, and ``fencepost audit`` exits 0.

Default run: SQLite WAL/FULL; SQLite DELETE/FULL and PostgreSQL under soak.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import CrashDB, assert_cli_audit_clean, crash_db
from host_flow import KILLED, ledger_lines

from fencepost.core.statuses import AdapterStatus
from fencepost.store.base import Store
from helpers.processes import subprocess_env
from helpers.store_backends import BackendUnreachable

SUBJECT = Path(__file__).resolve().parent / "group_subject.py"
COUNT = 4


def _checkpointed(store: Store) -> int:
    rows = store.read(lambda tx: [r for i in tx.host.list_invocations()
                                  for r in tx.host.list_adapter_invocations(i.id)])
    return sum(1 for r in rows if r.status is AdapterStatus.SUCCEEDED)


def _settled(store: Store) -> int:
    return sum(1 for i in store.read(lambda tx: tx.host.list_invocations()) if i.status.terminal)


@dataclass(frozen=True)
class GroupWindow:
    #: the crash point; ``@2`` is the second unit to pass it, the first of a group after a lone first unit
    point: str
    idempotent: bool
    effects: Callable[[Store], int]

    @property
    def id(self) -> str:
        return f"{self.point}-{'idempotent' if self.idempotent else 'non-idempotent'}"


WINDOWS = tuple(GroupWindow(p, i, effects) for p, effects in (
    ("host.step.checkpoint:before-commit@2", _checkpointed), ("host.step.checkpoint:after-commit@2", _checkpointed),
    ("host.finalize:before-commit@2", _settled), ("host.finalize:after-commit@2", _settled))
    for i in (False, True))


def _run(db: CrashDB, ledger: Path, mode: str, window: GroupWindow,
         crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SUBJECT), db.url, str(ledger), mode,
                           "1" if window.idempotent else "0", str(COUNT)],
                          env=subprocess_env(crashpoint=crash), cwd=db.root, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "window"), window_matrix(WINDOWS, lambda w: w.id))
def test_group_commit_window(backend: str, window: GroupWindow, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            _flow(db, window)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


def _flow(db: CrashDB, window: GroupWindow) -> None:
    ledger = db.root / "ledger"
    ledger.mkdir()
    submitted = _run(db, ledger, "submit", window)
    assert submitted.returncode == 0, submitted.stderr
    killed = _run(db, ledger, "work", window, crash=window.point)
    assert killed.returncode == KILLED, f"expected SIGKILL at {window.point}: {killed.returncode}\n{killed.stderr}"

    crashed = db.store.read(lambda tx: tx.host.list_invocations())
    for invocation in crashed:  # no partial fact: a verdict and its command's finish are one unit
        command = db.store.read(lambda tx, i=invocation.id: tx.outbox.get(i))
        assert command is not None and command.status.terminal is invocation.status.terminal, (invocation, command)
    groups = [json.loads(line) for line in ledger_lines(ledger / "groups")]
    unit = window.point.split(":")[0]
    assert groups and unit in groups[-1], groups  # the kill came in the last group written
    committed = groups if "after-commit" in window.point else groups[:-1]
    expected = sum(group.count(unit) for group in committed)
    effects = window.effects(db.store)
    assert effects == expected, f"{effects} {unit} unit(s) took effect; the committed groups held {expected}: {groups}"

    converged = _run(db, ledger, "work", window)
    assert converged.returncode == 0, converged.stdout + converged.stderr
    verdicts = json.loads(converged.stdout.strip().splitlines()[-1])
    assert len(verdicts) == COUNT, verdicts
    charges = Counter(line.split(" ")[0] for line in ledger_lines(ledger / "charges"))
    assert all(n == 1 for n in charges.values()), charges  # never charged twice
    rows = db.store.read(lambda tx: {i.id: tx.host.list_adapter_invocations(i.id)
                                     for i in tx.host.list_invocations()})
    for invocation_id, status in verdicts.items():
        [row] = rows[invocation_id]
        charged = charges.get(row.id, 0)
        assert status in ("succeeded", "reconciliation_required"), (invocation_id, status)
        if status == "succeeded":
            assert charged == 1, (invocation_id, charges)
        if window.idempotent:
            assert status == "succeeded", verdicts  # the stable key makes recovery safe (G14)
    events = db.store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
    counts = Counter((e.type, e.subject.subject_id) for e in events)
    assert all(n == 1 for n in counts.values()), counts
    assert_cli_audit_clean(db)
