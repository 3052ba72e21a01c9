"""Fixtures of the unit tests: package directories written into ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import pytest

from unit.builders import PackageWriter


@pytest.fixture
def write_package(tmp_path: Path) -> PackageWriter:
    """Write ``{relative path: text or bytes}`` into a fresh package directory and return it.

    A manifest is required in the mapping (``fencepost-package.toml``) unless the test means to omit it.
    """
    counter = iter(range(1_000_000))

    def write(files: dict[str, str | bytes]) -> Path:
        root = tmp_path / f"pkg{next(counter)}"
        root.mkdir()
        for rel, content in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        return root

    return write
