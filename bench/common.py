"""Shared helpers of the benchmark suite: databases, timing, statistics, results.

Only the standard library, psycopg and fencepost are imported here, so the fencepost-only benchmarks
(and tests/bench/test_bench_smoke.py) run in the project's own virtualenv too.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("FENCEPOST_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
DB_PREFIX = "fencepost_bench_"


def pg_url(dbname: str) -> str:
    """The admin URL with its database replaced by ``dbname``."""
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{dbname}"


def create_pg_database(tag: str) -> str:
    """Create a fresh database ``fencepost_bench_<tag>_<rand>``; returns its URL."""
    name = f"{DB_PREFIX}{tag}_{secrets.token_hex(3)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return pg_url(name)


def drop_pg_database(url: str) -> None:
    name = url.rpartition("/")[2]
    if not name.startswith(DB_PREFIX):
        raise ValueError(f"refusing to drop {name!r}: not a benchmark database")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def drop_stale_pg_databases() -> None:
    """Drop benchmark databases left behind by an interrupted earlier run."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                            (DB_PREFIX + "%",))]
        for name in names:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def pg_database_bytes(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert row is not None
        return int(row[0])


def work_dir() -> Path:
    """Scratch space for SQLite files: on the same disk as the repository (not a tmpfs), git-ignored."""
    path = ROOT / "bench" / "results" / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def scratch_dir(tag: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=work_dir()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def database(backend: str, tag: str) -> Iterator[str]:
    """A fresh, empty database URL of ``backend`` (``sqlite`` = WAL/FULL file, ``postgres``), removed after."""
    if backend == "sqlite":
        with scratch_dir(tag) as d:
            yield f"sqlite:///{d / 'bench.db'}?journal_mode=wal&synchronous=full"
    elif backend == "postgres":
        url = create_pg_database(tag)
        try:
            yield url
        finally:
            drop_pg_database(url)
    else:
        raise ValueError(f"unknown backend {backend!r}")


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///").split("?", 1)[0]


def sqlite_bytes(url: str) -> int:
    path = sqlite_path(url)
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def database_bytes(url: str) -> int:
    return sqlite_bytes(url) if url.startswith("sqlite") else pg_database_bytes(url)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass
class Row:
    """One line of a results table: what, per-repetition values, the unit, and a note."""

    benchmark: str
    case: str
    values: list[float]
    unit: str
    note: str = ""

    @property
    def median(self) -> float:
        return median(self.values)


def fmt(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def release_and_collect(procs: list[Any], what: str) -> tuple[float, list[dict[str, Any]]]:
    """Release ready worker processes together (``go`` on each one's stdin) and collect the JSON report each
    prints last. Returns the wall-clock instant of the release and the reports.

    Raises:
        RuntimeError: a worker exited non-zero (``what`` names it).
    """
    go = time.time()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = []
    for proc in procs:
        out, _ = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return go, reports
