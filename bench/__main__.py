"""Run the benchmark suite: ``python -m bench [--quick] [--reps R] [--n N] [name ...]`` (``bash bench/run``).

Names: throughput, peers, host, latency, takeover, size, rehearsal, relay, delivery, workflows (default: all).
Every figure is printed as it is measured; the run ends with a markdown report in bench/results/<UTC date-time>.md.
Repetitions are interleaved (fencepost, then each peer, then the next repetition) and every ratio is taken within one
repetition, then the median of those ratios is reported.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import traceback
from collections.abc import Callable
from typing import Any

from bench.common import ROOT, Row, database, drop_stale_pg_databases, fmt, median, scratch_dir

NAMES = ("throughput", "peers", "host", "latency", "takeover", "size", "rehearsal", "relay", "delivery", "workflows")
BACKENDS = ("sqlite", "postgres")
# Peer worker counts: pgqueuer (a target at 1 and 4) and Huey at both; the slow peers at one worker.
PEERS = {"sqlite": [("huey", [1, 4]), ("dbos", [1])],
         "postgres": [("pgqueuer", [1, 4]), ("pgqueuer-b100", [1, 4]), ("procrastinate", [1]), ("dbos", [1])]}


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.ratios: list[Row] = []
        self.targets: list[tuple[str, str, str, str]] = []
        self.notes: list[str] = []
        self.failures: list[str] = []

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"  {row.benchmark:<11} {row.case:<46} median {fmt(row.median):>10} {row.unit:<10} "
              f"runs {', '.join(fmt(v) for v in row.values)}", flush=True)

    def ratio(self, row: Row) -> None:
        self.ratios.append(row)
        print(f"  ratio       {row.case:<46} median {fmt(row.median):>10} x          "
              f"runs {', '.join(fmt(v) for v in row.values)}", flush=True)

    def target(self, name: str, wanted: str, measured: str, verdict: str) -> None:
        self.targets.append((name, wanted, measured, verdict))
        print(f"  target      {name}: {measured} (want {wanted}) -> {verdict}", flush=True)

    def markdown(self, args: argparse.Namespace, started: dt.datetime) -> str:
        out = [f"# fencepost benchmarks, {started:%Y-%m-%d %H:%M} UTC", "",
               f"`bash bench/run {' '.join(sys.argv[1:])}`: N = {args.n:,}, {args.reps} repetition(s); "
               f"Python {platform.python_version()}, {platform.machine()}, "
               f"{_cpus()} CPU(s). Medians of the repetitions; each ratio is computed within one repetition "
               "and the median of those ratios is shown.", ""]
        if self.targets:
            out += ["## Targets", "", "| target | wanted | measured | verdict |", "| --- | --- | --- | --- |"]
            out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in self.targets]
            out.append("")
        out += ["## Figures", "", "| benchmark | case | median | unit | runs | note |",
                "| --- | --- | ---: | --- | --- | --- |"]
        out += [f"| {r.benchmark} | {r.case} | {fmt(r.median)} | {r.unit} | {', '.join(fmt(v) for v in r.values)} "
                f"| {r.note} |" for r in self.rows]
        if self.ratios:
            out += ["", "## Ratios (same run, same repetition)", "", "| ratio | median | runs | note |",
                    "| --- | ---: | --- | --- |"]
            out += [f"| {r.case} | {fmt(r.median)}x | {', '.join(fmt(v) for v in r.values)} | {r.note} |"
                    for r in self.ratios]
        if self.notes:
            out += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        if self.failures:
            out += ["", "## Failures", ""] + [f"- {f}" for f in self.failures]
        return "\n".join(out) + "\n"


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _verdict(ok: bool, how: str) -> str:
    return ("met" if ok else "MISSED") + (f" ({how})" if how else "")


# ───────────────────────── throughput and peers ─────────────────────────

def bench_throughput(rep: Report, args: argparse.Namespace, with_peers: bool) -> None:
    from bench import fp_outbox

    n = args.n
    series: dict[str, list[float]] = {}

    def put(key: str, value: float) -> None:
        series.setdefault(key, []).append(value)

    for i in range(args.reps):
        print(f"throughput repetition {i + 1}/{args.reps}", flush=True)
        for backend in BACKENDS:
            for workers in (1, 4):
                with database(backend, f"tp{workers}") as url:
                    got = fp_outbox.run_throughput(url, n, workers, batch=args.batch)
                if not got.verified["ok"]:
                    raise RuntimeError(f"fencepost {backend} x{workers}: not every command delivered exactly "
                                       f"once: {got.verified}")
                put(f"{backend}/raw/{workers}", got.raw_per_s)
                put(f"{backend}/fp-enqueue/{workers}", got.enqueue_per_s)
                put(f"{backend}/fp/{workers}", got.process_per_s)
                print(f"  {backend} x{workers}: raw {got.raw_per_s:,.0f}/s, enqueue {got.enqueue_per_s:,.0f}/s, "
                      f"process {got.process_per_s:,.0f}/s", flush=True)
            if not with_peers:
                continue
            for peer, counts in PEERS[backend]:
                for workers in counts:
                    key = f"{backend}/{peer}/{workers}"
                    try:
                        got_peer = _run_peer(peer, backend, n, workers)
                    except Exception as error:  # a peer that cannot run here is reported, never faked
                        rep.failures.append(f"{peer} on {backend} x{workers}: {type(error).__name__}: {error}")
                        traceback.print_exc()
                        continue
                    if got_peer.processed != n:
                        rep.failures.append(f"{peer} on {backend} x{workers} processed {got_peer.processed} of {n}")
                    put(key, got_peer.process_per_s)
                    put(f"{backend}/{peer}-enqueue/{workers}", got_peer.enqueue_per_s)
                    fp = series[f"{backend}/fp/{workers}"][-1]
                    put(f"ratio/{backend}/{peer}/{workers}", fp / got_peer.process_per_s)
                    print(f"  {peer} {backend} x{workers}: enqueue {got_peer.enqueue_per_s:,.0f}/s, "
                          f"process {got_peer.process_per_s:,.0f}/s", flush=True)
        for backend in BACKENDS:
            for workers in (1, 4):
                put(f"ratio/{backend}/raw/{workers}",
                    series[f"{backend}/fp/{workers}"][-1] / series[f"{backend}/raw/{workers}"][-1])
                put(f"ratio/{backend}/enqueue-raw/{workers}",
                    series[f"{backend}/fp-enqueue/{workers}"][-1] / series[f"{backend}/raw/{workers}"][-1])

    label = {"sqlite": "SQLite WAL/FULL", "postgres": "PostgreSQL"}
    for backend in BACKENDS:
        for workers in (1, 4):
            rep.add(Row("throughput", f"{label[backend]} raw single-row commits (x{workers} run)",
                        series[f"{backend}/raw/{workers}"], "commits/s", "1 connection, 1 INSERT per transaction"))
            rep.add(Row("throughput", f"{label[backend]} fencepost enqueue, {workers} worker run",
                        series[f"{backend}/fp-enqueue/{workers}"], "cmds/s", "1 transaction per command"))
            rep.add(Row("throughput", f"{label[backend]} fencepost processing, {workers} worker(s)",
                        series[f"{backend}/fp/{workers}"], "cmds/s",
                        f"claim + no-op + fenced completion, batch {args.batch}"))
        if with_peers:
            for peer, counts in PEERS[backend]:
                for workers in counts:
                    if f"{backend}/{peer}/{workers}" in series:
                        rep.add(Row("peers", f"{peer} on {label[backend]}, {workers} worker(s)",
                                    series[f"{backend}/{peer}/{workers}"], "jobs/s", _peer_note(peer)))
                        rep.add(Row("peers", f"{peer} on {label[backend]} enqueue",
                                    series[f"{backend}/{peer}-enqueue/{workers}"], "jobs/s",
                                    "single enqueues, one transaction each"))
    for backend in BACKENDS:
        for workers in (1, 4):
            rep.ratio(Row("ratio", f"{label[backend]} fencepost processing / raw commits, x{workers}",
                          series[f"ratio/{backend}/raw/{workers}"], "x"))
            rep.ratio(Row("ratio", f"{label[backend]} fencepost enqueue / raw commits, x{workers}",
                          series[f"ratio/{backend}/enqueue-raw/{workers}"], "x"))
        if with_peers:
            for peer, counts in PEERS[backend]:
                for workers in counts:
                    key = f"ratio/{backend}/{peer}/{workers}"
                    if key in series:
                        rep.ratio(Row("ratio", f"{label[backend]} fencepost / {peer}, {workers} worker(s)",
                                      series[key], "x"))

    raw1 = median(series["ratio/sqlite/raw/1"])
    rep.target("SQLite WAL/FULL, 1 worker: processing >= 50% of raw single-row commits", ">= 0.50x",
               f"{raw1:.2f}x", _verdict(raw1 >= 0.5, f"{raw1 / 0.5:.2f}x the target"))
    if with_peers:
        for peer, backend, counts in (("huey", "sqlite", [1]), ("pgqueuer", "postgres", [1, 4]),
                                      ("pgqueuer-b100", "postgres", [1, 4])):
            for workers in counts:
                key = f"ratio/{backend}/{peer}/{workers}"
                if key not in series:
                    rep.target(f"{label[backend]}, {workers} worker(s): >= 1.0x {peer}", ">= 1.0x", "not measured",
                               "MISSED (peer did not run)")
                    continue
                value = median(series[key])
                rep.target(f"{label[backend]}, {workers} worker(s): processing >= 1.0x {peer}", ">= 1.0x",
                           f"{value:.2f}x", _verdict(value >= 1.0, ""))


def _peer_note(peer: str) -> str:
    return {"huey": "SqliteHuey, WAL, fsync=True (synchronous=FULL), results off, thread worker",
            "pgqueuer": "asyncpg driver, batch 10 (its default), drain mode",
            "pgqueuer-b100": "asyncpg driver, batch 100 (fencepost's benchmark batch), drain mode",
            "procrastinate": "psycopg connector, concurrency 1, wait=False",
            "dbos": "DBOS queue, polling 10 ms, workflow per job"}[peer]


def _run_peer(peer: str, backend: str, n: int, workers: int) -> Any:
    from bench import peers

    if backend == "sqlite":
        with scratch_dir(peer) as d:
            target = str(d / "queue.db")
            return peers.huey_run(target, n, workers) if peer == "huey" else peers.dbos_run(target, n, workers)
    with database("postgres", peer.replace("-", "_")) as url:
        if peer == "pgqueuer-b100":
            return peers.pgqueuer_run(url, n, workers, batch=100)
        fn: Callable[[str, int, int], Any] = {"pgqueuer": peers.pgqueuer_run,
                                              "procrastinate": peers.procrastinate_run,
                                              "dbos": peers.dbos_run}[peer]
        return fn(url, n, workers)


# ─────────────────────────────── the action host ───────────────────────────────

#: DBOS runs its one-step workflows at these worker counts per backend.
HOST_DBOS_WORKERS = {"sqlite": [1, 4], "postgres": [1, 4]}


def bench_host(rep: Report, args: argparse.Namespace) -> None:
    """Dispatched host invocations with one no-op adapter step against DBOS one-step workflows and the plain
    outbox's no-op commands, 1 and 4 worker processes, both backends, ratios within each repetition."""
    from bench import fp_host, fp_outbox, peers

    n = args.n
    dbos_n = args.dbos_n or n
    series: dict[str, list[float]] = {}

    def put(key: str, value: float) -> None:
        series.setdefault(key, []).append(value)

    for i in range(args.reps):
        print(f"host repetition {i + 1}/{args.reps}", flush=True)
        for backend in BACKENDS:
            for workers in (1, 4):
                with database(backend, f"host{workers}") as url:
                    got = fp_host.run_host(url, n, workers)
                if not got.verified["ok"]:
                    raise RuntimeError(f"host {backend} x{workers}: not every invocation succeeded with one attempt "
                                       f"and one adapter row: {got.verified}")
                put(f"{backend}/host-submit/{workers}", got.enqueue_per_s)
                put(f"{backend}/host/{workers}", got.process_per_s)
                with database(backend, f"plain{workers}") as url:
                    plain = fp_outbox.run_throughput(url, n, workers, batch=args.batch)
                if not plain.verified["ok"]:
                    raise RuntimeError(f"plain outbox {backend} x{workers}: {plain.verified}")
                put(f"{backend}/raw/{workers}", plain.raw_per_s)
                put(f"{backend}/plain/{workers}", plain.process_per_s)
                put(f"ratio/{backend}/plain/{workers}", got.process_per_s / plain.process_per_s)
                print(f"  {backend} x{workers}: host submit {got.enqueue_per_s:,.0f}/s, process "
                      f"{got.process_per_s:,.0f}/s; plain outbox {plain.process_per_s:,.0f}/s; raw commits "
                      f"{plain.raw_per_s:,.0f}/s", flush=True)
            for workers in HOST_DBOS_WORKERS[backend]:
                try:
                    if backend == "sqlite":
                        with scratch_dir("dbos-step") as d:
                            target = str(d / "queue.db")
                            got_peer = peers.dbos_step_run(target, dbos_n, workers)
                            counts = peers.dbos_step_counts(target)
                    else:
                        with database("postgres", "dbos_step") as target:
                            got_peer = peers.dbos_step_run(target, dbos_n, workers)
                            counts = peers.dbos_step_counts(target)
                except Exception as error:  # a peer that cannot run here is reported, never faked
                    rep.failures.append(f"dbos (one step) on {backend} x{workers}: {type(error).__name__}: {error}")
                    traceback.print_exc()
                    continue
                want = {"workflows SUCCESS": dbos_n, "step rows": dbos_n}
                if got_peer.processed != dbos_n or counts != want:
                    rep.failures.append(f"dbos (one step) on {backend} x{workers}: processed {got_peer.processed} "
                                        f"of {dbos_n}; system database: {counts}")
                put(f"{backend}/dbos/{workers}", got_peer.process_per_s)
                put(f"{backend}/dbos-enqueue/{workers}", got_peer.enqueue_per_s)
                put(f"ratio/{backend}/dbos/{workers}", series[f"{backend}/host/{workers}"][-1] / got_peer.process_per_s)
                print(f"  dbos (one step) {backend} x{workers}: enqueue {got_peer.enqueue_per_s:,.0f}/s, process "
                      f"{got_peer.process_per_s:,.0f}/s ({dbos_n} workflows)", flush=True)

    label = {"sqlite": "SQLite WAL/FULL", "postgres": "PostgreSQL"}
    dbos_note = (f"DBOSClient enqueue; queue polling {peers.DBOS_POLLING_INTERVAL * 1000:.0f} ms, worker_concurrency "
                 f"{peers.DBOS_WORKER_CONCURRENCY}, unique executor_id per process; {dbos_n:,} workflows")
    for backend in BACKENDS:
        for workers in (1, 4):
            rep.add(Row("host", f"{label[backend]} host submit (Dispatch), {workers} worker run",
                        series[f"{backend}/host-submit/{workers}"], "invocations/s",
                        "Host.submit: 1 write transaction + 1 read each"))
            rep.add(Row("host", f"{label[backend]} host processing, {workers} worker(s)",
                        series[f"{backend}/host/{workers}"], "invocations/s",
                        f"one no-op adapter step; batch {fp_host.DEFAULT_BATCH}, {fp_host.DEFAULT_CONCURRENCY} slots"))
            rep.add(Row("host", f"{label[backend]} plain outbox processing, {workers} worker(s)",
                        series[f"{backend}/plain/{workers}"], "cmds/s", f"no-op command, batch {args.batch}"))
            rep.add(Row("host", f"{label[backend]} raw single-row commits (x{workers} run)",
                        series[f"{backend}/raw/{workers}"], "commits/s", "1 connection, 1 INSERT per transaction"))
            if f"{backend}/dbos/{workers}" in series:
                rep.add(Row("host", f"DBOS one-step workflows on {label[backend]}, {workers} worker(s)",
                            series[f"{backend}/dbos/{workers}"], "workflows/s", dbos_note))
    for backend in BACKENDS:
        for workers in (1, 4):
            rep.ratio(Row("host", f"{label[backend]} host / plain outbox, x{workers}",
                          series[f"ratio/{backend}/plain/{workers}"], "x"))
            if f"ratio/{backend}/dbos/{workers}" in series:
                rep.ratio(Row("host", f"{label[backend]} host / DBOS one-step workflows, x{workers}",
                              series[f"ratio/{backend}/dbos/{workers}"], "x"))
    for backend in BACKENDS:
        for workers in (1, 4):
            key = f"ratio/{backend}/dbos/{workers}"
            name = f"{label[backend]}, {workers} worker(s): host processing >= 10x DBOS one-step workflows"
            if key not in series:
                rep.target(name, ">= 10x", "not measured", "MISSED (DBOS did not run)")
                continue
            value = median(series[key])
            rep.target(name, ">= 10x", f"{value:.2f}x", _verdict(value >= 10.0, f"{value / 10:.2f}x the target"))
    with database("sqlite", "hostcommits") as url:
        commits = fp_host.count_commits(url, 100)
    per = commits["per_invocation"]
    rep.notes.append(f"host commits per invocation (100 invocations, one in-process worker, SQLite; every "
                     f"Store.transaction counted by name): submit {per['submit']:.2f} + worker {per['worker']:.2f} "
                     f"= {per['total']:.2f} write transactions; submit also reads the invocation back once "
                     f"({commits['reads']['submit']} reads); worker write transactions by name: {commits['worker']}; "
                     f"worker units of write work by name (grouped or alone): {commits['worker_units']}; "
                     f"worker statements per invocation (named, besides BEGIN/COMMIT): "
                     f"{per['worker_statements']:.1f}, by name: {commits['worker_statements']}")
    print(f"  host commits per invocation: {per}", flush=True)


