"""The unit-of-work contract: ``Store.transact``/``transaction``/``read`` semantics and schema readiness.

A unit commits whole or not at all; a constraint violation is a ``Conflict``; ``StoreBusy`` is retried within
the store's bounded wait; ``tx.now()`` is one instant per unit; a store refuses an unmigrated, newer or
edited schema with the command to run (seed: migration remains required).
"""

from __future__ import annotations

from typing import Any

import pytest

from fencepost.core.errors import Conflict, SchemaNotReady
from fencepost.store.base import Store, StoreBusy
from fencepost.store.ports import UnitOfWork
from fencepost.testing.backend import ContractHarness, StoreContract


def insert(tx: UnitOfWork, command_id: str) -> None:
    """Insert the PENDING command ``command_id`` (kind ``k``, empty payload) in ``tx``."""
    tx.outbox.insert(command_id=command_id, kind="k", payload={})


class UnitOfWorkContract(StoreContract):
    """Units of work and schema readiness on one backend (subclass as ``TestUnitOfWork``)."""

    def test_transact_commits(self, store: Store) -> None:
        store.transact(lambda tx: insert(tx, "c1"))
        assert store.read(lambda tx: tx.outbox.get("c1")) is not None

    def test_an_exception_rolls_back_the_whole_transaction(self, store: Store) -> None:
        def fn(tx: UnitOfWork) -> None:
            insert(tx, "c1")
            insert(tx, "c2")
            raise ValueError("caller gave up")

        with pytest.raises(ValueError, match="caller gave up"):
            store.transact(fn)
        assert store.read(lambda tx: (tx.outbox.get("c1"), tx.outbox.get("c2"))) == (None, None)

    def test_a_constraint_violation_is_a_conflict_and_rolls_back_the_whole_transaction(self, store: Store) -> None:
        store.transact(lambda tx: insert(tx, "dup"))

        def fn(tx: UnitOfWork) -> None:
            insert(tx, "c1")
            insert(tx, "dup")

        with pytest.raises(Conflict):
            store.transact(fn)
        assert store.read(lambda tx: tx.outbox.get("c1")) is None
        # The store is fine afterwards.
        store.transact(lambda tx: insert(tx, "c2"))

    def test_the_context_manager_commits_and_rolls_back(self, store: Store) -> None:
        with store.transaction() as tx:
            insert(tx, "c1")
        with pytest.raises(KeyError), store.transaction() as tx:
            insert(tx, "c2")
            raise KeyError("x")
        assert store.read(lambda tx: (tx.outbox.get("c1") is not None, tx.outbox.get("c2"))) == (True, None)

    def test_transact_retries_store_busy_then_succeeds(self, store: Store) -> None:
        calls: list[int] = []

        def fn(tx: UnitOfWork) -> str:
            calls.append(1)
            insert(tx, f"c{len(calls)}")
            if len(calls) < 3:
                raise StoreBusy("contention")
            return "done"

        assert store.transact(fn) == "done"
        assert len(calls) == 3
        assert store.read(lambda tx: [tx.outbox.get(f"c{i}") is not None for i in (1, 2, 3)]) == [False, False, True]

    def test_transact_gives_up_after_the_bounded_wait(self, backend: ContractHarness) -> None:
        store = backend.migrated(busy_wait_seconds=0.05)

        def fn(tx: UnitOfWork) -> None:
            raise StoreBusy("always busy")

        with pytest.raises(StoreBusy):
            store.transact(fn)

    def test_one_transaction_per_thread(self, store: Store) -> None:
        with store.transaction() as tx, pytest.raises(RuntimeError), store.transaction():
            pass
        assert tx is not None

    def test_now_is_one_instant_per_transaction_and_moves_between_them(
            self, store: Store, backend: ContractHarness) -> None:
        def fn(tx: UnitOfWork) -> Any:
            return tx.now(), tx.now()

        first, again = store.transact(fn)
        assert first == again and first.utcoffset() is not None and first.utcoffset().total_seconds() == 0
        backend.advance(0.01)
        assert store.transact(fn)[0] > first

    def test_read_sees_committed_writes_of_other_stores(self, backend: ContractHarness) -> None:
        writer, reader = backend.migrated(), backend.open()
        writer.transact(lambda tx: insert(tx, "c1"))
        assert reader.read(lambda tx: tx.outbox.get("c1")) is not None

    def test_display_url_never_shows_the_location(self, store: Store, backend: ContractHarness) -> None:
        assert isinstance(store.display_url, str) and store.display_url
        assert backend.hides_location(store.display_url)

    # ── schema readiness ──

    def test_an_unmigrated_store_is_refused_with_the_command_to_run(self, backend: ContractHarness) -> None:
        store = backend.open()
        assert store.schema_version() == 0
        with pytest.raises(SchemaNotReady, match="`fencepost migrate`") as caught:
            store.require_schema()
        assert "unmigrated" in str(caught.value) and "\n" not in str(caught.value)

    def test_migrate_is_idempotent(self, backend: ContractHarness) -> None:
        store = backend.open()
        applied = store.migrate()
        assert [s.version for s in applied] == list(range(1, store.expected_version + 1))
        assert store.schema_version() == store.expected_version >= 1
        store.require_schema()
        assert store.migrate() == []
        assert backend.open().migrate() == []
        assert store.schema_version() == store.expected_version

    def test_a_newer_schema_is_refused(self, store: Store, backend: ContractHarness) -> None:
        store.transact(lambda tx: backend.inspect(
            tx, "INSERT INTO fencepost_schema (version, name, checksum, applied_at) "
            "SELECT 999, 'future', 'x', applied_at FROM fencepost_schema WHERE version = 1"))
        with pytest.raises(SchemaNotReady, match="newer"):
            store.require_schema()
        with pytest.raises(SchemaNotReady, match="upgrade fencepost"):
            store.migrate()

    def test_an_edited_migration_is_refused(self, store: Store, backend: ContractHarness) -> None:
        store.transact(lambda tx: backend.inspect(
            tx, "UPDATE fencepost_schema SET checksum = 'edited' WHERE version = 1"))
        with pytest.raises(SchemaNotReady, match="differs"):
            store.migrate()
