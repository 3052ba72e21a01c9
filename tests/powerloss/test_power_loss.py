"""Simulated power loss (issue 19, ADR 0059): the unsynced writes dropped at every commit point of a real
rehearsal, and fencepost still converges.

A real ``rehearsal create``, ``rehearsal attempt`` and worker run over the recorder (``recorder.c``); the power
is then cut, in the replayed log, at every crash point (both sides of every COMMIT of every named transaction
the flow runs: ``rehearsal.create_run``, ``rehearsal.enqueue``, ``workers.register``, ``outbox.claim``,
``rehearsal.start``, five ``rehearsal.receipt``, ``rehearsal.succeed``, ...) and after each write and sync inside
the COMMIT of the largest ones (``harness.LARGE``). Each cut gives the durable image (only what was synced) and
seeded variants keeping random subsets of the unsynced page writes and directory entries. Every image must
open clean with the ordinary driver and equal a committed state (``synchronous=FULL``: none older than the
last COMMIT that returned; ``NORMAL`` in WAL: any earlier one), pass ``fencepost audit``'s checks, and a
sample is recovered (CLI steps that never answered run again, a worker runs to completion) to the crash-free
run's outcome.

Default run: a seeded sample (every crash point, a sample of the instants inside COMMIT, few variants, a few
recoveries); ``-m soak``: every instant, more variants, a recovery of every crash point's durable image.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from harness import (
    Cut,
    Instant,
    Recording,
    Tally,
    audit_image,
    instants,
    record_admission,
    record_host,
    record_raw,
    record_rehearsal,
    recover,
    violations,
)

SEED = int(os.environ.get("FENCEPOST_POWERLOSS_SEED", "19"))
# ``sampled``: the default run's seeded sample; ``full`` (soak): every instant, more variants, every
# crash point's durable image recovered.
SCALES = ["sampled", pytest.param("full", marks=pytest.mark.soak)]


def _chosen(recording: Recording, inside: int | None, seed: int, marks_limit: int | None = None) -> list[Instant]:
    """Every crash point (at most ``marks_limit``, seeded, each COMMIT's two sides always kept) and
    ``inside`` of the instants inside a COMMIT (None: all)."""
    found = instants(recording.ops)
    marks = [i for i in found if not i.inside_commit]
    within = [i for i in found if i.inside_commit]
    if marks_limit is not None and marks_limit < len(marks):
        sides = [i for i in marks if "-commit@" in i.label]
        others = [i for i in marks if "-commit@" not in i.label]
        marks = sides + random.Random(seed + 2).sample(others, max(0, marks_limit - len(sides)))
    if inside is not None and inside < len(within):
        within = random.Random(seed).sample(within, inside)
    return sorted(marks + within, key=lambda i: i.index)


def _exercise(recording: Recording, work: Path, *, inside: int | None, variants: int, recoveries: int | None,
              seed: int, marks_limit: int | None = None) -> tuple[Tally, list[str], int]:
    """Every chosen image checked (state and audit); ``recoveries`` durable crash-point images recovered
    (None: all; the sides of COMMITs first). Returns the tally, every problem found, and how many images
    had lost a recent commit."""
    chosen = _chosen(recording, inside, seed, marks_limit)
    marks = [i for i in chosen if not i.inside_commit]
    sides = [i for i in marks if "-commit@" in i.label]
    pool = sides if recoveries is not None and len(sides) >= recoveries else marks
    to_recover = set(marks if recoveries is None else random.Random(seed + 1).sample(pool, recoveries))
    tally = Tally()
    problems: list[str] = []
    lossy = 0
    for image in Cut(recording, work).images(chosen, variants, seed):
        found = violations(image)
        if not found:
            found = audit_image(image, recording.mode, recording.synchronous)
        if image.digest != image.states[-1] and not image.digest.startswith("corrupt"):
            lossy += 1
        if not found and image.variant == "durable" and image.instant in to_recover:
            converged = recover(image, recording, work)
            tally.recovered += 1
            if converged != recording.reference:
                found = [f"{image.instant.label}: converged to {converged} instead of {recording.reference}"]
        tally.add(image.instant.kind, not found)
        problems += found
    return tally, problems, lossy


def _report(name: str, tally: Tally, lossy: int | None = None) -> None:
    total = sum(tally.tried.values())
    older = "" if lossy is None else f", {lossy} older than the live state (a COMMIT in flight or not synced)"
    print(f"\npower loss, {name}: {total} images, {tally.recovered} recovered{older}")
    for line in tally.lines():
        print(f"  {line}")


@pytest.mark.slow
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_full_loses_no_returned_commit_and_leaves_no_partial_fact(mode: str, scale: str, shim: Path,
                                                                  tmp_path: Path) -> None:
    full = scale == "full"
    recording = record_rehearsal(shim, tmp_path / "recorded", mode=mode, synchronous="full")
    tally, problems, lossy = _exercise(recording, tmp_path / "cut", inside=None if full else 16,
                                       variants=6 if full else 1, recoveries=None if full else 2, seed=SEED)
    _report(f"sqlite {mode}/full", tally, lossy)
    assert not problems, "\n".join(problems[:20])
    assert tally.recovered >= 2
    assert sum(tally.tried.values()) >= 60


@pytest.mark.slow
@pytest.mark.parametrize("scale", SCALES)
def test_normal_in_wal_may_lose_recent_commits_but_never_a_fact_in_part(scale: str, shim: Path,
                                                                        tmp_path: Path) -> None:
    full = scale == "full"
    recording = record_rehearsal(shim, tmp_path / "recorded", mode="wal", synchronous="normal")
    tally, problems, lossy = _exercise(recording, tmp_path / "cut", inside=None if full else 12,
                                       variants=6 if full else 1, recoveries=None if full else 1, seed=SEED)
    _report("sqlite wal/normal", tally, lossy)
    assert not problems, "\n".join(problems[:20])
    # NORMAL does not sync at COMMIT: the model must really have dropped some returned commits, or this test
    # would be checking FULL again.
    assert lossy > 0


@pytest.mark.slow
def test_the_harness_reports_a_lost_commit_when_syncs_are_dropped(shim: Path, tmp_path: Path) -> None:
    """A disk that acknowledges every flush and does none (the recorder's test-only fault, as if
    ``synchronous=OFF``): the same checks must report lost committed transactions."""
    recording = record_rehearsal(shim, tmp_path / "recorded", mode="wal", synchronous="full", drop_sync=0)
    assert not any(op.kind == "S" for op in recording.ops)
    chosen = [i for i in instants(recording.ops) if not i.inside_commit]
    found: list[str] = []
    for image in Cut(recording, tmp_path / "cut").images(chosen, 1, SEED):
        found += violations(image)
    print(f"\npower loss, dropped syncs: {len(found)} problems reported, e.g. {found[:2]}")
    assert any("lost a committed transaction whose COMMIT had returned" in f for f in found), found


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "scale"), [("wal", "sampled"), pytest.param("wal", "full", marks=pytest.mark.soak),
                                             pytest.param("delete", "full", marks=pytest.mark.soak)])
def test_admission_of_a_128_step_plan_is_whole_or_absent_after_power_loss(mode: str, scale: str, shim: Path,
                                                                         tmp_path: Path) -> None:
    full = scale == "full"
    recording = record_admission(shim, tmp_path / "recorded", mode=mode, synchronous="full")
    # Full: every one of the ~520 crash points and every write inside COMMIT; 20 recoveries (each re-admits).
    tally, problems, _ = _exercise(recording, tmp_path / "cut", inside=None if full else 12,
                                   variants=2 if full else 1, recoveries=20 if full else 2, seed=SEED,
                                   marks_limit=None if full else 12)
    _report(f"sqlite {mode}/full, 128-step admission", tally)
    assert not problems, "\n".join(problems[:20])
    assert tally.recovered >= 2


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
    tally, problems, _ = _exercise(recording, tmp_path / "cut", inside=None if full else 6,
                                   variants=3 if full else 1, recoveries=None if full else 1, seed=SEED)
    _report(f"sqlite {mode}/full, action invocation", tally)
    assert not problems, "\n".join(problems[:20])
    assert tally.recovered >= 1
