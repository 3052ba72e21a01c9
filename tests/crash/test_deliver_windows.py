"""SIGKILL on each side of the COMMIT of ``outbox.deliver`` (the worker's batched DELIVERED finish), then a
fresh worker: the batch is delivered whole, once, and converges to the crash-free run (``deliver_flow``).

Default run: both windows on SQLite WAL/FULL. The same windows on SQLite DELETE/FULL and PostgreSQL are marked
soak (docs/crash-testing.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import crash_db
from deliver_flow import WINDOWS, run_deliver_flow

from helpers.store_backends import BackendUnreachable


@pytest.fixture(scope="module")
def references() -> dict[str, tuple[Any, ...]]:
    """The crash-free outcome per backend, filled by the first test of each backend."""
    return {}


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "point"), window_matrix(WINDOWS))
def test_deliver_window(backend: str, point: str, tmp_path: Path, references: dict[str, tuple[Any, ...]]) -> None:
    require_backend(backend)
    try:
        if backend not in references:
            with crash_db(backend, tmp_path / "reference") as db:
                references[backend] = run_deliver_flow(db, None)
        with crash_db(backend, tmp_path / "crash") as db:
            converged = run_deliver_flow(db, point)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
    assert converged == references[backend], f"converged to\n{converged}\ninstead of\n{references[backend]}"
