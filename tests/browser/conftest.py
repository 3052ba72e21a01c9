"""Browser test fixtures: Debian's Chromium driven by Playwright (never a downloaded browser), and real
``fencepost serve`` / ``fencepost worker`` subprocesses on a SQLite file in ``tmp_path``.

A missing /usr/bin/chromium fails the tests with the install command; it never skips them.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
FENCEPOST = [sys.executable, "-m", "fencepost.cli"]


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's browser with "
                    "`apt-get update && apt-get install -y chromium` (the browser tests never download one)",
                    pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    try:
        yield opened
    finally:
        context.close()


def shot(page: Page, name: str) -> Path:
    """Save a full-page screenshot under artifacts/screenshots/ (git-ignored)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@dataclass
class Proc:
    """A fencepost subprocess whose stdout lines are collected by a reader thread."""

    popen: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    def start_reader(self) -> None:
        def read() -> None:
            assert self.popen.stdout is not None
            for line in self.popen.stdout:
                self.lines.put(line.rstrip("\n"))

        threading.Thread(target=read, daemon=True).start()

    def expect(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.popen.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if match := regex.search(line):
                return match
        raise AssertionError(f"no line matching {pattern!r}; saw {self.seen!r} (exit {self.popen.poll()})")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode


@dataclass
class Deployment:
    """A migrated database, the processes started on it, and the server's address and token."""

    tmp: Path
    database: str
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)
    url: str = ""
    token: str = ""

    def start(self, *args: str, log: str) -> Proc:
        stderr = open(self.tmp / f"{log}.log", "a")  # noqa: SIM115 - closed with the process
        popen = subprocess.Popen([*FENCEPOST, *args, "--database", self.database], stdout=subprocess.PIPE,
                                 stderr=stderr, text=True, env=self.env, cwd=self.tmp)
        stderr.close()
        proc = Proc(popen)
        proc.start_reader()
        self.procs.append(proc)
        return proc

    def serve(self, *args: str) -> Proc:
        """``fencepost serve`` on a free port; remembers the printed address and generated token."""
        proc = self.start("serve", "--port", "0", "--work-dir", str(self.tmp / "work"), *args, log="serve")
        self.url = proc.expect(r"serving on (http://127\.0\.0\.1:\d+)/").group(1)
        self.token = proc.expect(r"API token \(shown once; paste it into the page\): (\S+)").group(1)
        return proc

    def worker(self, *args: str, log: str = "worker") -> Proc:
        return self.start("worker", "--work-dir", str(self.tmp / "work"), "--poll-interval", "0.1",
                          "--log-format", "text", *args, log=log)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    database = f"sqlite:///{tmp_path / 'control.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEPOST_")}
    subprocess.run([*FENCEPOST, "migrate", "--database", database], check=True, env=env, capture_output=True)
    deployed = Deployment(tmp=tmp_path, database=database, env=env)
    try:
        yield deployed
    finally:
        for proc in reversed(deployed.procs):
            proc.stop()