# ─────────────────────────── latency and takeover ───────────────────────────

def bench_latency(rep: Report, args: argparse.Namespace) -> None:
    from bench import latency

    samples = 20 if args.quick else 100
    poll_ms = f"{latency.POLL_INTERVAL * 1000:.0f} ms"
    for backend, listen, label, note in (
            ("sqlite", False, f"sqlite, polling {poll_ms}", f"idle worker polling every {poll_ms}"),
            ("postgres", False, f"postgres, polling {poll_ms} (--no-listen)",
             f"idle worker polling every {poll_ms}, LISTEN/NOTIFY off"),
            ("postgres", True, "postgres, LISTEN/NOTIFY (poll 1 s)",
             f"idle worker listening, poll interval {latency.LISTEN_POLL_INTERVAL:g} s (the CLI default)")):
        p50s, p99s = [], []
        for i in range(args.reps):
            with database(backend, "lat") as url:
                values = latency.claim_latency(url, samples, listen=listen)
            s = latency.summarize(values)
            p50s.append(s["p50"] * 1000)
            p99s.append(s["p99"] * 1000)
            print(f"  latency {label} rep {i + 1}: p50 {s['p50'] * 1000:.1f} ms, p99 {s['p99'] * 1000:.1f} ms")
        note += f"; {samples} commands per run"
        rep.add(Row("latency", f"{label}: enqueue -> handler start p50", p50s, "ms", note))
        rep.add(Row("latency", f"{label}: enqueue -> handler start p99", p99s, "ms", note))


