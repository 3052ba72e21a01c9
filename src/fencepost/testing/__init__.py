"""The store contract suite: abstract pytest classes, one per port or concern, for any ``Store``.

A backend proves it keeps fencepost's store contract (``fencepost.store.ports``, ADR 0015) by running these
classes against itself. It supplies one pytest fixture, ``contract_backend``, that yields a
``ContractBackend`` bound to a fresh, empty database per test, and subclasses each class under a name
pytest collects::

    import pytest
    from fencepost.testing import ContractBackend, OutboxContract

    @pytest.fixture
    def contract_backend(tmp_path) -> ContractBackend:
        return MyBackend(tmp_path)

    class TestOutbox(OutboxContract):
        pass

``docs/store-contract.md`` shows a whole backend. The classes are named ``*Contract`` so that pytest never
collects them by themselves. Each defines the fixtures ``backend`` (a ``ContractHarness``) and ``store`` (a
migrated store on the backend's database) for its tests.

This layer is test infrastructure: nothing in fencepost imports it, and it needs pytest (a dev dependency).
"""

from __future__ import annotations

try:
    import pytest  # noqa: F401  (imported first for the clear message below)
except ImportError as error:  # pragma: no cover - exercised in a subprocess by tests/store/test_contract_suite.py
    raise ImportError("fencepost.testing is the store contract suite and needs pytest: "
                      "install it with `pip install pytest` (or fencepost's dev extra, `pip install fencepost[dev]`)"
                      ) from error

from fencepost.testing.admission import AdmissionContract
from fencepost.testing.backend import ContractBackend, ContractHarness, StoreContract
from fencepost.testing.catalog import CatalogContract
from fencepost.testing.concurrency import ConcurrencyContract
from fencepost.testing.entity_states import EntityStateContract
from fencepost.testing.events import EventRelayContract
from fencepost.testing.group_commit import GroupCommitContract
from fencepost.testing.host import EventsContract, HostContract
from fencepost.testing.outbox import OutboxContract
from fencepost.testing.progress import ProgressContract
from fencepost.testing.rehearsal import RehearsalContract
from fencepost.testing.unit_of_work import UnitOfWorkContract

#: Every contract class, for a backend that runs them all.
CONTRACTS: tuple[type[StoreContract], ...] = (
    OutboxContract, RehearsalContract, CatalogContract, AdmissionContract, UnitOfWorkContract, ConcurrencyContract,
    HostContract, EventsContract, EventRelayContract, ProgressContract, GroupCommitContract,
    EntityStateContract)

__all__ = [
    "CONTRACTS",
    "AdmissionContract",
    "CatalogContract",
    "ConcurrencyContract",
    "ContractBackend",
    "ContractHarness",
    "EntityStateContract",
    "EventRelayContract",
    "EventsContract",
    "GroupCommitContract",
    "HostContract",
    "OutboxContract",
    "ProgressContract",
    "RehearsalContract",
    "StoreContract",
    "UnitOfWorkContract",
]
