"""Crash windows of the worker registry (ADR 0019): ``workers.register``, ``workers.beat`` and
``workers.deregister``, each SIGKILLed on both sides of its COMMIT.

The subject is ``tests/registry/registration_loop.py`` (what a worker does with its registration: register at
start, beat every 0.2 s, deregister on SIGTERM), killed by ``FENCEPOST_CRASHPOINT`` at the window's point
(the first beat; the deregistration after a SIGTERM). ``run_registry_flow`` then checks, through the real CLI:

1. the subject died of SIGKILL, and its row is exactly what the crash point predicts: absent when the
   registration never committed or the deregistration did; present otherwise, renewed (``last_seen_at`` after
   ``started_at``) only when the beat committed;
2. a dead subject is never listed live for longer than its live window (three heartbeats): it moves to the
   expired registrations, or is absent;
3. a successor registers, is the one live worker, and its graceful stop deletes its own row only;
4. ``fencepost audit`` exits 0: the registry is not part of any other invariant.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from crash_harness import CrashDB, assert_cli_audit_clean, cli, wait_until

from helpers.processes import Process, kill_all, start

LOOP = Path(__file__).resolve().parents[1] / "registry" / "registration_loop.py"
KIND = "rehearsal.attempt"
HEARTBEAT = 0.2
WINDOWS: tuple[str, ...] = tuple(f"workers.{step}:{side}-commit" for step in ("register", "beat", "deregister")
                                 for side in ("before", "after"))


def _start(db: CrashDB, worker_id: str, started: list[Process], crash: str | None = None) -> Process:
    loop = start([db.url, worker_id, f"{HEARTBEAT:g}", "0", KIND], name=worker_id, crash=crash,
                 stdout_path=db.root / f"loop-{worker_id}.log", cwd=db.root, worker_id=worker_id,
                 argv_prefix=[sys.executable, str(LOOP)], started_event="registration_loop_started")
    started.append(loop)
    return loop


def _registry(db: CrashDB) -> dict[str, Any]:
    result = cli(db, "workers", "--json")
    assert result.returncode == 0, result.describe()
    data: dict[str, Any] = result.json()
    return data


def _ids(data: dict[str, Any], part: str) -> list[str]:
    return [w["id"] for w in data[part]]


def run_registry_flow(db: CrashDB, point: str) -> None:
    """Crash the subject at ``point`` (one of ``WINDOWS``), then check what the registry says (see module)."""
    started: list[Process] = []
    try:
        subject = _start(db, "subject", started, crash=point)
        if point.startswith("workers.deregister:"):
            wait_until(lambda: subject.events("registration_loop_started"), what="the subject to register")
            subject.send(signal.SIGTERM)
        subject.wait_killed()
        data = _registry(db)
        rows = {w["id"]: w for w in data["live"] + data["expired"]}
        committed = point.endswith(":after-commit")
        expect_row = ((point.startswith("workers.register:") and committed)
                      or point.startswith("workers.beat:")
                      or (point.startswith("workers.deregister:") and not committed))
        assert set(rows) == ({"subject"} if expect_row else set()), (point, data)
        if point.startswith("workers.beat:"):
            renewed = rows["subject"]["last_seen_at"] != rows["subject"]["started_at"]
            assert renewed is committed, (point, rows["subject"])
        # a dead worker is listed live at most for its live window
        wait_until(lambda: _registry(db)["live"] == [], what="the subject to stop being live", interval=0.2)
        assert _ids(_registry(db), "expired") == (["subject"] if expect_row else [])

        successor = _start(db, "successor", started)
        wait_until(lambda: successor.events("registration_loop_started"), what="the successor to register")
        data = _registry(db)
        assert (_ids(data, "live"), _ids(data, "expired")) == (["successor"], ["subject"] if expect_row else [])
        successor.stop_cleanly()
        data = _registry(db)
        assert (_ids(data, "live"), _ids(data, "expired")) == ([], ["subject"] if expect_row else [])
    finally:
        kill_all(started)
    assert_cli_audit_clean(db)