def bench_takeover(rep: Report, args: argparse.Namespace) -> None:
    from bench import latency

    lease = 2.0
    runs = max(3, args.reps)
    for backend in BACKENDS:
        ratios = []
        for i in range(runs):
            with database(backend, "tko") as url:
                seconds = latency.takeover_latency(url, lease)
            ratios.append(seconds / lease)
            print(f"  takeover {backend} run {i + 1}: {seconds:.2f} s = {seconds / lease:.2f}x lease")
        rep.ratio(Row("takeover", f"{backend} SIGKILL -> re-claim / lease ({lease:g} s)", ratios, "x",
                      "heartbeat every lease/3, taker polls every 50 ms, kill at a random point"))
        worst = max(ratios)
        rep.target(f"{backend}: takeover within 1.5x lease", "<= 1.5x", f"median {median(ratios):.2f}x, "
                   f"worst {worst:.2f}x", _verdict(worst <= 1.5, ""))


# ───────────────────────────────── size ─────────────────────────────────

def bench_size(rep: Report, args: argparse.Namespace) -> None:
    from bench import size

    sizes = [1_000, 10_000] if args.quick else [1_000, 100_000, 1_000_000]
    reps = 20
    mem_n = 10_000 if args.quick else 100_000
    for backend in BACKENDS:
        per_size: dict[int, list[float]] = {s: [] for s in sizes}
        plans: dict[int, list[str]] = {}
        index_driven = True
        for _ in range(args.reps):
            with database(backend, "size") as url:
                got = size.claim_vs_size(url, sizes, reps)
            for s, v in got.items():
                per_size[s].append(v["median_s"] * 1000)
                plans[s] = v["plan"]
                index_driven = index_driven and v["index_driven"]
        for s in sizes:
            rep.add(Row("size", f"{backend} claim of {size.CLAIM_BATCH} with {s:,} rows", per_size[s], "ms",
                        "half DELIVERED, half PENDING; median of 20 claims"))
        ratio = [b / a for a, b in zip(per_size[sizes[0]], per_size[sizes[-1]], strict=True)]
        rep.ratio(Row("size", f"{backend} claim time at {sizes[-1]:,} / at {sizes[0]:,} rows", ratio, "x"))
        rep.target(f"{backend}: claim time at {sizes[-1]:,} rows within 2x that at {sizes[0]:,}", "<= 2.0x",
                   f"{median(ratio):.2f}x, index-driven plan: {'yes' if index_driven else 'NO'}",
                   _verdict(median(ratio) <= 2.0 and index_driven, ""))
        plan_text = " / ".join(line.strip() for line in plans[sizes[-1]] if "commands" in line)
        rep.notes.append(f"{backend} claim plan at {sizes[-1]:,} rows: {plan_text}")
        growth = []
        for _ in range(args.reps):
            with database(backend, "growth") as url:
                growth.append(size.growth_per_command(url, min(args.n, 10_000)))
        rep.add(Row("size", f"{backend} database growth per delivered command", growth, "bytes",
                    "command row, indexes and 2 lease events; PostgreSQL before VACUUM"))
        with database(backend, "mem") as url:
            mem = size.worker_memory(url, mem_n)
        if not mem["verified"]:
            rep.failures.append(f"{backend} memory run: not every command delivered exactly once")
        rep.add(Row("size", f"{backend} worker RSS at 10% of {mem_n:,} commands", [mem["at_10pct_kib"] / 1024],
                    "MiB", f"{mem['samples']} samples every 0.1 s"))
        rep.add(Row("size", f"{backend} worker peak RSS over {mem_n:,} commands", [mem["peak_kib"] / 1024], "MiB",
                    f"first sample {mem['first_kib'] / 1024:.1f} MiB, last {mem['last_kib'] / 1024:.1f} MiB"))
        flat = mem["peak_over_10pct"]
        rep.target(f"{backend}: worker memory flat over {mem_n:,} commands", "peak <= 1.10x RSS at 10%",
                   f"{flat:.3f}x", _verdict(flat <= 1.10, ""))


