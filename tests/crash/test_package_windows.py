"""SIGKILL on each side of the COMMIT of every ``package.*`` transaction, then the same command again.

For each window of ``package_flows.WINDOWS`` the real ``fencepost package ...`` command is killed there; the
catalog must then hold nothing of the transaction (before COMMIT) or all of it (after), ``fencepost audit``
must be clean, the command run again must answer as ``package_flows`` describes, and the catalog must end as
in the crash-free reference run of the same flow on the same backend.

Default run: every window on SQLite WAL/FULL. The same windows on SQLite DELETE/FULL and PostgreSQL are
marked soak (docs/crash-testing.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crash_flows import require_backend, window_matrix
from package_flows import FLOWS, WINDOWS, Catalog, expected_outcome, run_package_flow

from helpers.store_backends import BackendUnreachable


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    return Catalog(tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "point"), window_matrix(WINDOWS))
def test_package_window(backend: str, point: str, tmp_path: Path, catalog: Catalog) -> None:
    require_backend(backend)
    transaction, _, side = point.partition(":")
    flow = FLOWS[transaction]
    reference = catalog.reference(backend, transaction)
    try:
        with catalog.database(backend, tmp_path) as db:
            converged = run_package_flow(db, catalog, flow, side.removesuffix("-commit"), reference)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
    expected = expected_outcome(flow, side.removesuffix("-commit"), reference)
    assert converged == expected, f"converged to\n{converged}\ninstead of\n{expected}"
