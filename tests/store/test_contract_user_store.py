"""The contract suite on a store defined the way a user would define one: no fencepost test helper, only
``fencepost.testing`` and the public store API. The code between the markers is the example of
``docs/store-contract.md``, verbatim (the last test holds the two equal).
"""

from __future__ import annotations

# ── the example of docs/store-contract.md ──
from pathlib import Path
from typing import Any

import pytest

from fencepost.core.clock import ManualClock
from fencepost.store import Store, UnitOfWork, open_store
from fencepost.testing import OutboxContract


class MyBackend:
    """A ``fencepost.testing.ContractBackend``: a SQLite store at my own path, on a clock the tests move."""

    name = "my-sqlite"
    short_lease = 30.0  # seconds; the tests outlive it by moving the clock
    long_lease = 600.0  # seconds; no test outlives it

    def __init__(self, path: Path) -> None:
        self.location = f"sqlite:///{path}"  # no error message may show it
        self.clock = ManualClock()

    def open(self) -> Store:
        # Every call: the same database, the same clock. The suite migrates it.
        return open_store(self.location, clock=self.clock)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def inspect(self, tx: UnitOfWork, sql: str) -> list[tuple[Any, ...]]:
        # fencepost's SQL units run raw SQL; a store without SQL raises NotImplementedError instead.
        rows: list[tuple[Any, ...]] = tx.execute_raw(sql)  # type: ignore[attr-defined]
        return rows


@pytest.fixture
def contract_backend(tmp_path: Path) -> MyBackend:
    """A fresh database for every test."""
    return MyBackend(tmp_path / "my-control.db")


class TestMyOutbox(OutboxContract):
    pass


# ── end of the example ──

DOC = Path(__file__).resolve().parents[2] / "docs" / "store-contract.md"


def _example(text: str) -> str:
    marker = "# ── the example of docs/store-contract.md ──\n"
    start = text.index(marker) + len(marker)
    return text[start:text.index("# ── end of the example ──")].rstrip("\n") + "\n"


def test_the_documented_example_is_this_module() -> None:
    document = DOC.read_text(encoding="utf-8")
    block = document.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == _example(Path(__file__).read_text(encoding="utf-8")), "docs/store-contract.md drifted"
