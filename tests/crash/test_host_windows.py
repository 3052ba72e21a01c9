"""SIGKILL on each side of every COMMIT of the action host's invocation path, and at its step crash points,
for a non-idempotent and an idempotent action (``host_flow``): no partial fact, a verdict after recovery, and
the provider's ledger equal to what the verdict claims.

Default run: every window on SQLite WAL/FULL. The same windows on SQLite DELETE/FULL and PostgreSQL are marked
soak (docs/crash-testing.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import crash_db
from host_flow import WINDOWS, HostWindow, run_host_flow

from helpers.store_backends import BackendUnreachable


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "window"), window_matrix(WINDOWS, lambda w: w.id))
def test_host_window(backend: str, window: HostWindow, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_host_flow(db, window)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
