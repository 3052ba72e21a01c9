"""SIGKILL at every commit boundary of the outbox and rehearsal paths, then restart and converge; and the
meta-test that every named transaction of ``src/fencepost`` has such windows (here, in ``package_flows``,
``deliver_flow``, ``registry_flow`` or ``tests/workflows/test_wf_crash.py``).

For each window of ``crash_flows.WINDOWS`` (each crash point on each side of COMMIT) the real CLI or worker
is killed there, restarted, and the flow must converge to the crash-free reference of the same backend:
same terminal statuses, same semantic evidence fingerprint, same release-gate verdict. ``run_flow`` checks
the rest (no partial fact after the crash, the durable winner replayed rather than duplicated, ``fencepost
audit`` exit 0).

Default run: every window on SQLite WAL/FULL. The same windows on SQLite DELETE/FULL and PostgreSQL are
marked soak (docs/crash-testing.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from crash_flows import NOT_COVERED, WINDOWS, References, Window, drain, require_backend, run_flow, window_matrix
from crash_harness import Workers, cli, crash_db
from deliver_flow import WINDOWS as DELIVER_WINDOWS
from delivery_flow import DELIVERY_POINTS
from governance_flow import POINTS as GOVERNANCE_POINTS
from host_flow import POINTS as HOST_POINTS
from package_flows import WINDOWS as PACKAGE_WINDOWS
from registry_flow import WINDOWS as REGISTRY_WINDOWS
from test_completion_windows import WINDOWS as COMPLETION_WINDOWS
from test_fallback_windows import WINDOWS as FALLBACK_WINDOWS
from test_resolve_windows import WINDOWS as RESOLVE_WINDOWS
from transaction_names import transaction_names

from helpers.store_backends import BackendUnreachable

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src" / "fencepost"


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "window"), window_matrix(WINDOWS, lambda w: w.id))
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


def _admission_windows(name: str = "test_wf_crash") -> tuple[str, ...]:
    """The crash points of ``tests/workflows/<name>.py`` (``test_wf_crash``: the ``workflow.admit`` windows;
    ``test_wf_exec_crash``: the execution windows, whose ``running/`` prefix names a scenario of the same point),
    loaded from that file with its folder on ``sys.path`` for its helper imports."""
    path = TESTS / "workflows" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"crash_meta_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
        sys.modules.pop(spec.name, None)
    return tuple(str(w).split("/", 1)[-1] for w in module.WINDOWS)


def crash_window_points() -> dict[str, tuple[str, ...]]:
    """Every crash point some test kills a real process at, by the file that lists them."""
    return {
        "tests/crash/crash_flows.py": tuple(w.point for w in WINDOWS),
        "tests/crash/package_flows.py": PACKAGE_WINDOWS,
        "tests/crash/deliver_flow.py": DELIVER_WINDOWS,
        "tests/crash/registry_flow.py": REGISTRY_WINDOWS,
        "tests/crash/host_flow.py": HOST_POINTS,
        "tests/crash/governance_flow.py": GOVERNANCE_POINTS,
        "tests/workflows/test_wf_crash.py": _admission_windows(),
        "tests/crash/test_fallback_windows.py": tuple(w.point for w in FALLBACK_WINDOWS),
        "tests/crash/test_completion_windows.py": tuple(w.point for w in COMPLETION_WINDOWS),
        "tests/crash/test_resolve_windows.py": RESOLVE_WINDOWS,
        "tests/crash/delivery_flow.py": DELIVERY_POINTS,
        "tests/workflows/test_wf_exec_crash.py": _admission_windows("test_wf_exec_crash"),
    }


def test_every_named_transaction_in_src_has_a_window_on_each_side_of_commit() -> None:
    """Each named transaction anywhere in ``src/fencepost`` (every ``name=`` given to ``transact``,
    ``transaction`` or ``fenced``, resolved statically: see ``transaction_names``) has a SIGKILL window on
    both sides of its COMMIT, or a reason in ``NOT_COVERED``: a new transaction fails this test until it gets
    its windows, and a name the scan cannot resolve fails it too."""
    names = transaction_names(SRC)
    # the scan itself works: one transaction of each layer that has them is found where it is known to be
    for known, module in (("outbox.claim", "outbox/worker.py"), ("rehearsal.receipt", "rehearsal/handler.py"),
                          ("package.publish", "catalog/lifecycle.py"), ("workflow.admit", "workflows/admission.py")):
        assert any(site.startswith(f"fencepost/{module}:") for site in names.get(known, [])), (known, names)
    sides: dict[str, set[str]] = {}
    for points in crash_window_points().values():
        for point in points:
            transaction, _, rest = point.partition(":")
            side = rest.split("@")[0]
            if side in ("before-commit", "after-commit"):
                sides.setdefault(transaction, set()).add(side)
    missing = sorted(f"{n} ({', '.join(names[n])})" for n in names
                     if n not in NOT_COVERED and sides.get(n) != {"before-commit", "after-commit"})
    assert not missing, f"transactions without a crash window on each side of COMMIT: {missing}"
    assert not set(NOT_COVERED) & set(sides), "a transaction is both covered and excused"
    stale = sorted((set(sides) | set(NOT_COVERED)) - set(names))
    assert not stale, f"windows or excuses for transactions that no longer exist: {stale}"
    receipt_points = {w.point for w in WINDOWS if w.transaction == "rehearsal.receipt"}
    assert receipt_points == {f"rehearsal.receipt:{side}-commit@{k}" for side in ("before", "after")
                              for k in range(1, 6)}
