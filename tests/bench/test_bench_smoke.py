"""Smoke test of the benchmark suite: the fencepost-only throughput and host benchmarks, small, in this process,
and the relay benchmark's cases (real relay processes, RabbitMQ on 127.0.0.1:5672 and a local receiver),
the delivery and the workflow benchmarks' cases (real `fencepost worker`-built processes).

It proves the benchmark code runs against the current fencepost and that its workload is correct (every
command DELIVERED exactly once, one claim and one deliver event each; every host invocation succeeded on its
first attempt with exactly one adapter row, and the commit counter sees the host path's named transactions).
It never asserts on speed.
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


def test_quick_sqlite_host_invocations_each_succeed_once_with_one_adapter_row() -> None:
    from bench.fp_host import count_commits, run_host

    with database("sqlite", "smoke-host") as url:
        result = run_host(url, 20, 1, batch=10, concurrency=2, in_process=True)
    assert result.verified["ok"], result.verified
    assert result.verified["invocations"] == {"succeeded/DELIVERED/attempt 1/rows 1/succeeded rows 1": 20}
    with database("sqlite", "smoke-commits") as url:
        commits = count_commits(url, 10, batch=10, concurrency=2)
    assert commits["verified"]["ok"], commits["verified"]
    assert commits["submit"] == {"host.submit": 10}
    assert commits["reads"]["submit"] == 0  # the submit's view is read inside its own write unit
    for name in ("host.claim", "host.handler", "host.step.row", "host.step.checkpoint", "host.finalize"):
        assert commits["worker_units"][name] == 10, commits["worker_units"]  # grouped or alone, once each
    assert sum(commits["worker"].values()) <= sum(commits["worker_units"].values()), commits


def test_quick_relay_cases_publish_every_event_once_and_deliver_every_id() -> None:
    """The relay benchmark's cases, tiny: real `fencepost relay` processes to a real RabbitMQ queue and to the
    bench's webhook receiver, then the plain pika and httpx loops; each verified by the outbox and by id."""
    from bench.common import scratch_dir
    from bench.relay import Receiver, run_case

    receiver = Receiver()
    try:
        for sink in ("amqp", "webhook"):
            with database("sqlite", f"smoke-relay-{sink}") as url, scratch_dir("smoke-relay") as d:
                result = run_case(url, sink, 30, 1, str(d), receiver)
            assert result.verified["ok"], (sink, result.verified)
            assert result.verified["outbox"] == {"published/1": 30}
            assert result.verified["missing"] == 0 and result.verified["ceiling_missing"] == 0
            assert result.verified["distinct_ids"] == 30 and result.verified["delivered"] >= 30
            assert result.relay_per_s > 0 and result.ceiling_per_s > 0
    finally:
        receiver.close()


def test_quick_delivery_fleet_delivers_every_migration_exactly_once(tmp_path: Path) -> None:
    """The delivery benchmark's case, tiny: a real `fencepost worker` process delivers 4 targets; every delivery
    matches the rehearsal, each migration ran once per target, and the plain loop applied the same SQL."""
    from bench.common import scratch_dir
    from bench.delivery import MIGRATIONS, run_case

    with database("sqlite", "smoke-delivery") as url, scratch_dir("smoke-delivery") as d:
        result = run_case(url, d, targets=4, workers=1)
    assert result.verified["ok"], result.verified
    assert result.verified["deliveries"] == {"succeeded/matches rehearsal": 4}
    assert result.verified["targets_exactly_once"] == 4 and result.verified["direct_exactly_once"] == 4
    assert len(MIGRATIONS) == 3 and result.fencepost_per_s > 0 and result.direct_per_s > 0


def test_quick_workflow_runs_settle_with_one_target_row_per_step() -> None:
    """The workflow benchmark's cases, tiny: an 8-step fan-out DAG and 10 one-step Runs, each on a fresh SQLite
    control store, one real worker process; every step succeeded once (one `marks` row, one ledger row) and the
    rate and the commit counts are positive, with the task invocation's host transactions once per step."""
    from bench.common import scratch_dir
    from bench.workflows import run_case

    for shape, steps in (("dag", 8), ("runs", 10)):
        with database("sqlite", f"smoke-wf-{shape}") as url, scratch_dir("smoke-wf") as d:
            result = run_case(url, d, shape, 1, dag_size=8, runs=10)
        assert result.verified["ok"], (shape, result.verified)
        assert result.verified["step_runs"] == {"succeeded": steps} and result.verified["marks"] == steps
        assert result.steps == steps and result.steps_per_s > 0 and result.seconds > 0
        for name in ("host.claim", "host.handler", "host.finalize"):
            assert result.units[name] == steps, (shape, result.units)  # grouped or alone, once per step
        assert result.writes["workflow.advance"] >= (3 if shape == "dag" else steps), result.writes
        assert result.writes_per_step >= result.work_writes_per_step > 0, result.writes
        work_units = sum(c for name, c in result.units.items() if name.startswith(("workflow.", "host.")))
        assert work_units / steps > 5, result.units  # grouped commits are fewer; the units of work are not
