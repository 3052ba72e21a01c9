"""Fixtures of the crash suite (tests/crash): soak gating and the crash-free references.

Soak items (the full crash matrix on SQLite DELETE/FULL and PostgreSQL, the PostgreSQL restart, the fault
matrix on SQLite DELETE/FULL) are skipped unless asked for with ``-m soak`` (or any ``-m`` expression naming
soak) or ``FENCEPOST_SOAK=1``; see docs/crash-testing.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from crash_flows import References

HERE = Path(__file__).resolve().parent


def soak_enabled(config: pytest.Config) -> bool:
    return os.environ.get("FENCEPOST_SOAK", "") == "1" or "soak" in str(config.getoption("markexpr") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if soak_enabled(config):
        return
    skip = pytest.mark.skip(reason="soak: run with `pytest tests/crash -m soak` or FENCEPOST_SOAK=1 "
                                   "(docs/crash-testing.md)")
    for item in items:
        if item.get_closest_marker("soak") is not None and HERE in item.path.resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def references(tmp_path_factory: pytest.TempPathFactory) -> References:
    return References(tmp_path_factory)