# ─────────────────────────────── rehearsal ───────────────────────────────

def bench_rehearsal(rep: Report, args: argparse.Namespace) -> None:
    from bench import rehearsal

    got = rehearsal.run_rehearsal(max(1, args.reps))
    rep.add(Row("rehearsal", "sakila: fencepost rehearsal, 1 Attempt, 6 scenarios", got["fencepost_s"], "s",
                "Run frozen, Attempt enqueued, worker to SUCCEEDED; control DB SQLite WAL/FULL"))
    rep.add(Row("rehearsal", "sakila: schema + data + drop with sqlite3", got["direct_s"], "s",
                "3 scripts, one transaction each"))
    rep.ratio(Row("rehearsal", "sakila rehearsal / direct sqlite3 (overhead)",
                  [a / b for a, b in zip(got["fencepost_s"], got["direct_s"], strict=True)], "x",
                  "the rehearsal also checks integrity and FKs twice, digests 46,273 rows twice, re-applies, "
                  "and records fenced evidence"))


# ──────────────────────────────── delivery ───────────────────────────────
def bench_delivery(rep: Report, args: argparse.Namespace) -> None:
    """A fleet of 200 small SQLite targets (a 3-migration package) delivered by 1 and 4 `fencepost worker`
    processes, against the same SQL in a plain sqlite3 loop in the same repetition (bench/delivery.py)."""
    from bench import delivery

    series: dict[str, list[float]] = {}

    def put(key: str, value: float) -> None:
        series.setdefault(key, []).append(value)

    for i in range(args.reps):
        print(f"delivery repetition {i + 1}/{args.reps}", flush=True)
        for workers in (1, 4):
            with database("sqlite", f"delivery{workers}") as url, scratch_dir("delivery") as d:
                got = delivery.run_case(url, d, targets=delivery.FLEET, workers=workers)
            if not got.verified["ok"]:
                raise RuntimeError(f"delivery x{workers}: not every target delivered exactly once: {got.verified}")
            put(f"fp/{workers}", got.fencepost_per_s)
            put(f"direct/{workers}", got.direct_per_s)
            put(f"ratio/{workers}", got.fencepost_per_s / got.direct_per_s)
            print(f"  x{workers}: fencepost {got.fencepost_per_s:,.1f} migrations/s ({got.seconds:.1f} s), "
                  f"sqlite3 loop {got.direct_per_s:,.0f}/s", flush=True)
    for workers in (1, 4):
        rep.add(Row("delivery", f"fencepost delivery, {delivery.FLEET} targets x 3 migrations, {workers} worker(s)",
                    series[f"fp/{workers}"], "migr/s", "submit to last verdict; SQLite WAL/FULL control store"))
        rep.add(Row("delivery", f"plain sqlite3 loop, same SQL ({workers}-worker run)", series[f"direct/{workers}"],
                    "migr/s", "one transaction per migration, one process"))
        rep.ratio(Row("delivery", f"fencepost delivery / plain sqlite3 loop, x{workers}", series[f"ratio/{workers}"],
                      "x", "the cost of exactly-once (ledger row per migration, fenced steps) and evidence "
                           "(drift check, fingerprint vs rehearsal)"))
    rep.notes.append("delivery: every case verified: each of the 200 deliveries `succeeded` with `matches rehearsal`, "
                     "every target's ledger holds the 3 migrations and its `seen` table one row per migration (a "
                     "second run would add a row); the plain loop's files hold the same rows.")

