"""Helpers of the worker-level outbox contract (``tests/outbox_contract``), written once for every backend.

The tests drive a real ``Worker`` (``run_once`` for determinism, ``run`` where the loop itself is the point)
against the ``store``/``backend`` fixtures of ``tests/conftest.py``: ``sqlite-wal``, ``sqlite-delete`` and
``postgres``. Expiry goes through ``backend.expire()``: it moves the ManualClock on SQLite and sleeps past
the 0.3 s ``short_lease`` on PostgreSQL, whose own clock decides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from fencepost.outbox import CommandContext, FunctionHandler, HandlerRegistry, Worker, WorkerConfig
from fencepost.store import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import CommandRecord
from helpers.store_backends import StoreBackend

T = TypeVar("T")
KIND = "contract.echo"
OTHER = "contract.other"


def insert(store: Store, command_id: str, *, kind: str = KIND, payload: dict[str, Any] | None = None,
           delay: float = 0.0) -> None:
    """Enqueue one command, due ``delay`` seconds after the store's now."""

    def unit(tx: UnitOfWork) -> None:
        tx.outbox.insert(command_id=command_id, kind=kind, payload=payload or {"n": command_id},
                         available_at=tx.now() + timedelta(seconds=delay))

    store.transact(unit)


def worker(store: Store, backend: StoreBackend, fn: Callable[[CommandContext], None], *, worker_id: str,
           batch_size: int = 10, lease: float | None = None, poll: float = 0.01, listen: bool = True,
           kinds: tuple[str, ...] = (KIND,)) -> Worker:
    """A worker running ``fn`` for ``kinds`` with the backend's short lease unless told otherwise."""
    registry = HandlerRegistry()
    for kind in kinds:
        registry.register(kind, FunctionHandler(fn))
    config = WorkerConfig(poll_interval=poll, batch_size=batch_size, concurrency=batch_size,
                          lease_seconds=lease if lease is not None else backend.short_lease, worker_id=worker_id,
                          listen=listen)
    return Worker(store, registry, config)


def command(store: Store, command_id: str) -> CommandRecord:
    found = store.read(lambda tx: tx.outbox.get(command_id))
    assert found is not None, f"no command {command_id}"
    return found


def exists(store: Store, command_id: str) -> bool:
    return store.read(lambda tx: tx.outbox.get(command_id)) is not None


def history(store: Store, command_id: str) -> list[tuple[str, str | None, int]]:
    """``(event, owner, delivery)`` of every lease event of the command, in order."""
    return [(e.event, e.owner, e.delivery) for e in store.read(lambda tx: tx.outbox.lease_events(command_id))]


class Running:
    """``worker.run()`` on a thread; ``stop()`` requests a graceful stop and joins it (bounded)."""

    def __init__(self, w: Worker) -> None:
        self.worker = w
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="contract-worker", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop within the bounded wait"
        if self.error is not None:
            raise self.error
