"""Simulated power loss (issue 19, ADR 0059): the unsynced writes dropped at every commit point of a real
rehearsal, and fencepost still converges.

A real ``rehearsal create``, ``rehearsal attempt`` and worker run over the recorder (``recorder.c``); the power
is then cut, in the replayed log, at every crash point (both sides of every COMMIT of every named transaction
the flow runs: ``rehearsal.create_run``, ``rehearsal.enqueue``, ``workers.register``, ``outbox.claim``,
``rehearsal.start``, five ``rehearsal.receipt``, ``rehearsal.succeed``, ...) and after each write and sync inside
the COMMIT of the largest ones (``harness.LARGE``). Each cut gives the durable image (only what was synced) and
seeded variants keeping random subsets of the unsynced page writes and directory entries. Every image must
open clean with the ordinary driver and equal a committed state (``synchronous=FULL``: none older than the
last COMMIT that returned; ``NORMAL`` in WAL, ``test_power_loss_normal.py``: any earlier one), pass
``fencepost audit``'s checks, and a sample is recovered (CLI steps that never answered run again, a worker
runs to completion) to the crash-free run's outcome.

Default run: a seeded sample (every crash point, a sample of the instants inside COMMIT, few variants, a few
recoveries); ``-m soak``: every instant, more variants, a recovery of every crash point's durable image.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import record_rehearsal
from sampling import SCALES, SEED, exercise, report


@pytest.mark.slow
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_full_loses_no_returned_commit_and_leaves_no_partial_fact(mode: str, scale: str, shim: Path,
                                                                  tmp_path: Path) -> None:
    full = scale == "full"
    recording = record_rehearsal(shim, tmp_path / "recorded", mode=mode, synchronous="full")
    tally, problems, lossy = exercise(recording, tmp_path / "cut", inside=None if full else 12,
                                       variants=6 if full else 1, seed=SEED,
                                       recoveries=None if full else 1)
    report(f"sqlite {mode}/full", tally, lossy)
    assert not problems, "\n".join(problems[:20])
    assert tally.recovered >= 1
    assert sum(tally.tried.values()) >= 60
