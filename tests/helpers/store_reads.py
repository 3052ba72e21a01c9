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
