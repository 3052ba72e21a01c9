"""``WorkersPort`` over SQL: the worker registry of ``workers.sql`` (ADR 0019), written once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fencepost.core.canonical import canonical_json, parse_json
from fencepost.store.records import WorkerRecord
from fencepost.store.sql.executor import Statements


class SqlWorkers:
    """The ``WorkersPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    def register(self, *, worker_id: str, host: str, pid: int, kinds: list[str], concurrency: int,
                 heartbeat_seconds: float, version: str, in_flight: int = 0) -> WorkerRecord:
        params = {"id": worker_id, "host": host, "pid": pid, "kinds": canonical_json(sorted(set(kinds))),
                  "concurrency": concurrency, "in_flight": in_flight, "heartbeat_seconds": float(heartbeat_seconds),
                  "version": version, "now": self._unit.now()}
        return worker_from_row(self._unit.run("register_worker", params).rows[0])

    def lock_id(self, worker_id: str) -> None:
        self._unit.run("lock_worker_id", {"id": worker_id})

    def beat(self, worker_id: str, *, in_flight: int, host: str | None = None,
             pid: int | None = None) -> WorkerRecord | None:
        rows = self._unit.run("beat_worker", {"id": worker_id, "in_flight": in_flight, "now": self._unit.now(),
                                              "host": host, "pid": pid}).rows
        return worker_from_row(rows[0]) if rows else None

    def deregister(self, worker_id: str, *, host: str | None = None, pid: int | None = None) -> bool:
        return self._unit.run("deregister_worker", {"id": worker_id, "host": host, "pid": pid}).rowcount == 1

    def list_workers(self) -> list[WorkerRecord]:
        return [worker_from_row(r) for r in self._unit.run("list_workers", {}).rows]

    def expire(self, older_than_seconds: float) -> list[WorkerRecord]:
        if older_than_seconds < 0:
            raise ValueError("older_than_seconds must be >= 0")
        cutoff = self._unit.now() - timedelta(seconds=older_than_seconds)
        rows = self._unit.run("expire_workers", {"cutoff": cutoff}).rows
        return sorted((worker_from_row(r) for r in rows), key=lambda w: (w.started_at, w.id))


def worker_from_row(row: dict[str, Any]) -> WorkerRecord:
    """A ``WorkerRecord`` from a row of the registry's columns (``kinds`` is JSON text on both dialects)."""
    kinds = parse_json(row["kinds"]) if isinstance(row["kinds"], str) else row["kinds"]
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise ValueError(f"kinds of worker {row['id']} is not a JSON list of strings")
    return WorkerRecord(id=row["id"], host=row["host"], pid=int(row["pid"]), kinds=tuple(kinds),
                        concurrency=int(row["concurrency"]), in_flight=int(row["in_flight"]),
                        heartbeat_seconds=float(row["heartbeat_seconds"]), version=row["version"],
                        started_at=row["started_at"], last_seen_at=row["last_seen_at"])
