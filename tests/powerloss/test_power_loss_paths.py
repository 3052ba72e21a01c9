"""Simulated power loss on the two largest transactions outside the rehearsal (issue 19, ADR 0059): a 128-step
workflow admission (one transaction of 516 inserts) and an action invocation's host path up to its finalization,
with the provider's fsynced ledger on the recorded disk. Same checks as ``test_power_loss.py``: every image
equals a committed state no older than the last returned COMMIT, passes the audit, and a sample recovers."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import record_admission, record_host
from sampling import SEED, exercise, report


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "scale"), [("wal", "sampled"), pytest.param("wal", "full", marks=pytest.mark.soak),
                                             pytest.param("delete", "full", marks=pytest.mark.soak)])
def test_admission_of_a_128_step_plan_is_whole_or_absent_after_power_loss(mode: str, scale: str, shim: Path,
                                                                         tmp_path: Path) -> None:
    full = scale == "full"
    recording = record_admission(shim, tmp_path / "recorded", mode=mode, synchronous="full")
    # Full: every one of the ~520 crash points and every write inside COMMIT; 20 recoveries (each re-admits).
    tally, problems, _ = exercise(recording, tmp_path / "cut", inside=None if full else 12,
                                   variants=2 if full else 1, recoveries=20 if full else 2, seed=SEED,
                                   marks_limit=None if full else 12)
    report(f"sqlite {mode}/full, 128-step admission", tally)
    assert not problems, "\n".join(problems[:20])
    assert tally.recovered >= 2


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "scale"), [("wal", "sampled"), pytest.param("wal", "full", marks=pytest.mark.soak),
                                             pytest.param("delete", "full", marks=pytest.mark.soak)])
def test_an_action_invocation_converges_to_one_charge_after_power_loss(mode: str, scale: str, shim: Path,
                                                                       tmp_path: Path) -> None:
    """The host's path (submit, claim, handler, step rows, attempts, checkpoint, settle, finalize) with the
    provider's fsynced ledger on the same disk: every image holds, and recovery gives ``succeeded`` with
    exactly one charge."""
    full = scale == "full"
    recording = record_host(shim, tmp_path / "recorded", mode=mode, synchronous="full")
    tally, problems, _ = exercise(recording, tmp_path / "cut", inside=None if full else 6,
                                   variants=3 if full else 1, recoveries=None if full else 1, seed=SEED)
    report(f"sqlite {mode}/full, action invocation", tally)
    assert not problems, "\n".join(problems[:20])
    assert tally.recovered >= 1
