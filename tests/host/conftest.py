"""Fixtures of the host tests; their adapters, actions and helpers are in ``kit.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from host.kit import Ledger


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    yield Ledger()
