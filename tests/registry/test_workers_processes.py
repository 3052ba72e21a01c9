"""Real processes (ADR 0019): two registration loops (``registration_loop.py``, what a worker does with its
registration) and the real CLI. ``fencepost workers`` lists both, then only one once the other is SIGKILLed and
its registration expires, and none after the survivor stops; ``fencepost rehearsal status`` says "no live
worker serves this kind" exactly while none does, and marks an expired lease as expired.

Every process reads the store's own clock (no ManualClock here). A loop whose expiry the test waits for beats
every 0.2 s, so its registration expires 0.6 s after its last beat; a loop that must still count as live after
several CLI calls beats every 5 s (expiry 15 s): at a load of 15 on two cores, one CLI start can take longer
than 0.6 s, and a live loop judged dead between its beats is the machine, not the registry.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencepost.rehearsal.handler import KIND
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store, open_store
from fencepost.store.ports import UnitOfWork
from helpers.processes import CliResult, Process, kill_all, run_cli, start
from helpers.store_backends import StoreBackend, schema_url
from helpers.waiting import wait_until

LOOP = Path(__file__).with_name("registration_loop.py")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory"
HEARTBEAT = 0.2
STEADY = 5.0  # the heartbeat of a loop that must stay live across CLI calls
NOTICE = "no live worker serves this kind"


class Loops:
    """Registration loops on one database; SIGKILLs (by pid) any a test left running."""

    def __init__(self, url: str, root: Path) -> None:
        self.url, self.root = url, root
        self.started: list[Process] = []

    def start(self, worker_id: str, *kinds: str, in_flight: int = 0, heartbeat: float = HEARTBEAT) -> Process:
        args = [self.url, worker_id, f"{heartbeat:g}", str(in_flight), *(kinds or (KIND,))]
        loop = start(args, name=worker_id, stdout_path=self.root / f"loop-{worker_id}.log", cwd=self.root,
                     argv_prefix=[sys.executable, str(LOOP)], worker_id=worker_id,
                     started_event="registration_loop_started")
        self.started.append(loop)
        wait_until(lambda: loop.events("registration_loop_started") or not loop.alive,
                   60, what=f"loop {worker_id} to register")
        assert loop.alive, loop.describe()
        return loop

    def kill_all(self) -> None:
        kill_all(self.started)


@pytest.fixture
def url(backend: StoreBackend) -> str:
    """The database URL every subprocess gets (a migrated SQLite file, or this test's PostgreSQL schema)."""
    backend.migrated()
    return schema_url(backend.schema) if backend.schema is not None else backend.url


@pytest.fixture
def system_store(url: str) -> Iterator[Store]:
    """An in-process store on the system clock, as the subprocesses use (setup writes only)."""
    store = open_store(url, create=False)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def loops(url: str, tmp_path: Path) -> Iterator[Loops]:
    started = Loops(url, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def cli(url: str, *args: str) -> CliResult:
    result = run_cli([*args, "-d", url])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.describe()
    return result


def census(url: str) -> tuple[list[str], list[str]]:
    """``(live ids, expired ids)`` as ``fencepost workers --json`` reports them."""
    data = cli(url, "workers", "--json").json()
    return [w["id"] for w in data["live"]], [w["id"] for w in data["expired"]]


@pytest.mark.slow
@pytest.mark.default_backends("sqlite-wal")  # the registry's SQL is the contract suite's, on every backend
def test_workers_lists_two_then_one_after_a_sigkill_expires_the_others_registration(url: str, loops: Loops) -> None:
    first = loops.start("loop-a", in_flight=1, heartbeat=STEADY)
    second = loops.start("loop-b", KIND, "other.kind")

    def live() -> dict[str, Any]:
        data: dict[str, Any] = cli(url, "workers", "--json").json()
        return data

    # the registration says 0 in flight; loop-a's first beat (after STEADY seconds) reports its one command
    wait_until(lambda: {w["id"]: w["in_flight"] for w in live()["live"]}.get("loop-a") == 1, 60,
               what="loop-a's first beat", interval=0.5)
    data = live()
    assert [w["id"] for w in data["live"]] == ["loop-a", "loop-b"] and data["expired"] == []
    by_id = {w["id"]: w for w in data["live"]}
    assert (by_id["loop-a"]["pid"], by_id["loop-a"]["kinds"], by_id["loop-a"]["in_flight"]) == (first.pid, [KIND], 1)
    assert (by_id["loop-b"]["pid"], by_id["loop-b"]["kinds"]) == (second.pid, ["other.kind", KIND])
    assert [w["heartbeat_seconds"] for w in data["live"]] == [STEADY, HEARTBEAT]
    assert all(w["live"] for w in data["live"])
    text = cli(url, "workers").stdout
    assert "2 live workers" in text and "loop-a" in text and "loop-b" in text and "stopped renewing" not in text

    second.kill()  # SIGKILL: no deregistration; the row stays until it is old enough to be expired
    wait_until(lambda: census(url) == (["loop-a"], ["loop-b"]), 60, what="loop-b's registration to expire",
               interval=0.2)
    text = cli(url, "workers").stdout
    assert "1 live worker" in text and "1 registration stopped renewing" in text
    live_part, expired_part = text.split("stopped renewing")
    assert "loop-a" in live_part and "loop-b" not in live_part and "loop-b" in expired_part

    assert first.stop() == 0, first.describe()  # SIGTERM: a graceful stop deletes its row at once
    assert census(url) == ([], ["loop-b"])
    assert "no live worker" in cli(url, "workers").stdout
    assert first.events("worker_deregistered"), first.describe()


def _status(url: str, run_id: str) -> tuple[dict[str, Any], str]:
    """The Attempt's outbox as ``rehearsal status --json`` shows it, and the text form of the same command."""
    data = cli(url, "rehearsal", "status", run_id, "--json").json()
    [attempt] = data["attempts"]
    return attempt["outbox"], cli(url, "rehearsal", "status", run_id).stdout


@pytest.mark.slow
@pytest.mark.default_backends("sqlite-wal")
def test_rehearsal_status_says_no_live_worker_serves_the_kind_exactly_while_none_does(
        url: str, loops: Loops, system_store: Store) -> None:
    service = RehearsalService(system_store)
    run = service.create_run(EXAMPLE)
    attempt = service.enqueue_attempt(run.id)
    loops.start("other-kinds-only", "other.kind", heartbeat=STEADY)  # a live worker, but not of this kind

    outbox, text = _status(url, run.id)
    assert (outbox["status"], outbox["no_live_worker"], outbox["live_workers"]) == ("PENDING", True, 0)
    assert outbox["pending_seconds"] >= 0
    assert "pending for" in text and NOTICE in text

    serving = loops.start("serving", heartbeat=2.0)  # live across one status; expires 6 s after its kill
    outbox, text = _status(url, run.id)
    assert (outbox["no_live_worker"], outbox["live_workers"]) == (False, 1)
    assert "pending for" in text and NOTICE not in text

    serving.kill()
    wait_until(lambda: _status(url, run.id)[0]["no_live_worker"], 60, what="the notice to come back", interval=0.2)
    assert NOTICE in _status(url, run.id)[1]

    # An expired lease is shown as expired, not as a live owner, and it too waits for a worker.
    [claimed] = system_store.transact(lambda tx: tx.outbox.claim(owner="vanished-worker", kinds=[KIND], limit=1,
                                                                 lease_seconds=600))
    outbox, text = _status(url, run.id)
    assert (outbox["status"], outbox["lease_expired"], outbox["no_live_worker"]) == ("PROCESSING", False, False)
    assert "lease owner vanished-worker" in text and "EXPIRED" not in text and NOTICE not in text
    # its last heartbeat shortens the lease to 0.1 s, and then nothing renews it
    system_store.transact(lambda tx: tx.outbox.renew(claimed.lease, lease_seconds=0.1))
    wait_until(lambda: _status(url, run.id)[0]["lease_expired"], 30, what="the lease to expire", interval=0.2)
    outbox, text = _status(url, run.id)
    assert outbox["no_live_worker"] is True and outbox["pending_seconds"] is None
    assert "lease EXPIRED" in text and "owner vanished-worker stopped renewing" in text
    assert "lease owner vanished-worker," not in text and NOTICE in text
    loops.start("taker", heartbeat=STEADY)
    outbox, text = _status(url, run.id)
    assert (outbox["lease_expired"], outbox["no_live_worker"]) == (True, False)
    assert "lease EXPIRED" in text and NOTICE not in text
    assert attempt.id in text


@pytest.mark.slow
def test_sigterm_is_a_graceful_stop_of_the_loop(url: str, loops: Loops) -> None:
    loop = loops.start("graceful")
    loop.send(signal.SIGTERM)
    assert loop.wait_exit() == 0, loop.describe()
    assert census(url) == ([], [])


@pytest.mark.default_backends("sqlite-wal")
def test_workers_shows_the_backlog_of_a_kind_no_live_worker_claims(url: str, system_store: Store) -> None:
    """Issue 10 item 6: PENDING work of a kind nobody claims is said to wait for a worker, with its age."""
    assert cli(url, "workers", "--json").json()["backlog"] == {"kinds": [], "kinds_total": 0, "pending_total": 0}

    def enqueue(tx: UnitOfWork) -> None:
        for i in range(3):
            tx.outbox.insert(command_id=f"orphan-{i}", kind="orphan.kind", payload={})

    system_store.transact(enqueue)
    backlog = cli(url, "workers", "--json").json()["backlog"]
    [entry] = backlog["kinds"]
    assert (backlog["kinds_total"], backlog["pending_total"]) == (1, 3)
    assert (entry["kind"], entry["pending"], entry["live_workers_serving"]) == ("orphan.kind", 3, 0)
    assert entry["oldest_seconds"] >= 0
    text = cli(url, "workers").stdout
    assert "orphan.kind: 3 pending" in text and "no live worker claims this kind" in text, text
