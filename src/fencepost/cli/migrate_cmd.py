"""``fencepost migrate``: create or upgrade the control database's schema."""

from __future__ import annotations

import typer

from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.store.url import DEFAULT_URL


def migrate(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Create or upgrade the control database schema (safe to run again)."""
    with opened(database, require_schema=False) as store, handled():
        applied = store.migrate()
        version = store.schema_version()
    names = [f"{m.version:04d}_{m.name}" for m in applied]
    data = {"backend": store.backend, "schema_version": version, "applied": names}
    emit(json, data, lambda: typer.echo(
        f"{store.display_url}: schema at version {version}"
        + (f" (applied {', '.join(names)})" if names else " (already current)")))
