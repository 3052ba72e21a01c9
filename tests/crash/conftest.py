"""Fixtures of the crash suite (tests/crash): the crash-free references.

Soak items (the full crash matrix on SQLite DELETE/FULL and PostgreSQL, the PostgreSQL restart, the fault
matrix on SQLite DELETE/FULL) are deselected by tests/conftest.py unless asked for with ``-m soak`` or
``FENCEPOST_SOAK=1``; see docs/crash-testing.md.
"""

from __future__ import annotations

import pytest
from crash_flows import References


@pytest.fixture(scope="session")
def references(tmp_path_factory: pytest.TempPathFactory) -> References:
    return References(tmp_path_factory)
