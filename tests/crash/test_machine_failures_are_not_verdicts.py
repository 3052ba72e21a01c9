"""A failure of the worker's machine is never an Attempt's verdict (docs/operations.md, Bounds; issue 10).

A trial filled the disk under a worker's work directory: the Attempt was sealed FAILED ("delivery to target
refused: target directory is not writable: No space left on device") and the release gate blocked, for a
package that had done nothing wrong. Here the work directory's ``sandboxes`` or ``target`` entry is a file, so
creating the sandbox or writing the target's receipt fails with an OSError, as on a full disk: the worker records
nothing, abandons the command to its lease, and once the machine is repaired the next delivery passes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from crash_flows import EXAMPLE_PACKAGE, selected_backend

from fencepost.core.statuses import AttemptStatus, CommandStatus
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store
from helpers.store_backends import StoreBackend


@pytest.fixture(params=[pytest.param("sqlite-wal", id="sqlite-wal"),
                        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    with selected_backend(str(request.param), tmp_path) as b:
        yield b


def _worker(store: Store, backend: StoreBackend, work_dir: Path, worker_id: str) -> Worker:
    registry = HandlerRegistry()
    registry.register(KIND, AttemptHandler(work_dir))
    return Worker(store, registry, WorkerConfig(poll_interval=0.01, batch_size=1, worker_id=worker_id,
                                                        lease_seconds=backend.short_lease))


@pytest.mark.parametrize("broken", ["sandboxes", "target"])
def test_a_work_directory_that_cannot_be_written_abandons_the_attempt_to_its_lease(
        backend: StoreBackend, tmp_path: Path, broken: str, caplog: pytest.LogCaptureFixture) -> None:
    store = backend.migrated()
    service = RehearsalService(store)
    run = service.create_run(EXAMPLE_PACKAGE)
    attempt = service.enqueue_attempt(run.id)
    work = tmp_path / "work"
    work.mkdir()
    (work / broken).write_text("not a directory")  # mkdir under it fails as on a full disk: an OSError
    caplog.set_level(logging.INFO)

    sick = _worker(store, backend, work, "sick")
    assert sick.run_once() == 1
    assert (sick.stats.delivered, sick.stats.failed) == (0, 0), sick.stats
    abandoned = [str(getattr(r, "error", "")) for r in caplog.records
                 if getattr(r, "event", None) == "command_abandoned"]
    assert len(abandoned) == 1 and ("could not create a sandbox" if broken == "sandboxes"
                                    else "target directory is not writable") in abandoned[0], abandoned
    now = service.attempts(run.id)[0]
    assert now.status is AttemptStatus.RUNNING, now  # no verdict: not FAILED, nothing sealed as the package's
    assert not [r for r in service.receipts(attempt.id) if r.status.value == "FAILED"]
    command = store.read(lambda tx: tx.outbox.get(attempt.command_id))
    assert command is not None and command.status is CommandStatus.PROCESSING  # left to its lease

    (work / broken).unlink()  # the machine repaired
    backend.expire()
    healthy = _worker(store, backend, work, "healthy")
    assert healthy.run_once() == 1
    assert service.attempts(run.id)[0].status is AttemptStatus.SUCCEEDED
