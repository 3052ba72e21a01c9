"""The scale checks can fail: each one flags the violation it exists for.

A small queue is drained in process (one worker, no subprocess), which satisfies every check. Then each
violation is written into the schema inside a transaction that is rolled back afterwards, and the check
meant to catch it must report it: a lost or reopened command, a second delivery, a delivery count without
its takeover, a heartbeat after the next delivery's claim, and a Receipt or evidence from an old delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from scale_checks import (
    delivered_exactly_once,
    deliveries_match_claims,
    every_attempt_succeeded,
    no_stale_write_persisted,
)
from scale_support import ScaleDB, tiny_package

from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.rehearsal.handler import KIND, AttemptHandler

pytestmark = pytest.mark.postgres
ATTEMPTS = 3


@pytest.fixture
def drained(db: ScaleDB, tmp_path: Path) -> Iterator[ScaleDB]:
    run = db.service.create_run(tiny_package(db.root / "pkg"))
    db.enqueue(run.id, ATTEMPTS)
    registry = HandlerRegistry()
    registry.register(KIND, AttemptHandler(tmp_path / "work"))
    worker = Worker(db.store, registry, WorkerConfig(poll_interval=0.01, lease_seconds=30, worker_id="w"))
    worker.run(max_idle_polls=1)
    assert worker.stats.delivered == ATTEMPTS
    yield db


def _checks(db: ScaleDB) -> dict[str, list[str]]:
    return {"every_attempt_succeeded": every_attempt_succeeded(db, ATTEMPTS),
            "delivered_exactly_once": delivered_exactly_once(db),
            "deliveries_match_claims": deliveries_match_claims(db),
            "no_stale_write_persisted": no_stale_write_persisted(db)}


def _one_command(db: ScaleDB) -> str:
    return str(db.scalar("SELECT min(command_id) FROM rehearsal_attempts"))


def _event(db: ScaleDB, command_id: str, event: str, delivery: int) -> None:
    db.query("INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until) "
             "VALUES (%s, %s, 'tamper', %s, clock_timestamp(), NULL) RETURNING seq", (command_id, event, delivery))


TAMPERINGS: dict[str, tuple[str, Callable[[ScaleDB, str], None]]] = {
    "reopened command": ("every_attempt_succeeded", lambda db, c: db.query(
        "UPDATE commands SET status = 'PENDING', finished_at = NULL WHERE id = %s RETURNING id", (c,))),
    "second deliver": ("delivered_exactly_once", lambda db, c: _event(db, c, "deliver", 1)),
    "count without takeover": ("deliveries_match_claims", lambda db, c: db.query(
        "UPDATE commands SET delivery_count = 2 WHERE id = %s RETURNING id", (c,))),
    "heartbeat after the next claim": ("no_stale_write_persisted", lambda db, c: (
        _event(db, c, "takeover", 2), _event(db, c, "heartbeat", 1))),
    "receipt of an old delivery": ("no_stale_write_persisted", lambda db, c: db.query(
        "UPDATE rehearsal_receipts SET delivery = 0 WHERE position = 4 AND attempt_id = "
        "(SELECT id FROM rehearsal_attempts WHERE command_id = %s) RETURNING id", (c,))),
    "evidence of an old delivery": ("no_stale_write_persisted", lambda db, c: db.query(
        "UPDATE rehearsal_receipts SET evidence = replace(evidence, '\"delivery\":1', '\"delivery\":7') "
        "WHERE position = 2 AND attempt_id = (SELECT id FROM rehearsal_attempts WHERE command_id = %s) "
        "RETURNING id", (c,))),
}


def test_a_clean_drain_passes_every_check(drained: ScaleDB) -> None:
    assert _checks(drained) == {name: [] for name in _checks(drained)}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_each_check_flags_its_violation(drained: ScaleDB, tampering: str) -> None:
    check, tamper = TAMPERINGS[tampering]
    command_id = _one_command(drained)
    drained.query("BEGIN")
    try:
        tamper(drained, command_id)
        found = _checks(drained)[check]
    finally:
        drained.query("ROLLBACK")
    assert found, f"{check} missed: {tampering}"
    attempt_id = str(drained.scalar("SELECT id FROM rehearsal_attempts WHERE command_id = %s", (command_id,)))
    named = [p for p in found if command_id in p or attempt_id in p]
    assert named or tampering == "reopened command", f"the problem does not name the culprit: {found}"
    assert _checks(drained)[check] == [], "the tampering was not rolled back"
