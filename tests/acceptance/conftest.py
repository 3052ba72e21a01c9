"""Fixtures of the acceptance suite (real CLI and worker subprocesses; see ``acceptance_support``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from acceptance_support import Env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A fresh, UNMIGRATED control database and work directory; leftover workers are SIGKILLed by pid."""
    e = Env(tmp_path)
    try:
        yield e
    finally:
        e.kill_leftovers()
        e.close()


@pytest.fixture
def migrated(env: Env) -> Env:
    """``env`` after ``fencepost migrate``."""
    env.migrate()
    return env
