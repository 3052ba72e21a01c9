"""Acceptance: a worker that dies, freezes or is asked to stop mid-Attempt (issue 2, parts 2, 3 and 5).

Each test runs real ``fencepost worker`` subprocesses on one SQLite control database and acts while
Receipt 3 (``seed_and_verify`` of the slow package, a second or more of SQL) is RUNNING.
Seed: "Heartbeat And Takeover" — takeover only after expiry, a new fencing token, a new sandbox, all six
scenarios replayed, and a stale worker that can persist nothing.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from acceptance_support import SCENARIOS, Env, parse_instant, slow_package, wait_until

from helpers.processes import Process


def _slow_attempt(env: Env, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    created = env.cli("rehearsal", "create", str(slow_package(tmp_path / "slow")), "--json")
    assert created.returncode == 0, created.describe()
    enqueued = env.cli("rehearsal", "attempt", created.json()["id"], "--json")
    assert enqueued.returncode == 0, enqueued.describe()
    return created.json(), enqueued.json()


def _process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T`` when stopped)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def _freeze(worker: Process, env: Env, attempt_id: str) -> None:
    """SIGSTOP ``worker`` at a moment it holds no SQLite write lock (else the takeover would wait on a
    frozen process, which is not what this test is about) while Receipt 3 is still RUNNING."""
    for _ in range(20):
        worker.send(signal.SIGSTOP)
        wait_until(lambda: _process_state(worker.pid) == "T", what="the worker to be stopped")
        if env.db.write_lock_free():
            assert env.db.receipt_status(attempt_id, 3) == "RUNNING", (
                "the seed finished before the worker could be frozen: raise FENCEPOST_ACCEPTANCE_SLOW_ROWS")
            return
        worker.send(signal.SIGCONT)
        wait_until(env.db.write_lock_free, what="the worker to release the write lock")
    raise AssertionError("could not freeze the worker outside a write transaction")


def _sandbox_snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def _assert_replayed_by(env: Env, attempt_id: str, owner: str, delivery: int) -> list[dict[str, Any]]:
    """Every Receipt SUCCEEDED in ``delivery`` by ``owner``, in scenario order, in one sandbox."""
    receipts = env.db.receipts(attempt_id)
    assert [r["scenario"] for r in receipts] == list(SCENARIOS)
    for r in receipts:
        assert r["status"] == "SUCCEEDED", r
        assert r["delivery"] == delivery, r
        evidence = r["evidence_json"]
        assert evidence["execution"]["worker"] == owner
        assert evidence["execution"]["delivery"] == delivery
    assert len({r["evidence_json"]["sandbox"]["id"] for r in receipts}) == 1
    return receipts


@pytest.mark.slow
def test_sigkill_mid_attempt_is_taken_over_after_expiry_and_replayed_from_scratch(migrated: Env,
                                                                                 tmp_path: Path) -> None:
    watch = migrated.watch_tokens()
    run, attempt = _slow_attempt(migrated, tmp_path)
    attempt_id, command_id = attempt["id"], attempt["outbox"]["command_id"]

    first = migrated.start_worker("a", lease_seconds=2, worker_id="worker-a")
    migrated.wait_receipt(attempt_id, 3, "RUNNING")
    first.send(signal.SIGKILL)
    assert first.wait_exit() == -signal.SIGKILL

    # The dead worker's state: PROCESSING under its lease, Receipts 1-2 provisional, Receipt 3 RUNNING.
    dead = migrated.db.attempt(attempt_id)
    assert dead["command_status"] == "PROCESSING" and dead["lease_owner"] == "worker-a"
    assert dead["delivery_count"] == 1 and dead["status"] == "RUNNING"
    provisional = migrated.db.receipts(attempt_id)
    assert [r["status"] for r in provisional] == ["SUCCEEDED", "SUCCEEDED", "RUNNING", "PENDING", "PENDING",
                                                  "PENDING"], "the seed ended before the kill: raise SLOW_ROWS"
    first_sandbox_ids = {r["evidence_json"]["sandbox"]["id"] for r in provisional if r["evidence_json"]}
    assert len(first_sandbox_ids) == 1
    first_lease_until = parse_instant(dead["lease_until"])
    sandboxes = migrated.work_dir / "sandboxes" / attempt_id
    (first_dir,) = sandboxes.glob("d1-*")
    assert _sandbox_snapshot(first_dir), "delivery 1 had written its sandbox before the kill"

    second = migrated.start_worker("b", lease_seconds=2, worker_id="worker-b", extra=["--keep-sandboxes"])
    final = migrated.wait_attempt(attempt_id)
    assert final["status"] == "SUCCEEDED", final
    assert final["command_status"] == "DELIVERED" and final["delivery_count"] == 2 and final["delivery"] == 2
    assert final["lease_token"] is None and final["lease_owner"] is None

    # Heartbeat history: A's claim and renewals, then B's takeover only once A's lease had expired.
    events = migrated.db.lease_events(command_id)
    by_a = [e for e in events if e["delivery"] == 1]
    by_b = [e for e in events if e["delivery"] == 2]
    assert by_a + by_b == events
    assert {e["owner"] for e in by_a} == {"worker-a"} and {e["owner"] for e in by_b} == {"worker-b"}
    assert by_a[0]["event"] == "claim" and {e["event"] for e in by_a[1:]} <= {"heartbeat"}
    assert max(parse_instant(e["lease_until"]) for e in by_a) == first_lease_until
    takeover = by_b[0]
    assert takeover["event"] == "takeover"
    assert parse_instant(takeover["at"]) >= first_lease_until, "the lease was stolen before it expired"
    assert by_b[-1]["event"] == "deliver" and {e["event"] for e in by_b[1:-1]} <= {"heartbeat"}

    # Replayed from scratch: every Receipt is delivery 2's, started after the takeover, in a new sandbox.
    receipts = _assert_replayed_by(migrated, attempt_id, "worker-b", 2)
    assert all(parse_instant(r["started_at"]) >= parse_instant(takeover["at"]) for r in receipts)
    assert receipts[0]["evidence_json"]["sandbox"]["id"] not in first_sandbox_ids
    assert receipts[0]["evidence_json"]["target_receipt"]["replayed"] is True  # the target saw one delivery
    (second_dir,) = sandboxes.glob("d2-*")
    assert second_dir != first_dir and (second_dir / "main.db").exists()
    # The killed delivery never cleaned up after itself; the takeover discarded its sandbox, unused.
    assert not first_dir.exists(), "delivery 1's abandoned sandbox was left behind"

    assert [e["delivery"] for e in second.events("takeover")] == [2]
    gate = migrated.cli("rehearsal", "gate", run["id"])
    assert gate.returncode == 0, gate.describe()
    audit = migrated.cli("audit")
    assert audit.returncode == 0, audit.describe()
    assert second.stop() == 0
    tokens = watch.stop()
    assert len(tokens) >= 2, "both deliveries' tokens should have been seen"
    migrated.assert_no_secrets(tokens)


@pytest.mark.slow
def test_sigstop_frozen_worker_persists_nothing_after_takeover(migrated: Env, tmp_path: Path) -> None:
    watch = migrated.watch_tokens()
    run, attempt = _slow_attempt(migrated, tmp_path)
    attempt_id, command_id = attempt["id"], attempt["outbox"]["command_id"]

    frozen = migrated.start_worker("a", lease_seconds=1.5, worker_id="worker-a")
    migrated.wait_receipt(attempt_id, 3, "RUNNING")
    _freeze(frozen, migrated, attempt_id)
    try:
        assert migrated.db.attempt(attempt_id)["lease_owner"] == "worker-a"
        taker = migrated.start_worker("b", lease_seconds=1.5, worker_id="worker-b")
        final = migrated.wait_attempt(attempt_id)
    finally:
        frozen.send(signal.SIGCONT)
    assert final["status"] == "SUCCEEDED" and final["command_status"] == "DELIVERED", final
    assert final["delivery_count"] == 2
    events_at_completion = migrated.db.lease_events(command_id)
    receipts_at_completion = migrated.db.receipts(attempt_id)
    (takeover,) = [e for e in events_at_completion if e["event"] == "takeover"]
    assert takeover["owner"] == "worker-b" and takeover["delivery"] == 2

    # A wakes up, finds its token gone and stops: a lease-lost event in its log, then a clean stop.
    wait_until(lambda: frozen.events("lease_lost"), what="the woken worker to log that its lease is lost")
    assert frozen.stop() == 0
    (stopped,) = frozen.events("worker_stopped")
    assert stopped["lost"] >= 1 and stopped["delivered"] == 0 and stopped["failed"] == 0
    assert all(e["delivery"] == 1 for e in frozen.events("lease_lost") if "delivery" in e)

    # Nothing by A after B's takeover: not one lease event, not one Receipt change.
    events = migrated.db.lease_events(command_id)
    assert events == events_at_completion
    assert not [e for e in events if e["owner"] == "worker-a" and e["seq"] > takeover["seq"]]
    assert migrated.db.receipts(attempt_id) == receipts_at_completion
    assert migrated.db.attempt(attempt_id) == final
    _assert_replayed_by(migrated, attempt_id, "worker-b", 2)

    gate = migrated.cli("rehearsal", "gate", run["id"])
    assert gate.returncode == 0, gate.describe()
    assert taker.stop() == 0
    migrated.assert_no_secrets(watch.stop())


@pytest.mark.slow
def test_sigterm_lets_the_running_attempt_finish_and_claims_nothing_more(migrated: Env, tmp_path: Path) -> None:
    watch = migrated.watch_tokens()
    run, attempt = _slow_attempt(migrated, tmp_path)
    attempt_id = attempt["id"]
    queued = migrated.cli("rehearsal", "attempt", run["id"], "--json").json()

    stopping = migrated.start_worker("a", lease_seconds=60, worker_id="worker-a")
    migrated.wait_receipt(attempt_id, 3, "RUNNING")
    # One execution slot: the worker claimed only what it could start (issue 10: no hoarding).
    assert migrated.db.attempt(queued["id"])["lease_owner"] is None
    stopping.send(signal.SIGTERM)
    assert stopping.wait_exit() == 0

    # Within its grace period the running Attempt finished and was recorded; nothing more was claimed.
    finished = migrated.db.attempt(attempt_id)
    assert finished["status"] == "SUCCEEDED" and finished["command_status"] == "DELIVERED", finished
    assert finished["delivery_count"] == 1
    untouched = migrated.db.attempt(queued["id"])
    assert untouched["status"] == "PENDING" and untouched["command_status"] == "PENDING", untouched
    assert migrated.db.lease_events(queued["outbox"]["command_id"]) == []
    assert len(stopping.events("worker_stopped")) == 1

    taker = migrated.start_worker("b", lease_seconds=60, worker_id="worker-b")
    second = migrated.wait_attempt(queued["id"])
    assert second["status"] == "SUCCEEDED" and second["delivery_count"] == 1, second
    gate = migrated.cli("rehearsal", "gate", run["id"], "--json")
    assert gate.returncode == 0, gate.describe()
    assert gate.json()["latest_attempt_id"] == queued["id"] and gate.json()["baseline_attempt_id"] == attempt_id
    assert taker.stop() == 0
    migrated.assert_no_secrets(watch.stop())


def test_sigterm_past_the_grace_period_interrupts_records_nothing_and_releases_the_lease(
        migrated: Env, tmp_path: Path) -> None:
    watch = migrated.watch_tokens()
    run, attempt = _slow_attempt(migrated, tmp_path)
    attempt_id, command_id = attempt["id"], attempt["outbox"]["command_id"]
    stopping = migrated.start_worker("a", lease_seconds=60, worker_id="worker-a", extra=["--grace-period", "0"])
    migrated.wait_receipt(attempt_id, 3, "RUNNING")
    stopping.send(signal.SIGTERM)
    assert stopping.wait_exit() == 0

    # The running scenario was interrupted: it recorded nothing; nothing after it ran; the lease went back.
    released = migrated.db.attempt(attempt_id)
    assert released["command_status"] == "PENDING", released
    assert released["lease_owner"] is None and released["lease_token"] is None
    assert released["status"] == "RUNNING" and released["delivery_count"] == 1
    receipts = migrated.db.receipts(attempt_id)
    assert [r["status"] for r in receipts[:2]] == ["SUCCEEDED", "SUCCEEDED"]
    assert receipts[2]["status"] == "RUNNING" and receipts[2]["evidence"] is None
    assert [r["status"] for r in receipts[3:]] == ["PENDING"] * 3
    events = migrated.db.lease_events(command_id)
    assert events[-1]["event"] == "release" and events[-1]["owner"] == "worker-a" and events[-1]["delivery"] == 1
    assert [e["command_id"] for e in stopping.events("released")] == [command_id]
    assert not stopping.events("command_failed")
    last_lease_until = max(parse_instant(e["lease_until"]) for e in events if e["lease_until"])

    # Another worker continues at once (no waiting for the 60 s lease) and replays everything.
    taker = migrated.start_worker("b", lease_seconds=60, worker_id="worker-b")
    final = migrated.wait_attempt(attempt_id)
    assert final["status"] == "SUCCEEDED" and final["command_status"] == "DELIVERED", final
    assert final["delivery_count"] == 2
    (takeover,) = [e for e in migrated.db.lease_events(command_id) if e["event"] == "takeover"]
    assert takeover["owner"] == "worker-b" and takeover["delivery"] == 2
    assert parse_instant(takeover["at"]) < last_lease_until, "the released command waited for lease expiry"
    _assert_replayed_by(migrated, attempt_id, "worker-b", 2)
    assert migrated.cli("rehearsal", "gate", run["id"]).returncode == 0
    assert taker.stop() == 0
    migrated.assert_no_secrets(watch.stop())


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether ``pid`` has a handler installed for ``sig`` (``SigCgt`` in /proc/PID/status)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        mask = next(line.split()[1] for line in fh if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (sig - 1) & 1)


@pytest.mark.slow
def test_second_sigterm_exits_130_at_once_records_nothing_and_releases_the_lease(migrated: Env, tmp_path: Path) -> None:
    """docs/operations.md: a second SIGTERM does not wait for the grace period; nothing is recorded or lost."""
    run, attempt = _slow_attempt(migrated, tmp_path)
    attempt_id, command_id = attempt["id"], attempt["outbox"]["command_id"]
    first = migrated.start_worker("a", lease_seconds=30, worker_id="worker-a")
    migrated.wait_receipt(attempt_id, 3, "RUNNING")
    assert _catches(first.pid, signal.SIGTERM)
    first.send(signal.SIGTERM)
    time.sleep(0.5)  # the first is handled at once (grace period 30 s): the scenario goes on
    first.send(signal.SIGTERM)
    assert first.wait_exit() == 130

    interrupted = migrated.db.attempt(attempt_id)
    assert interrupted["command_status"] == "PENDING" and interrupted["lease_owner"] is None, interrupted
    assert migrated.db.receipt_status(attempt_id, 3) == "RUNNING", "the scenario was not recorded"
    assert migrated.db.receipts(attempt_id)[2]["evidence"] is None
    assert [e["event"] for e in migrated.db.lease_events(command_id)][-1] == "release"
    assert not first.events("command_failed")

    taker = migrated.start_worker("b", lease_seconds=30, worker_id="worker-b")
    final = migrated.wait_attempt(attempt_id)
    assert final["status"] == "SUCCEEDED" and final["delivery_count"] == 2, final
    _assert_replayed_by(migrated, attempt_id, "worker-b", 2)
    assert migrated.cli("rehearsal", "gate", run["id"]).returncode == 0
    assert taker.stop() == 0


def test_proc_state_helper_reads_this_process() -> None:
    assert _process_state(os.getpid()) in {"R", "S"}
