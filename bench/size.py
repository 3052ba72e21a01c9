"""Cost against size: claim time with 10^3, 10^5 and 10^6 rows, the claim plan, growth per command, worker RSS.

Rows for the size series are written in bulk with SQL (half DELIVERED, half PENDING, the same shape the
outbox writes), not through the worker: the point is the claim's cost with that many rows present.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

from bench.common import database_bytes, median, sqlite_path
from bench.fp_outbox import KIND, enqueue_bulk, make_worker, migrated, spawn_workers, verify
from fencepost.store.base import Store
from fencepost.store.sql.queries import load_dialect, to_pyformat

CLAIM_BATCH = 10

_SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :rows)
INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at, delivery_count,
                      finished_at)
SELECT printf('cmd_fill%018d', i + :offset), :kind, '{"i":0}',
       CASE WHEN i % 2 = 0 THEN 'DELIVERED' ELSE 'PENDING' END,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day') || '000',
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day') || '000',
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day') || '000',
       CASE WHEN i % 2 = 0 THEN 1 ELSE 0 END,
       CASE WHEN i % 2 = 0 THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day') || '000' END
FROM n
"""

_PG_FILL = """
INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at, delivery_count,
                      finished_at)
SELECT 'cmd_fill' || lpad((i + %(offset)s)::text, 18, '0'), %(kind)s, '{"i":0}',
       CASE WHEN i %% 2 = 0 THEN 'DELIVERED' ELSE 'PENDING' END,
       now() - interval '1 day' + i * interval '1 microsecond', now() - interval '1 day',
       now() - interval '1 day', CASE WHEN i %% 2 = 0 THEN 1 ELSE 0 END,
       CASE WHEN i %% 2 = 0 THEN now() - interval '1 day' END
FROM generate_series(1, %(rows)s) AS i
"""


def fill(store: Store, url: str, rows: int, offset: int) -> None:
    """Add ``rows`` commands, half DELIVERED and half PENDING, in one bulk statement."""
    if store.backend == "sqlite":
        conn = store.connection()  # type: ignore[attr-defined]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_SQLITE_FILL, {"rows": rows, "kind": KIND, "offset": offset})
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_PG_FILL, {"rows": rows, "kind": KIND, "offset": offset})
            conn.execute("VACUUM ANALYZE commands")


def claim_plan(store: Store) -> list[str]:
    """The claim statement's plan (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL)."""
    sql = load_dialect(f"fencepost.store.{store.backend}")["claim_commands"].sql
    if store.backend == "sqlite":
        conn = store.connection()  # type: ignore[attr-defined]
        params = {"owner": "plan", "kind": KIND, "now": "9999", "lease_until": "9999", "limit": CLAIM_BATCH}
        return [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]

    def unit(tx: Any) -> list[str]:
        params = {"owner": "plan", "kind": KIND, "now": tx.now(), "limit": CLAIM_BATCH, "lease_seconds": 30.0}
        with tx.executor._conn.cursor() as cur:
            cur.execute(("EXPLAIN " + to_pyformat(sql)).encode(), params)
            return [str(r[0]) for r in cur.fetchall()]

    return list(store.transact(unit, write=False))


def plan_is_index_driven(backend: str, plan: list[str]) -> bool:
    text = "\n".join(plan)
    if backend == "sqlite":
        return "SCAN commands" not in text and "commands_pending_due" in text and \
            "commands_processing_lease" in text
    return "Seq Scan on commands" not in text and "commands_pending_due" in text and \
        "commands_processing_lease" in text


def claim_times(store: Store, repetitions: int) -> list[float]:
    """Seconds per claim transaction (batch of CLAIM_BATCH), the claimed rows then finished (not timed)."""
    out = []
    for _ in range(repetitions):
        start = time.perf_counter()
        got = store.transact(lambda tx: tx.outbox.claim(owner="probe", kinds=[KIND], limit=CLAIM_BATCH,
                                                        lease_seconds=30.0), name="outbox.claim")
        out.append(time.perf_counter() - start)
        if len(got) != CLAIM_BATCH:
            raise RuntimeError("the size benchmark ran out of pending rows")
        store.transact(lambda tx, got=got: tx.outbox.finish_many([c.lease for c in got]))
    return out


def claim_vs_size(url: str, sizes: list[int], repetitions: int) -> dict[int, dict[str, Any]]:
    """Median claim time at each table size (rows are added cumulatively to one database)."""
    store = migrated(url)
    result: dict[int, dict[str, Any]] = {}
    present = 0
    try:
        for size in sizes:
            fill(store, url, size - present, present)
            present = size
            plan = claim_plan(store)
            times = claim_times(store, repetitions)
            result[size] = {"median_s": median(times), "plan": plan,
                            "index_driven": plan_is_index_driven(store.backend, plan)}
    finally:
        store.close()
    return result


def _settled_bytes(store: Store, url: str) -> int:
    if store.backend == "sqlite":
        store.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[attr-defined]
        return os.path.getsize(sqlite_path(url))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    return database_bytes(url)


def growth_per_command(url: str, n: int) -> float:
    """Database bytes added per command enqueued, claimed and delivered (rows, indexes, lease events)."""
    store = migrated(url)
    try:
        enqueue_bulk(store, 1000)  # past the empty-file stage
        worker = make_worker(store, batch=100, lease=30.0)
        worker.run(max_idle_polls=1)
        before = _settled_bytes(store, url)
        enqueue_bulk(store, n)
        worker = make_worker(store, batch=100, lease=30.0)
        worker.run(max_idle_polls=1)
        after = _settled_bytes(store, url)
    finally:
        store.close()
    return (after - before) / n


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def worker_memory(url: str, n: int) -> dict[str, Any]:
    """RSS of one worker process over an ``n``-command run, sampled every 0.1 s."""
    store = migrated(url)
    enqueue_bulk(store, n)
    procs = spawn_workers(url, 1, batch=100, lease=30.0)
    proc = procs[0]
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                samples.append((time.time(), _rss_kib(proc.pid)))
            except OSError:
                return
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    assert proc.stdin is not None
    sampler.start()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    proc.communicate(timeout=3600)
    stop.set()
    sampler.join()
    ok = verify(store, n)["ok"]
    store.close()
    values = [kib for _, kib in samples if kib]
    if not values:
        raise RuntimeError("no RSS samples")
    tenth = values[max(0, len(values) // 10)]
    return {"first_kib": values[0], "at_10pct_kib": tenth, "peak_kib": max(values), "last_kib": values[-1],
            "peak_over_10pct": max(values) / tenth, "verified": ok, "samples": len(values)}
