"""SIGKILL at every commit boundary of the outbox and rehearsal paths, then restart and converge.

For each window of ``crash_flows.WINDOWS`` (each crash point on each side of COMMIT) the real CLI or worker
is killed there, restarted, and the flow must converge to the crash-free reference of the same backend:
same terminal statuses, same semantic evidence fingerprint, same release-gate verdict. ``run_flow`` checks
the rest (no partial fact after the crash, the durable winner replayed rather than duplicated, ``fencepost
audit`` exit 0).

Default run: every window on SQLite WAL/FULL. The same windows on SQLite DELETE/FULL and PostgreSQL are
marked soak (docs/crash-testing.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from crash_flows import NOT_COVERED, WINDOWS, References, Window, drain, require_backend, run_flow
from crash_harness import BACKENDS, Workers, cli, crash_db

from helpers.store_backends import BackendUnreachable

SRC = Path(__file__).resolve().parents[2] / "src" / "fencepost"


def _matrix() -> list[object]:
    params: list[object] = []
    for backend in BACKENDS:
        marks = [] if backend == "sqlite-wal" else [pytest.mark.soak]
        if backend == "postgres":
            marks.append(pytest.mark.postgres)
        params += [pytest.param(backend, w, id=f"{backend}-{w.id}", marks=marks) for w in WINDOWS]
    return params


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "window"), _matrix())
def test_crash_window(backend: str, window: Window, tmp_path: Path, references: References) -> None:
    require_backend(backend)
    reference = references.get(backend, window.flow)
    try:
        with crash_db(backend, tmp_path) as db:
            run_id, converged = run_flow(db, window.flow, window)
            assert converged == reference, f"converged to\n{converged}\ninstead of the crash-free\n{reference}"
            if window.point == "rehearsal.enqueue:after-commit":
                _asking_again_enqueues_a_second_attempt(db, run_id)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


def _asking_again_enqueues_a_second_attempt(db: object, run_id: str) -> None:
    """What `rehearsal attempt` promises: each call asks for one new Attempt. A crash after its COMMIT loses
    only the answer (the Attempt is durable, found by `rehearsal status`); calling it again is a second
    request and creates a second Attempt with the next seq — never a silent twin of the first."""
    from crash_harness import CrashDB

    assert isinstance(db, CrashDB)
    again = cli(db, "rehearsal", "attempt", run_id, "--json")
    assert again.returncode == 0, again.describe()
    assert again.json()["seq"] == 2
    workers = Workers(db)
    try:
        drain(db, workers, str(again.json()["id"]), "second")
    finally:
        workers.kill_all()
    attempts = db.service.attempts(run_id)
    assert [(a.seq, str(a.status)) for a in attempts] == [(1, "SUCCEEDED"), (2, "SUCCEEDED")]
    gate = cli(db, "rehearsal", "gate", run_id, "--json")
    assert gate.returncode == 0 and gate.json()["passed"], gate.describe()
    compared = db.service.compare(run_id)
    assert compared.comparison is not None and compared.comparison.equal, compared.reason


def test_every_commit_boundary_of_the_paths_has_a_window() -> None:
    """Each named transaction of the outbox and rehearsal layers has windows on both sides of COMMIT, or a
    reason in ``NOT_COVERED``: a new transaction fails this test until it gets its crash windows."""
    names: set[str] = set()
    for folder in ("outbox", "rehearsal"):
        for path in (SRC / folder).rglob("*.py"):
            names |= set(re.findall(r'name="((?:outbox|rehearsal)\.[a-z_]+)"', path.read_text(encoding="utf-8")))
    assert names, "no transaction names found: has the naming convention changed?"
    sides: dict[str, set[str]] = {}
    for w in WINDOWS:
        sides.setdefault(w.transaction, set()).add("after" if w.after_commit else "before")
    missing = sorted(n for n in names if n not in NOT_COVERED and sides.get(n) != {"before", "after"})
    assert not missing, f"transactions without a crash window on each side of COMMIT: {missing}"
    assert not set(NOT_COVERED) & set(sides), "a transaction is both covered and excused"
    stale = sorted(set(sides) - names)
    assert not stale, f"windows for transactions that no longer exist: {stale}"
    receipt_points = {w.point for w in WINDOWS if w.transaction == "rehearsal.receipt"}
    assert receipt_points == {f"rehearsal.receipt:{side}-commit@{k}" for side in ("before", "after")
                              for k in range(1, 6)}
