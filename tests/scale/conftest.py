"""Fixtures of the PostgreSQL scale-out suite: a fresh schema per test and the worker fleet on it.

PostgreSQL unreachable makes these tests FAIL, never skip. They are skipped only when
``FENCEPOST_TEST_BACKENDS`` explicitly leaves ``postgres`` out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scale_support import Fleet, ScaleDB, scale_db

from helpers.store_backends import BackendUnreachable, selected_backends


@pytest.fixture
def db(tmp_path: Path) -> Iterator[ScaleDB]:
    """A fresh, migrated PostgreSQL schema for this test (dropped afterwards)."""
    if "postgres" not in selected_backends():
        pytest.skip("postgres excluded by FENCEPOST_TEST_BACKENDS")
    try:
        with scale_db(tmp_path) as opened:
            yield opened
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
def fleet(db: ScaleDB) -> Iterator[Fleet]:
    """Worker subprocesses of this test; any left running are SIGKILLed (by pid) afterwards."""
    started = Fleet(db)
    try:
        yield started
    finally:
        started.kill_all()
