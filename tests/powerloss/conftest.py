"""Fixtures of the power-loss harness (tests/powerloss): the crash suite's helpers on ``sys.path`` and the
recorder shim, compiled once per session with the system C compiler."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflows"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recorder import build_shim


@pytest.fixture(scope="session")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("recorder"))