# ──────────────────────────────── workflows ───────────────────────────────

WF_SHAPES = (("dag", "128-step fan-out DAG (1 Run)"), ("runs", "1,000 one-step Runs"))
WF_LABEL = {"sqlite": "SQLite WAL/FULL", "postgres": "PostgreSQL"}


def bench_workflows(rep: Report, args: argparse.Namespace) -> None:
    """Steps per second of one 128-step fan-out DAG and of 1,000 one-step Runs, 1 and 4 worker processes, both
    control-store backends, against DBOS workflows of the same shapes in the same repetition (bench/workflows.py,
    bench/wf_peers.py); commits per step counted in fencepost's workers."""
    from bench import workflows

    runs = min(args.n, workflows.RUNS)
    series: dict[str, list[float]] = {}
    commits: dict[str, dict[str, Any]] = {}

    def put(key: str, value: float) -> None:
        series.setdefault(key, []).append(value)

    for i in range(args.reps):
        print(f"workflows repetition {i + 1}/{args.reps}", flush=True)
        for backend in BACKENDS:
            for shape, _ in WF_SHAPES:
                for workers in (1, 4):
                    key = f"{backend}/{shape}/{workers}"
                    with database(backend, f"wf{workers}") as url, scratch_dir("wf") as d:
                        got = workflows.run_case(url, d, shape, workers, runs=runs)
                    if not got.verified["ok"]:
                        raise RuntimeError(f"workflows {key}: not every step succeeded exactly once: {got.verified}")
                    put(f"fp/{key}", got.steps_per_s)
                    put(f"writes/{key}", got.writes_per_step)
                    put(f"work/{key}", got.work_writes_per_step)
                    if got.xact_commit_per_step is not None:
                        put(f"xact/{key}", got.xact_commit_per_step)
                    commits[key] = got.writes
                    print(f"  fencepost {key}: {got.steps_per_s:,.1f} steps/s ({got.seconds:.1f} s); write "
                          f"transactions per step {got.writes_per_step:.2f} (step work {got.work_writes_per_step:.2f})"
                          + (f", xact_commit per step {got.xact_commit_per_step:.2f}"
                             if got.xact_commit_per_step is not None else ""), flush=True)
                    try:
                        peer = _wf_dbos(backend, shape, workers, runs)
                    except Exception as error:  # a peer that cannot run here is reported, never faked
                        rep.failures.append(f"dbos workflows {key}: {type(error).__name__}: {error}")
                        traceback.print_exc()
                        continue
                    if not peer["ok"]:
                        rep.failures.append(f"dbos workflows {key}: {peer}")
                        continue
                    put(f"dbos/{key}", peer["steps_per_s"])
                    put(f"ratio/{key}", got.steps_per_s / peer["steps_per_s"])
                    print(f"  dbos {key}: {peer['steps_per_s']:,.1f} steps/s ({peer['seconds']:.1f} s)", flush=True)
    for backend in BACKENDS:
        for shape, title in WF_SHAPES:
            what = title if shape == "dag" else f"{runs:,} one-step Runs"
            for workers in (1, 4):
                key = f"{backend}/{shape}/{workers}"
                rep.add(Row("workflows", f"{WF_LABEL[backend]} fencepost {what}, {workers} worker(s)",
                            series[f"fp/{key}"], "steps/s", "all admitted -> all settled"))
                if f"dbos/{key}" in series:
                    rep.add(Row("workflows", f"{WF_LABEL[backend]} DBOS {what}, {workers} worker(s)",
                                series[f"dbos/{key}"], "steps/s", "first workflow started -> last step done"))
                rep.add(Row("workflows", f"{WF_LABEL[backend]} fencepost {what}, {workers} worker(s): commits",
                            series[f"writes/{key}"], "writes/step",
                            f"control-store write transactions per step, all (step work alone: "
                            f"{fmt(median(series[f'work/{key}']))}); + 1 target commit"))
                if f"xact/{key}" in series:
                    rep.add(Row("workflows", f"{WF_LABEL[backend]} fencepost {what}, {workers} worker(s): "
                                "xact_commit", series[f"xact/{key}"], "commits/step",
                                "pg_stat_database delta over the timed window, reads included"))
    for backend in BACKENDS:
        for shape, _ in WF_SHAPES:
            for workers in (1, 4):
                key = f"ratio/{backend}/{shape}/{workers}"
                if key in series:
                    rep.ratio(Row("workflows", f"{WF_LABEL[backend]} {shape}: fencepost / DBOS, {workers} worker(s)",
                                  series[key], "x"))
    print("\n" + workflow_table(series, runs), flush=True)
    for key, writes in sorted(commits.items()):
        rep.notes.append(f"workflows {key}: fencepost write transactions (last repetition, all workers) by name: "
                         f"{writes}")
    rep.notes.append("workflows: every fencepost case verified: every Run and StepRun `succeeded`, the target's "
                     "`marks` holds one row per step and its `fencepost_workflow_tasks` ledger one row per step; "
                     "every DBOS case: the steps done equal the shape's and `marks` holds one row per step.")


