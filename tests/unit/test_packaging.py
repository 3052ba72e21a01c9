"""What an importable package ships (issue 11, "Also"): the ``LICENSE`` that ``pyproject.toml`` names (the
Apache-2.0 text), the ``py.typed`` marker in the package data, a ``CHANGELOG.md``; ``.fencepost/`` ignored."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_licence_file_is_named_shipped_and_is_apache_2() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10000  # the whole licence, not a pointer


def test_py_typed_is_in_the_package_data() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["fencepost"]
    assert (ROOT / "src" / "fencepost" / "py.typed").is_file()


def test_changelog_and_ignored_work_directory() -> None:
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")
    assert ".fencepost/" in (ROOT / ".gitignore").read_text().splitlines()
