"""Lint and type checks are part of the test command: a style or typing regression fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_layers_never_import_upward() -> None:
    """DESIGN.md: dependencies point down the layer list only."""
    order = {"core": 1, "store": 2, "outbox": 3, "events": 3, "evidence": 4, "host": 4, "workflows": 4,
             "rehearsal": 5, "packages": 5, "api": 6, "ui": 6, "cli": 7}
    offenders = []
    for path in (ROOT / "src" / "fencepost").rglob("*.py"):
        layer = path.relative_to(ROOT / "src" / "fencepost").parts[0]
        if layer not in order:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if not stripped.startswith(("from fencepost.", "import fencepost.")):
                continue
            target = stripped.split()[1].split(".")[1]
            if target in order and order[target] > order[layer]:
                offenders.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert not offenders, "upward imports:\n" + "\n".join(offenders)
