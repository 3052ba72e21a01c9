"""`require_work_dir`, the check `worker`, `serve` and `rehearse` make before they claim anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencepost.cli.worker_cmd import require_work_dir
from fencepost.core.errors import InvalidInput


def test_a_file_given_as_the_work_directory_is_named_as_not_a_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(InvalidInput, match=r"'.*a-file' is not usable \(it exists and is not a directory\)"):
        require_work_dir(blocker)


def test_a_path_under_a_file_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(InvalidInput, match=r"is not usable \(Not a directory\)"):
        require_work_dir(blocker / "work")


def test_a_usable_directory_is_created_and_left_clean(tmp_path: Path) -> None:
    work = tmp_path / "new" / "work"
    require_work_dir(work)
    assert work.is_dir() and list(work.iterdir()) == []
