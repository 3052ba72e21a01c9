"""Typed reads for store tests: records that must exist, and raw SQL (test-only, both backends)."""

from __future__ import annotations

from typing import Any, cast

from fencepost.store import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import AttemptRecord, CommandRecord


def read_command(store: Store, command_id: str) -> CommandRecord:
    """The command ``command_id``; fails the test when it does not exist."""
    record = store.read(lambda tx: tx.outbox.get(command_id))
    assert record is not None, f"no command {command_id}"
    return record


def read_attempt(store: Store, attempt_id: str) -> AttemptRecord:
    """The Attempt ``attempt_id``; fails the test when it does not exist."""
    record = store.read(lambda tx: tx.rehearsal.get_attempt(attempt_id))
    assert record is not None, f"no attempt {attempt_id}"
    return record


def raw(tx: UnitOfWork, query: str) -> list[tuple[Any, ...]]:
    """Run parameterless SQL through the backend's ``execute_raw`` (both stores offer it)."""
    return cast(list[tuple[Any, ...]], cast(Any, tx).execute_raw(query))


def update_past_checks(backend: Any, tx: Any, update: str, constraint: str) -> None:
    """Run ``update`` in ``tx`` as a row edited behind the store's back would be: past the CHECKs that refuse it
    (SQLite ignores CHECKs for the statement; PostgreSQL drops the named ``constraint`` first, in ``tx``).
    ``backend`` is the test's ``StoreBackend`` (its ``inspect`` runs raw SQL)."""
    if tx.backend == "sqlite":
        backend.inspect(tx, "PRAGMA ignore_check_constraints = ON")
        try:
            backend.inspect(tx, update)
        finally:
            backend.inspect(tx, "PRAGMA ignore_check_constraints = OFF")
    else:
        table = update.split()[1]
        backend.inspect(tx, f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
        backend.inspect(tx, update)
