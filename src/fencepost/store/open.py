"""``open_store(url)``: the backend is chosen from the URL alone."""

from __future__ import annotations

from typing import Any

from fencepost.core.clock import Clock
from fencepost.store.base import Store
from fencepost.store.url import parse_database_url


def open_store(url: str, *, clock: Clock | None = None, create: bool = True, **options: Any) -> Store:
    """Open the control store named by ``url`` (see ``fencepost.store.url``).

    Args:
        url: ``sqlite:///path.db``, a bare path, or ``postgresql://...``.
        clock: lease clock for SQLite (defaults to the system clock).
        create: SQLite only; when False a missing file reads as unmigrated rather than being created.
    Raises:
        InvalidInput: a malformed URL.
        StoreUnavailable: the backend cannot be reached.
    """
    parsed = parse_database_url(url)
    if parsed.backend == "sqlite":
        from fencepost.store.sqlite.store import SQLiteStore

        assert parsed.path is not None
        return SQLiteStore(parsed.path, journal_mode=parsed.options.get("journal_mode", "wal"),
                           synchronous=parsed.options.get("synchronous", "full"), create=create, clock=clock,
                           **options)
    from fencepost.store.postgres.store import PostgresStore

    assert parsed.dsn is not None
    return PostgresStore(parsed.dsn, clock=clock, **options)
