"""Lint and type checks are part of the test command: a style or typing regression fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fencepost

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
    """DESIGN.md: dependencies point down the layer table only (``fencepost.LAYERS``)."""
    order = fencepost.LAYERS
    offenders = []
    for path in (ROOT / "src" / "fencepost").rglob("*.py"):
        parts = path.relative_to(ROOT / "src" / "fencepost").parts
        if len(parts) == 1:
            continue  # fencepost/__init__.py and other top-level modules import no layer
        layer = parts[0]
        assert layer in order, f"{layer} is in no layer of fencepost.LAYERS"
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if not stripped.startswith(("from fencepost.", "import fencepost.")):
                continue
            target = stripped.split()[1].split(".")[1]
            assert target in order, f"{path.relative_to(ROOT)} imports {target}, which is in no layer"
            if order[target] > order[layer]:
                offenders.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert not offenders, "upward imports:\n" + "\n".join(offenders)


def importers_of_testing(root: Path) -> list[str]:
    """Modules under ``root`` (the ``fencepost`` package) outside ``testing/`` that import ``fencepost.testing``."""
    found = []
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] == "testing":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.strip().split()
            if words[:1] in (["from"], ["import"]) and len(words) > 1 and (
                    words[1] == "fencepost.testing" or words[1].startswith("fencepost.testing.")):
                found.append(f"{path.relative_to(root).as_posix()}: {line.strip()}")
    return found


def test_nothing_in_fencepost_imports_the_testing_layer(tmp_path: Path) -> None:
    """``fencepost.testing`` is test infrastructure (the store contract suite, which needs pytest): level 6 in
    ``LAYERS``, but no module, not even ``cli`` above it, may import it."""
    assert importers_of_testing(ROOT / "src" / "fencepost") == []
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "app.py").write_text("from fencepost.testing.outbox import insert\n", encoding="utf-8")
    assert importers_of_testing(tmp_path) == ["cli/app.py: from fencepost.testing.outbox import insert"]


def _table_rows(text: str) -> dict[str, int]:
    """``package -> level`` from a layer table: reStructuredText (the docstring) or Markdown (the docs)."""
    rows: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in (line.strip("|").split("|") if line.startswith("|") else line.split("  "))]
        cells = [c for c in cells if c]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in cells[1].replace("`", "").replace("fencepost.", "").split(","):
                rows[name.strip()] = int(cells[0])
    return rows


def test_the_three_layer_tables_agree() -> None:
    docstring = _table_rows(fencepost.__doc__ or "")
    document = _table_rows((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert docstring == fencepost.LAYERS
    assert document == fencepost.LAYERS
    packages = {p.name for p in (ROOT / "src" / "fencepost").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(fencepost.LAYERS)


def test_package_data_ships_every_non_python_file() -> None:
    """A wheel (not an editable install) must carry every SQL file, template and static file of the package."""
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    patterns = globs["fencepost"]
    package = ROOT / "src" / "fencepost"
    data = [p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert any(f.endswith(".sql") for f in data)
    missing = [f for f in data if not any(fnmatch.fnmatch(f, pattern) for pattern in patterns)]
    assert missing == [], f"not in [tool.setuptools.package-data]: {missing}"
