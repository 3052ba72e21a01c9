"""Fixtures of the delivery tests: ``sqlite_store`` for what is about the target database alone (a locked or
deleted target, an own-transaction script), where running every control-store backend would prove nothing more."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fencepost.store.base import Store
from helpers.store_backends import BackendUnreachable, selected_backends, store_backend


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite (WAL) control store in ``tmp_path``."""
    with store_backend("sqlite-wal", tmp_path) as backend:
        yield backend.migrated()


@pytest.fixture(params=["sqlite-wal", "postgres"])
def control(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated control store of each backend kind (SQLite WAL and PostgreSQL; SQLite's DELETE journal changes
    nothing a delivery does to the control store), skipped when ``FENCEPOST_TEST_BACKENDS`` excludes it."""
    if request.param not in selected_backends():
        pytest.skip(f"{request.param} excluded by FENCEPOST_TEST_BACKENDS")
    try:
        with store_backend(request.param, tmp_path) as backend:
            yield backend.migrated()
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)
