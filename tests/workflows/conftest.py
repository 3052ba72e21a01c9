"""Fixtures of the workflow-admission proof suite (issue 6). The backend fixtures (``backend``, ``store``)
come from ``tests/conftest.py``: every test here that takes ``world`` runs once per selected backend, and
PostgreSQL unreachable FAILS it (unless ``FENCEPOST_TEST_BACKENDS`` excludes postgres).

``@pytest.mark.soak`` tests of this folder (the full three-backend crash matrix and the longer
linearizability runs) are deselected by tests/conftest.py unless asked for: ``pytest tests/workflows -m soak``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from wf_support import World, backend_params, opened_backend

from fencepost.store import Store
from helpers.store_backends import StoreBackend


@pytest.fixture
def world(backend: StoreBackend, store: Store, tmp_path: Path) -> World:
    """A migrated store of one backend with the package service; packages are written under tmp_path."""
    return World(backend, store, tmp_path / "packages")


@pytest.fixture
def ready_world(world: World) -> World:
    """``world`` with version 1.0.0 of the two-step package published (gate waived) and installed."""
    world.ready()
    return world


@pytest.fixture(params=backend_params(["sqlite-wal", "postgres"]))
def lean_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """``world`` on SQLite WAL and PostgreSQL only: for the heavier tests whose behaviour does not depend
    on the SQLite journal (the journal modes are covered by ``world`` and the crash matrix)."""
    with opened_backend(str(request.param), tmp_path) as backend:
        yield World(backend, backend.migrated(), tmp_path / "packages")


@pytest.fixture(params=backend_params(["sqlite-wal", "postgres"]))
def control(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated control store on SQLite WAL and PostgreSQL, for the execution tests (their targets are SQLite
    files either way; the journal mode of the control store changes nothing they check)."""
    with opened_backend(str(request.param), tmp_path) as backend:
        yield backend.migrated()
