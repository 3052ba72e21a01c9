"""What the contract suite needs from a backend (``ContractBackend``), and the fixtures every class shares."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork


class ContractBackend(Protocol):
    """One store backend under test, bound to one fresh database. Supplied by the ``contract_backend`` fixture.

    The suite asks for a new ``ContractBackend`` for every test (so every test starts on an empty database)
    and closes every store it opened before the fixture's teardown runs.
    """

    @property
    def name(self) -> str:
        """A label for reports, e.g. ``sqlite-wal``."""
        ...

    @property
    def location(self) -> str:
        """Where the database is (a URL, a path): no error message or display string may show it.

        Empty when there is nothing to hide (an in-memory store).
        """
        ...

    @property
    def short_lease(self) -> float:
        """A lease duration (seconds) that tests outlive by ``advance``-ing the clock (see ``expire``)."""
        ...

    @property
    def long_lease(self) -> float:
        """A lease duration (seconds) that no test outlives: at least ten times ``short_lease``."""
        ...

    def open(self) -> Store:
        """A new ``Store`` on this backend's one database, every call the same database and the same lease clock.

        The database is empty (unmigrated) until the suite calls ``Store.migrate`` on a store it opened; the
        schema-readiness tests rely on that.
        """
        ...

    def advance(self, seconds: float) -> None:
        """Let at least ``seconds`` (seconds) pass on the store's lease clock.

        A store whose clock the test controls (a ``fencepost.core.clock.ManualClock`` given to every store
        ``open`` returns) moves it; a store whose clock is a server's sleeps.
        """
        ...

    def inspect(self, tx: UnitOfWork, sql: str) -> list[tuple[Any, ...]]:
        """Run one parameterless SQL statement inside the unit ``tx`` and return its rows.

        The suite reads below the ports with it (the private token column, stored text, row counts) and
        damages rows on purpose (a CHECK violation, an edited migration record, a value outside its
        vocabulary), so it must run in ``tx`` and raise what the store's own statements raise. fencepost's SQL
        units offer it as ``tx.execute_raw(sql)``.

        Raises:
            NotImplementedError: the store has no SQL; the tests that need it are skipped, saying so.
        """
        ...


class ContractHarness:
    """What a contract test receives as ``backend``: the ``ContractBackend`` plus the stores it opened.

    Args:
        backend: the test's backend, on its fresh database.
    Raises:
        ValueError: ``long_lease`` is shorter than ten ``short_lease``s (tests would outlive it).
    """

    #: ``expire`` moves the clock this many ``short_lease``s forward.
    EXPIRY = 1.2

    def __init__(self, backend: ContractBackend) -> None:
        if backend.long_lease < 10 * backend.short_lease:
            raise ValueError(f"{backend.name}: long_lease ({backend.long_lease} s) must be at least ten "
                             f"short_leases ({backend.short_lease} s)")
        self.contract_backend = backend
        self._stores: list[Store] = []

    @property
    def name(self) -> str:
        return self.contract_backend.name

    @property
    def location(self) -> str:
        return self.contract_backend.location

    @property
    def short_lease(self) -> float:
        return self.contract_backend.short_lease

    @property
    def long_lease(self) -> float:
        return self.contract_backend.long_lease

    def hides_location(self, text: str) -> bool:
        """Whether ``text`` (an error message, a display string) does not show the database's location."""
        return not self.location or self.location not in text

    def open(self) -> Store:
        """Another store on the backend's database (closed at teardown); unmigrated until someone migrates."""
        store = self.contract_backend.open()
        self._stores.append(store)
        return store

    def migrated(self, *, busy_wait_seconds: float | None = None) -> Store:
        """Another store on the backend's database, after ``Store.migrate`` (idempotent).

        Args:
            busy_wait_seconds: replaces the store's bound on retrying transient contention (seconds).
        """
        store = self.open()
        if busy_wait_seconds is not None:
            store.busy_wait_seconds = busy_wait_seconds
        store.migrate()
        return store

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` (seconds) pass on the lease clock (``ContractBackend.advance``)."""
        self.contract_backend.advance(seconds)

    def expire(self) -> None:
        """Move past ``short_lease`` (by ``EXPIRY`` of them) so every short lease taken before now has expired."""
        self.advance(self.short_lease * self.EXPIRY)

    def inspect(self, tx: UnitOfWork, sql: str) -> list[tuple[Any, ...]]:
        """``ContractBackend.inspect``; skips the test when the backend has no SQL."""
        try:
            return self.contract_backend.inspect(tx, sql)
        except NotImplementedError:
            pytest.skip(f"{self.name} runs no SQL; this contract test reads or damages rows below the ports")

    def close(self) -> None:
        """Close every store this harness opened."""
        for store in self._stores:
            store.close()
        self._stores.clear()


class StoreContract:
    """Base of every contract class: the ``backend`` and ``store`` fixtures over ``contract_backend``.

    The subclass's module or a ``conftest.py`` defines the fixture ``contract_backend``, which yields a
    ``ContractBackend`` on a fresh database per test (parametrize it to run the suite on several backends).
    """

    @pytest.fixture
    def backend(self, contract_backend: ContractBackend) -> Iterator[ContractHarness]:
        """The test's backend; every store opened through it is closed afterwards."""
        harness = ContractHarness(contract_backend)
        try:
            yield harness
        finally:
            harness.close()

    @pytest.fixture
    def store(self, backend: ContractHarness) -> Store:
        """A migrated store on the test's database."""
        return backend.migrated()
