"""Fixtures of the integration tests: a migrated SQLite control store in ``tmp_path`` with a ManualClock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.rig import Rig, open_rig


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    """A fresh rig; every worker it made is stopped and the store closed afterwards."""
    opened = open_rig(tmp_path, monkeypatch)
    try:
        yield opened
    finally:
        for worker in opened.workers:
            worker.request_stop()
        opened.store.close()
