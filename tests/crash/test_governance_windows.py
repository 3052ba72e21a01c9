"""SIGKILL on each side of every COMMIT of governance, attestations and approvals (``governance_flow``): no
partial fact, the expected verdict after convergence, one record per governance id, a clean audit.

Every window is marked soak (docs/crash-testing.md): the default run keeps the in-process tests of
tests/host/test_governance.py, test_approvals.py and test_attestations.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import crash_db
from governance_flow import WINDOWS, GovernanceWindow, run_governance_flow

from helpers.store_backends import BackendUnreachable


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.parametrize(("backend", "window"), window_matrix(WINDOWS, lambda w: w.id))
def test_governance_window(backend: str, window: GovernanceWindow, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_governance_flow(db, window)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
