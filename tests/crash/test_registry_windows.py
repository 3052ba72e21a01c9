"""SIGKILL on each side of the COMMIT of ``workers.register``, ``workers.beat`` and ``workers.deregister`` (the
worker registry, ADR 0019): the row is there exactly when its transaction committed, a dead worker stops being
listed live within its live window, and a successor registers and deregisters cleanly (``registry_flow``).

Default run: every window on SQLite WAL/FULL. The same windows on SQLite DELETE/FULL and PostgreSQL are marked
soak (docs/crash-testing.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import crash_db
from registry_flow import WINDOWS, run_registry_flow

from helpers.store_backends import BackendUnreachable


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "point"), window_matrix(WINDOWS))
def test_registry_window(backend: str, point: str, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_registry_flow(db, point)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
