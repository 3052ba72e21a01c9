"""What ``fencepost package install --targets ... --wait`` shows while a fleet is delivered (a real worker in a
thread of this process, real SQLite targets): on a terminal, an overall bar and a bar per delivery in flight with
the step it is at; on a pipe, lines only; submission with bounded concurrency keeps every target's order."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from delivery.kit import THREE, add_target, ledger, release, write_package
from fencepost.cli.package_cmds import wait_for
from fencepost.cli.worker_cmd import build_worker
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import DeliveryService
from fencepost.host import InvocationView
from fencepost.outbox.worker import WorkerConfig
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord


@pytest.fixture
def fleet(sqlite_store: Store, tmp_path: Path) -> dict[str, Path]:
    release(sqlite_store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    return {name: add_target(sqlite_store, tmp_path, name, {"env": "prod"})[1] for name in ("a", "b", "c", "d")}


class _Worker:
    """The real worker (every built-in kind) in a thread of this process until ``set``."""

    def __init__(self, store: Store, work: Path) -> None:
        self.worker = build_worker(store, work, WorkerConfig(poll_interval=0.02, lease_seconds=10, listen=False))
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def set(self) -> None:
        self.worker.request_stop()


def _worker(store: Store, work: Path) -> tuple[threading.Thread, _Worker]:
    running = _Worker(store, work)
    return running.thread, running


def test_submission_is_concurrent_and_in_target_order(sqlite_store: Store, fleet: dict[str, Path]) -> None:
    service = DeliveryService(sqlite_store)
    seen: list[str] = []
    lock = threading.Lock()

    def note(target: TargetRecord, view: InvocationView) -> None:
        with lock:
            seen.append(target.name)

    first = service.submit("shop", selector={"env": "prod"}, concurrency=3, on_submitted=note)
    assert [t.name for t, _ in first.deliveries] == ["a", "b", "c", "d"] and sorted(seen) == ["a", "b", "c", "d"]
    again = service.submit("shop", selector={"env": "prod"}, concurrency=4)
    assert [v.id for _, v in again.deliveries] == [v.id for _, v in first.deliveries]  # idempotent
    with pytest.raises(InvalidInput, match="1 to 64"):
        service.submit("shop", selector={"env": "prod"}, concurrency=0)


def test_a_terminal_shows_an_overall_bar_and_a_bar_per_target_in_flight(sqlite_store: Store, fleet: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    service = DeliveryService(sqlite_store)
    ids = [(t.name, v.id) for t, v in service.submit("shop", selector={"env": "prod"}).deliveries]
    # target b is held by another process for a while, so its bar is seen retrying a step
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys\n"
        f"c = sqlite3.connect({str(fleet['b'])!r}, isolation_level=None); c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True); sys.stdin.readline(); c.execute('ROLLBACK')\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdin is not None and holder.stdout.readline().strip() == "locked"
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=160, color_system=None)
    thread, stop = _worker(sqlite_store, tmp_path / "work")
    thread.start()
    release_timer = threading.Timer(5.0, lambda: (holder.stdin.write("go\n"), holder.stdin.flush()))  # type: ignore[union-attr]
    release_timer.start()
    try:
        views = wait_for(service, ids, 90, quiet=False, console=console, interval=0.05)
    finally:
        stop.set()
        release_timer.cancel()
        holder.kill()
        holder.wait(timeout=30)
        thread.join(timeout=30)
    assert [v.status for v in views] == [InvocationStatus.SUCCEEDED] * 4, [v.error for v in views]
    drawn = screen.getvalue()
    assert "all targets" in drawn and "running" in drawn and "pending" in drawn
    assert "target busy, retried" in drawn, "the busy target's bar never showed its retries"
    assert any(f"{name:<26}" in drawn and "/5" in drawn for name in ("a", "b", "c", "d"))
    assert "\x1b[" in drawn  # a live display: cursor movement, redrawn in place
    for name in ("a", "b", "c", "d"):
        assert f"  {name:<24} succeeded  3 migration(s) applied; matches rehearsal" in drawn
        assert [r[2] for r in ledger(fleet[name])] == list(THREE)
    assert "deliveries: 4/4 settled: 4 succeeded" in drawn


def test_a_pipe_gets_lines_only(sqlite_store: Store, fleet: dict[str, Path], tmp_path: Path) -> None:
    service = DeliveryService(sqlite_store)
    ids = [(t.name, v.id) for t, v in service.submit("shop", selector={"env": "prod"}).deliveries]
    with sqlite3.connect(fleet["c"]) as conn:
        conn.execute("CREATE TABLE stray (x)")  # drift: c fails with the difference named
    pipe = io.StringIO()
    console = Console(file=pipe, width=160)
    assert not console.is_terminal
    thread, stop = _worker(sqlite_store, tmp_path / "work")
    thread.start()
    try:
        views = wait_for(service, ids, 60, quiet=False, console=console, interval=0.05, line_every=0.0)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert [str(v.status) for v in views] == ["succeeded", "succeeded", "failed", "succeeded"]
    text = pipe.getvalue()
    assert "\x1b[" not in text and "━" not in text
    lines = text.splitlines()
    assert all(ln.startswith(("  ", "progress: ", "deliveries: ")) for ln in lines), text
    assert any(ln.startswith("  c ") and "failed" in ln and "has drifted" in ln for ln in lines), text
    assert any(ln.startswith("progress: ") and "running" in ln for ln in lines), text
    assert lines[-1] == "deliveries: 4/4 settled: 1 failed, 3 succeeded"
