"""Smoke test of the benchmark suite: the fencepost-only throughput benchmark, small, in this process.

It proves the benchmark code runs against the current fencepost and that its workload is correct (every
command DELIVERED exactly once, one claim and one deliver event each). It never asserts on speed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import database  # noqa: E402
from bench.fp_outbox import run_throughput  # noqa: E402

N = 200


def test_quick_sqlite_throughput_delivers_every_command_exactly_once() -> None:
    with database("sqlite", "smoke") as url:
        result = run_throughput(url, N, 1, batch=50, in_process=True, raw_n=50)
    assert result.verified["ok"], result.verified
    assert result.verified["commands"] == {"DELIVERED/1": N}
    assert result.verified["events"] == {"claim": N, "deliver": N}
    assert result.enqueue_per_s > 0 and result.process_per_s > 0 and result.raw_per_s > 0
