"""What the power-loss tests share: the seed, the two scales, choosing instants, and exercising every image
(state, audit, recovery) with a printed tally per transaction kind."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from harness import Cut, Instant, Recording, Tally, audit_image, instants, recover, violations

SEED = int(os.environ.get("FENCEPOST_POWERLOSS_SEED", "19"))
# ``sampled``: the default run's seeded sample; ``full`` (soak): every instant, more variants, every
# crash point's durable image recovered.
SCALES = ["sampled", pytest.param("full", marks=pytest.mark.soak)]


def choose(recording: Recording, inside: int | None, seed: int, marks_limit: int | None = None) -> list[Instant]:
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


def exercise(recording: Recording, work: Path, *, inside: int | None, variants: int, recoveries: int | None,
              seed: int, marks_limit: int | None = None) -> tuple[Tally, list[str], int]:
    """Every chosen image checked (state and audit); ``recoveries`` durable crash-point images recovered
    (None: all; the sides of COMMITs first). Returns the tally, every problem found, and how many images
    had lost a recent commit."""
    chosen = choose(recording, inside, seed, marks_limit)
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


def report(name: str, tally: Tally, lossy: int | None = None) -> None:
    total = sum(tally.tried.values())
    older = "" if lossy is None else f", {lossy} older than the live state (a COMMIT in flight or not synced)"
    print(f"\npower loss, {name}: {total} images, {tally.recovered} recovered{older}")
    for line in tally.lines():
        print(f"  {line}")
