"""Store fixtures shared by every test folder, and the one rule that keeps soak tests out of the default run.

``store_backend`` runs a test once per backend in ``FENCEPOST_TEST_BACKENDS`` (see
``tests/helpers/store_backends.py``); ``store`` is a migrated store on it.
"""

from __future__ import annotations

import compileall
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencepost.store import Store
from helpers.store_backends import BackendUnreachable, StoreBackend, selected_backends, store_backend

# Receipts are sealed with a key outside the control database (ADR 0064). The suite uses its own key file, so
# that it never creates or reads the user's ~/.config/fencepost/seal-keys.json; the workers and servers that tests
# start as subprocesses inherit the variable and so seal with the same key.
if not os.environ.get("FENCEPOST_SEAL_KEYS") and not os.environ.get("FENCEPOST_SEAL_KEY_FILE"):
    os.environ["FENCEPOST_SEAL_KEY_FILE"] = str(Path(tempfile.mkdtemp(prefix="fencepost-seal-")) / "seal-keys.json")


def pytest_configure(config: pytest.Config) -> None:
    """Write the bytecode of fencepost's sources before any test starts a subprocess.

    The suite starts about a thousand Python subprocesses (CLI commands, workers, servers). Where
    ``PYTHONDONTWRITEBYTECODE`` is set (this project's CI machines set it), no import writes ``__pycache__``, so each
    of them compiled every fencepost module from source again: 0.35 of the 1.2 CPU seconds a ``fencepost`` command
    took to start. ``compileall`` writes the files regardless of that variable, and Python checks each one against
    its source's modification time, so an edited module is never run stale. Only the controlling process does it
    (xdist workers have ``workerinput``).
    """
    if hasattr(config, "workerinput"):
        return
    for folder in (Path(__file__).resolve().parents[1] / "src", Path(__file__).resolve().parent):
        compileall.compile_dir(str(folder), quiet=1, workers=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.soak`` tests (full crash matrices, long soaks) are deselected, not skipped, unless the
    ``-m`` expression names ``soak`` (``pytest -m soak``) or ``FENCEPOST_SOAK=1``.

    ``@pytest.mark.default_backends("sqlite-wal", ...)`` on a test of the ``backend`` fixture keeps only those
    backends in the default run: its other backends count as soak. For slow process-level tests whose backend
    differences the store contract suite already covers on every backend.
    """
    for item in items:
        wanted = item.get_closest_marker("default_backends")
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("store_backend_name") if callspec is not None else None
        if wanted is not None and name is not None and name not in wanted.args:
            item.add_marker(pytest.mark.soak)
    if "soak" in (config.getoption("markexpr", "") or "") or os.environ.get("FENCEPOST_SOAK") == "1":
        return
    deselected = [item for item in items if item.get_closest_marker("soak") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        dropped = set(deselected)
        items[:] = [item for item in items if item not in dropped]


def _params() -> list[object]:
    return [pytest.param(name, marks=pytest.mark.postgres) if name == "postgres" else name
            for name in selected_backends()]


@pytest.fixture(params=_params())
def store_backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(store_backend_name: str, tmp_path: Path) -> Iterator[StoreBackend]:
    """A fresh database of one backend; PostgreSQL unreachable makes the test fail, never skip."""
    try:
        with store_backend(store_backend_name, tmp_path) as b:
            yield b
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
def store(backend: StoreBackend) -> Store:
    """A migrated store on ``backend``."""
    return backend.migrated()


@pytest.fixture
def pg_backend(tmp_path: Path) -> Iterator[StoreBackend]:
    """The PostgreSQL backend alone, for PostgreSQL-specific tests (skipped when deselected)."""
    if "postgres" not in selected_backends():
        pytest.skip("postgres excluded by FENCEPOST_TEST_BACKENDS")
    try:
        with store_backend("postgres", tmp_path) as b:
            yield b
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
