"""Fixtures of the PostgreSQL-specific store tests: a migrated store, and the statements psycopg sends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fencepost.store import Store
from helpers.store_backends import StoreBackend


@pytest.fixture
def pg(pg_backend: StoreBackend) -> Store:
    """A freshly migrated PostgreSQL store."""
    store: Store = pg_backend.migrated()
    return store


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bool]]]:
    """Every statement psycopg sends from this process (``Cursor.execute``), in order: its text, and whether it
    went out in a pipeline (ADR 0098)."""
    sent: list[tuple[str, bool]] = []
    original = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, params: Any = None, **kwargs: Any) -> Any:
        raw = query if isinstance(query, (str, bytes)) else query.as_string(self)
        piped = self.connection.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
        sent.append((raw.decode() if isinstance(raw, bytes) else raw, piped))
        return original(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    yield sent
