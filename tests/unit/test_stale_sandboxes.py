"""Sandboxes left by killed earlier deliveries are discarded by the next delivery on the machine."""

from __future__ import annotations

from pathlib import Path

from fencepost.rehearsal.handler import discard_stale_sandboxes


def test_only_older_deliveries_are_discarded(tmp_path: Path) -> None:
    attempt_dir = tmp_path / "att_x"
    for name in ("d1-aaaa", "d2-bbbb", "d3-cccc", "d10-dddd", "notes"):
        (attempt_dir / name).mkdir(parents=True)
        (attempt_dir / name / "main.db").write_bytes(b"x")
    discard_stale_sandboxes(attempt_dir, delivery=3)
    assert sorted(p.name for p in attempt_dir.iterdir()) == ["d10-dddd", "d3-cccc", "notes"]


def test_missing_attempt_dir_is_fine(tmp_path: Path) -> None:
    discard_stale_sandboxes(tmp_path / "absent", delivery=2)
    assert not (tmp_path / "absent").exists()
