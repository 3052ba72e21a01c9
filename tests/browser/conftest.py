"""Browser test fixtures: Debian's Chromium driven by Playwright (never a downloaded browser), and real
``fencepost serve`` / ``fencepost worker`` subprocesses on a SQLite file in ``tmp_path``.

A missing /usr/bin/chromium fails the tests with the install command; it never skips them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from helpers.processes import PipedProcess, run_cli, start_piped, subprocess_env

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"


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


#: Where the issue 11 browser tests save their screenshots (printed by each test): $FENCEPOST_ARTIFACTS, or
#: fencepost-artifacts/ in the system's temporary directory.
ARTIFACTS = Path(os.environ.get("FENCEPOST_ARTIFACTS") or Path(tempfile.gettempdir()) / "fencepost-artifacts")


def artifact(page: Page, name: str) -> Path:
    """Save a full-page screenshot as ``ARTIFACTS/screenshots/<name>.png``, print its path and return it."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot saved: {path}")
    return path


@dataclass
class Deployment:
    """A migrated database, the processes started on it, and the server's address and token."""

    tmp: Path
    database: str
    env: dict[str, str]
    procs: list[PipedProcess] = field(default_factory=list)
    url: str = ""
    token: str = ""

    def start(self, *args: str, log: str) -> PipedProcess:
        proc = start_piped([*args, "--database", self.database], stderr_path=self.tmp / f"{log}.log", append=True,
                           env=self.env, cwd=self.tmp)
        self.procs.append(proc)
        return proc

    def serve(self, *args: str) -> PipedProcess:
        """``fencepost serve`` on a free port; remembers the printed address and generated token."""
        proc = self.start("serve", "--port", "0", "--work-dir", str(self.tmp / "work"), "--log-format", "text", *args,
                          log="serve")
        self.url = proc.expect(r"serving on (http://127\.0\.0\.1:\d+)/").group(1)
        self.token = proc.expect(r"API token \(shown once; paste it into the page\): (\S+)").group(1)
        return proc

    def worker(self, *args: str, log: str = "worker") -> PipedProcess:
        return self.start("worker", "--work-dir", str(self.tmp / "work"), "--poll-interval", "0.1",
                          "--log-format", "text", *args, log=log)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    database = f"sqlite:///{tmp_path / 'control.db'}"
    env = subprocess_env()
    migrated = run_cli(["migrate", "--database", database], env=env)
    assert migrated.returncode == 0, migrated.describe()
    deployed = Deployment(tmp=tmp_path, database=database, env=env)
    try:
        yield deployed
    finally:
        for proc in reversed(deployed.procs):
            proc.stop()
