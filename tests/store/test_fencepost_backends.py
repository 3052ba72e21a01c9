"""What only fencepost's own backends promise beyond the shipped contract suite (``test_contract_suite.py``):
their exact display strings, and SIGKILL around COMMIT of a store opened by URL in another process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from fencepost.store import Store
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import StoreBackend


def insert(tx: UnitOfWork, command_id: str) -> None:
    tx.outbox.insert(command_id=command_id, kind="k", payload={})


def test_display_url_never_carries_the_location(store: Store, backend: StoreBackend) -> None:
    assert store.display_url in ("postgresql", "sqlite (wal journal)", "sqlite (delete journal)")
    assert backend.url not in store.display_url


# ── crash points around COMMIT ──

_PROBE = """
import json, sys
from fencepost.store import open_store
args = json.loads(sys.argv[1])
store = open_store(args["url"], **args["options"])
store.transact(lambda tx: tx.outbox.insert(command_id="crash", kind="k", payload={}), name="probe")
print("returned")
"""


@pytest.mark.slow
@pytest.mark.parametrize(("point", "durable"), [("probe:before-commit", False), ("probe:after-commit", True)])
def test_sigkill_at_a_crash_point(store: Store, backend: StoreBackend, point: str, durable: bool) -> None:
    options = {"schema": backend.schema} if backend.schema else {}
    env = {**os.environ, "FENCEPOST_CRASHPOINT": point}
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps({"url": backend.url, "options": options})],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "returned" not in done.stdout
    assert (store.read(lambda tx: tx.outbox.get("crash")) is not None) is durable
    # The store is usable afterwards (SQLite: hot journal rolled back; PostgreSQL: the backend's tx aborted).
    store.transact(lambda tx: insert(tx, "after"))
