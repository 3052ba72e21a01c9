"""fencepost's own stores keep the store contract: the shipped suite (``fencepost.testing``) on every backend
selected by ``FENCEPOST_TEST_BACKENDS`` (sqlite-wal, sqlite-delete, postgres), through its public entry.

``contract_backend`` is what any backend supplies; here it is ``helpers.store_backends.StoreBackend`` on a
fresh database per test (PostgreSQL unreachable fails the test, never skips it).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencepost.testing import (
    CONTRACTS,
    AdmissionContract,
    CatalogContract,
    ConcurrencyContract,
    ContractBackend,
    EntityStateContract,
    EventRelayContract,
    EventsContract,
    GroupCommitContract,
    HostContract,
    OutboxContract,
    ProgressContract,
    RehearsalContract,
    UnitOfWorkContract,
)
from helpers.store_backends import BackendUnreachable, store_backend


@pytest.fixture
def contract_backend(store_backend_name: str, tmp_path: Path) -> Iterator[ContractBackend]:
    try:
        with store_backend(store_backend_name, tmp_path) as backend:
            yield backend
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


class TestOutbox(OutboxContract):
    pass


class TestRehearsal(RehearsalContract):
    pass


class TestCatalog(CatalogContract):
    pass


class TestAdmission(AdmissionContract):
    pass


class TestProgress(ProgressContract):
    pass


class TestUnitOfWork(UnitOfWorkContract):
    pass


class TestConcurrency(ConcurrencyContract):
    pass


class TestHost(HostContract):
    pass


class TestEvents(EventsContract):
    pass


class TestEventRelay(EventRelayContract):
    pass


class TestGroupCommit(GroupCommitContract):
    pass


class TestEntityStates(EntityStateContract):
    pass


def test_this_module_runs_every_contract() -> None:
    here = {cls for value in globals().values() if isinstance(value, type) and value.__name__.startswith("Test")
            for cls in value.__mro__}
    assert set(CONTRACTS) <= here


_WITHOUT_PYTEST = """
import sys
sys.modules["pytest"] = None  # what an environment without pytest looks like to an import
try:
    import fencepost.testing
except ImportError as error:
    print(error)
else:
    print("imported")
"""


def test_without_pytest_the_suite_says_to_install_it() -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PYTEST], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "needs pytest" in done.stdout and "pip install pytest" in done.stdout, done.stdout
