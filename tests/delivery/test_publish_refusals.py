"""A refused publish names the rehearsal whose gate it checked (a new user's trial): the newest rehearsal of the
exact content is the one that counts, so an older one that passed does not, and the refusal says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from delivery.kit import THREE, drain, write_package
from fencepost.catalog.lifecycle import CatalogService
from fencepost.core.clock import ManualClock
from fencepost.core.errors import NotAllowed
from fencepost.core.statuses import AttemptStatus
from fencepost.rehearsal.service import RehearsalService, release_gate
from fencepost.store.base import Store


def test_a_newer_empty_rehearsal_blocks_publish_and_the_refusal_names_it(control: Store, tmp_path: Path) -> None:
    package = write_package(tmp_path, "shop", "1.0.0", THREE)
    service = RehearsalService(control)
    passed = service.create_run(package)
    for _ in range(2):
        attempt = service.enqueue_attempt(passed.id)
        drain(control, tmp_path / "work")
        assert service.attempt(attempt.id).status is AttemptStatus.SUCCEEDED
    assert service.gate(passed.id).passed
    if isinstance(control.clock, ManualClock):  # SQLite's test clock stands still: "newest" needs a later instant
        control.clock.advance(1)
    newest = service.create_run(package)  # `fencepost rehearsal create` of the same content, no Attempt yet
    with pytest.raises(NotAllowed) as refused:
        CatalogService(control, release_gate=release_gate).publish(package)
    message = str(refused.value)
    assert refused.value.guard == "release_gate"
    assert f"rehearsal {newest.id}" in message and passed.id not in message
    assert "the newest rehearsal of this content is the one that counts" in message
    assert "latest_attempt_succeeded: no Attempt exists yet" in message
