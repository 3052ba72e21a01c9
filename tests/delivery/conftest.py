"""Fixtures of the delivery tests: ``sqlite_store`` for what is about the target database alone (a locked or
deleted target, an own-transaction script), where running every control-store backend would prove nothing more."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fencepost.store.base import Store
from helpers.store_backends import store_backend


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite (WAL) control store in ``tmp_path``."""
    with store_backend("sqlite-wal", tmp_path) as backend:
        yield backend.migrated()
