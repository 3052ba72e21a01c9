"""The power-loss harness catches real violations (issue 19): a disk that drops every sync under fencepost
loses returned commits, and bare SQLite at ``synchronous=FULL`` in DELETE mode loses one too (the finding
behind ADR 0060)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Cut, instants, record_raw, record_rehearsal, violations
from sampling import SEED


@pytest.mark.slow
def test_the_harness_reports_a_lost_commit_when_syncs_are_dropped(shim: Path, tmp_path: Path) -> None:
    """A disk that acknowledges every flush and does none (the recorder's test-only fault, as if
    ``synchronous=OFF``): the same checks must report lost committed transactions."""
    recording = record_rehearsal(shim, tmp_path / "recorded", mode="wal", synchronous="full", drop_sync=0,
                                 worker=False)
    assert not any(op.kind == "S" for op in recording.ops)
    chosen = [i for i in instants(recording.ops) if not i.inside_commit]
    found: list[str] = []
    for image in Cut(recording, tmp_path / "cut").images(chosen, 1, SEED):
        found += violations(image)
    print(f"\npower loss, dropped syncs: {len(found)} problems reported, e.g. {found[:2]}")
    assert any("lost a committed transaction whose COMMIT had returned" in f for f in found), found


@pytest.mark.parametrize(("level", "loses"), [("FULL", True), ("EXTRA", False)])
def test_sqlite_full_in_delete_mode_loses_a_returned_commit_and_extra_does_not(level: str, loses: bool, shim: Path,
                                                                               tmp_path: Path) -> None:
    """The finding behind ADR 0060, shown on the standard library's ``sqlite3`` alone: in DELETE mode SQLite's
    ``FULL`` never syncs the directory after unlinking the journal, so a cut before the next directory sync
    brings the journal back and rolls a returned COMMIT back; ``EXTRA`` (what fencepost now runs) holds."""
    recording = record_raw(shim, tmp_path / "recorded", mode="delete", level=level)
    found: list[str] = []
    images = 0
    for image in Cut(recording, tmp_path / "cut").images(instants(recording.ops), 3, SEED):
        images += 1
        found += violations(image)
    assert images >= 40
    if loses:
        assert any("lost a committed transaction whose COMMIT had returned" in f for f in found), found
    else:
        assert found == []