def workflow_table(series: dict[str, list[float]], runs: int) -> str:
    """The workflow benchmark's summary: steps/s, fencepost / DBOS and commits per step, medians."""
    out = ["| backend | shape | workers | fencepost steps/s | DBOS steps/s | fencepost / DBOS | writes/step (all) "
           "| writes/step (step work) | xact_commit/step |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for backend in BACKENDS:
        for shape, title in WF_SHAPES:
            for workers in (1, 4):
                key = f"{backend}/{shape}/{workers}"

                def m(prefix: str, key: str = key) -> str:
                    return fmt(median(series.get(f"{prefix}/{key}", [])))

                ratio = m("ratio")
                out.append(f"| {WF_LABEL[backend]} | {title if shape == 'dag' else f'{runs:,} one-step Runs'} "
                           f"| {workers} | {m('fp')} | {m('dbos')} | {ratio}{'x' if ratio != 'n/a' else ''} "
                           f"| {m('writes')} | {m('work')} | {m('xact')} |")
    return "\n".join(out)


def _wf_dbos(backend: str, shape: str, workers: int, runs: int) -> dict[str, Any]:
    from bench import wf_peers

    if backend == "sqlite":
        with scratch_dir("wf-dbos") as d:
            return wf_peers.run(str(d / "system.db"), str(d / "marks.db"), shape, workers, n=runs)
    with database("postgres", "wf_dbos") as system, scratch_dir("wf-dbos") as d:
        return wf_peers.run(system, str(d / "marks.db"), shape, workers, n=runs)


# ───────────────────────────────── relay ─────────────────────────────────

RELAY_SINKS = (("amqp", "RabbitMQ (confirms)", "pika loop, confirm per message"),
               ("webhook", "webhook", "httpx loop, one POST at a time"))


def bench_relay(rep: Report, args: argparse.Namespace) -> None:
    """``fencepost relay`` processes (1 and 4) draining N seeded events to RabbitMQ and to a local webhook
    receiver, both backends, each against the plain client loop's rate at the same process count, in the same
    repetition (bench/relay.py)."""
    from bench import relay

    n = args.n
    series: dict[str, list[float]] = {}

    def put(key: str, value: float) -> None:
        series.setdefault(key, []).append(value)

    receiver = relay.Receiver()
    try:
        for i in range(args.reps):
            print(f"relay repetition {i + 1}/{args.reps}", flush=True)
            for backend in BACKENDS:
                for sink, _label, _note in RELAY_SINKS:
                    for workers in (1, 4):
                        with database(backend, f"relay{workers}") as url, scratch_dir("relay") as d:
                            got = relay.run_case(url, sink, n, workers, str(d), receiver)
                        if not got.verified["ok"]:
                            raise RuntimeError(f"relay {backend} {sink} x{workers}: not every event published "
                                               f"exactly once and received: {got.verified}")
                        put(f"{backend}/{sink}/{workers}", got.relay_per_s)
                        put(f"ceiling/{backend}/{sink}/{workers}", got.ceiling_per_s)
                        put(f"ratio/{backend}/{sink}/{workers}", got.relay_per_s / got.ceiling_per_s)
                        print(f"  {backend} {sink} x{workers}: relay {got.relay_per_s:,.0f}/s, ceiling "
                              f"{got.ceiling_per_s:,.0f}/s ({got.relay_per_s / got.ceiling_per_s:.2f}x); "
                              f"outbox {got.verified['outbox']}, delivered {got.verified['delivered']}, "
                              f"missing {got.verified['missing']}", flush=True)
    finally:
        receiver.close()
    label = {"sqlite": "SQLite WAL/FULL", "postgres": "PostgreSQL"}
    for backend in BACKENDS:
        for sink, sink_label, note in RELAY_SINKS:
            for workers in (1, 4):
                rep.add(Row("relay", f"{label[backend]} relay -> {sink_label}, {workers} process(es)",
                            series[f"{backend}/{sink}/{workers}"], "events/s",
                            f"fencepost relay CLI, batch {relay.RELAY_BATCH}; first to last published_at"))
                rep.add(Row("relay", f"{sink_label} ceiling, {workers} process(es) ({backend} run)",
                            series[f"ceiling/{backend}/{sink}/{workers}"], "events/s", note))
    for backend in BACKENDS:
        for sink, sink_label, _note in RELAY_SINKS:
            for workers in (1, 4):
                rep.ratio(Row("relay", f"{label[backend]} relay / {sink_label} ceiling, {workers} process(es)",
                              series[f"ratio/{backend}/{sink}/{workers}"], "x"))
    rep.notes.append("relay: every case verified: the outbox holds N rows `published` with attempts 1, and every id "
                     "reached the sink at least once (RabbitMQ queue drained by message_id; webhook receiver's ids); "
                     "the ceiling loops' ids are checked the same way.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(NAMES)} (default: all), or "
                        "crash-compare alone")
    parser.add_argument("--quick", action="store_true", help="small N, one repetition: a smoke run")
    parser.add_argument("--reps", type=int, help="repetitions (default 3; 1 with --quick)")
    parser.add_argument("--n", type=int, help="commands per throughput run (default 10,000; 1,000 with --quick)")
    parser.add_argument("--batch", type=int, default=100, help="fencepost worker batch size (default 100)")
    parser.add_argument("--dbos-n", type=int, help="workflows per DBOS run of `host` (default: --n); rates compare")
    args = parser.parse_args(argv)
    if args.names == ["crash-compare"]:  # a correctness comparison, not a timed benchmark: its own table
        from bench import crash_compare

        crash_compare.main(["run"])
        return 0
    args.reps = args.reps or (1 if args.quick else 3)
    args.n = args.n or (1_000 if args.quick else 10_000)
    names = args.names or list(NAMES)
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    started = dt.datetime.now(dt.UTC)
    drop_stale_pg_databases()
    rep = Report()
    steps: list[tuple[str, Callable[[], None]]] = []
    if "throughput" in names or "peers" in names:
        steps.append(("throughput" + (" and peers" if "peers" in names else ""),
                      lambda: bench_throughput(rep, args, "peers" in names)))
    for name, fn in (("host", bench_host), ("latency", bench_latency), ("takeover", bench_takeover),
                     ("size", bench_size), ("rehearsal", bench_rehearsal), ("relay", bench_relay),
                     ("delivery", bench_delivery), ("workflows", bench_workflows)):
        if name in names:
            steps.append((name, lambda fn=fn: fn(rep, args)))
    for title, step in steps:
        print(f"== {title}", flush=True)
        try:
            step()
        except Exception as error:
            rep.failures.append(f"{title}: {type(error).__name__}: {error}")
            traceback.print_exc()
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{started:%Y-%m-%d-%H%M}{'-quick' if args.quick else ''}.md"
    text = rep.markdown(args, started)
    path.write_text(text, encoding="utf-8")
    print("\n" + text)
    print(f"written: {path.relative_to(ROOT)}")
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
