"""Helpers of the PostgreSQL scale-out suite (``tests/scale``): many real ``fencepost worker`` processes.

- ``ScaleDB``: a fresh PostgreSQL schema, migrated, reached by every subprocess through the URL
  (``?options=-csearch_path=<schema>``), and dropped afterwards. It also has a raw SQL connection in that
  schema, for the whole-table checks that would be slow one command at a time.
- ``Fleet``: starts and stops ``fencepost worker`` subprocesses (stdout+stderr to a log file each), SIGKILLs
  them, and SIGKILLs by pid whatever a test left running.
- ``tiny_package``: one trivial migration, no seed. An Attempt of it costs a few dozen statements, so a
  thousand of them exercise the outbox rather than SQLite.

Waits are bounded and condition-driven. PostgreSQL unreachable is a failure, never a skip.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from fencepost.rehearsal.audit import audit
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store, open_store
from helpers.processes import FENCEPOST, Process, kill_all, start, subprocess_env, worker_args
from helpers.store_backends import admin_connect, create_schema, drop_schema, new_schema_name, schema_url

T = TypeVar("T")


def tiny_package(root: Path) -> Path:
    """One trivial migration (with its down file, so uninstall has something to run), no seed."""
    (root / "migrations").mkdir(parents=True, exist_ok=True)
    (root / "migrations" / "0001_items.up.sql").write_text(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n", encoding="utf-8")
    (root / "migrations" / "0001_items.down.sql").write_text("DROP TABLE items;\n", encoding="utf-8")
    (root / "fencepost-package.toml").write_text('[package]\nname = "tiny"\nversion = "1.0.0"\n', encoding="utf-8")
    return root


def slow_package(root: Path, rows: int) -> Path:
    """Like ``tiny_package`` plus a seed whose recursive CTE keeps scenario 3 busy for a while."""
    tiny_package(root)
    (root / "seed").mkdir(exist_ok=True)
    (root / "seed" / "seed.sql").write_text(
        "CREATE TEMP TABLE bulk (x INTEGER NOT NULL);\n"
        f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})\n"
        "INSERT INTO bulk (x) SELECT x FROM c;\n"
        "INSERT INTO items (id, name) SELECT 1, 'bulk ' || count(*) FROM bulk;\n"
        "DROP TABLE bulk;\n", encoding="utf-8")
    (root / "fencepost-package.toml").write_text(
        '[package]\nname = "slow"\nversion = "1.0.0"\nseed = ["seed/seed.sql"]\n', encoding="utf-8")
    return root


# ── a worker whose process clock is off (libfaketime) ──
FAKETIME_LIBRARY_GLOBS = ("/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1",
                          "/usr/local/lib/faketime/libfaketimeMT.so.1")
# libfaketime 0.9.10 and CPython 3.11 disagree twice, so the skewed process runs with two adjustments:
# - FAKETIME_DONT_FAKE_MONOTONIC=1: with a faked CLOCK_MONOTONIC, threading.Event.wait (sem_clockwait on the
#   monotonic clock, which libfaketime does not intercept) computes a deadline decades away and hangs;
# - then time.sleep (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which libfaketime does intercept and
#   shifts as if it were wall time) fails with EINVAL, so the shim below sleeps on an Event instead.
# The wall clock (clock_gettime(CLOCK_REALTIME), gettimeofday, time) stays faked for everything in the
# process, Python and libpq alike: time.time(), datetime.now() and the log timestamps are all skewed.
SKEW_SHIM = (
    "import threading, time\n"
    "def _sleep(seconds, _event=threading.Event()):\n"
    "    _event.wait(max(0.0, seconds))\n"
    "time.sleep = _sleep\n"
    "import runpy\n"
    "runpy.run_module('fencepost.cli', run_name='__main__', alter_sys=True)\n"
)


def faketime_library() -> Path:
    """The multi-threaded libfaketime (Debian package ``libfaketime``, installed by ``.ci/run``).

    Raises:
        AssertionError: it is not installed (a failure, never a skip: the skew test must run).
    """
    for pattern in FAKETIME_LIBRARY_GLOBS:
        found = sorted(Path("/").glob(pattern.lstrip("/")))
        if found:
            return found[0]
    raise AssertionError("libfaketime is not installed: apt-get install faketime (.ci/run installs it)")


def skewed_env(skew: str) -> dict[str, str]:
    """Environment of a process whose wall clock is ``skew`` off (libfaketime syntax: ``+5h``, ``-5h``)."""
    return subprocess_env(LD_PRELOAD=str(faketime_library()), FAKETIME=skew, FAKETIME_DONT_FAKE_MONOTONIC="1")


SKEWED_ARGV = [sys.executable, "-c", SKEW_SHIM]


@dataclass
class ScaleDB:
    """One fresh, migrated PostgreSQL schema shared by the test and its worker subprocesses."""

    schema: str
    url: str
    root: Path
    _store: Store | None = None
    _sql: psycopg.Connection[Any] | None = None

    @property
    def store(self) -> Store:
        """An in-process store on the schema (setup and reads only)."""
        if self._store is None:
            self._store = open_store(self.url)
        return self._store

    @property
    def service(self) -> RehearsalService:
        return RehearsalService(self.store)

    def query(self, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Raw SQL in the schema on an autocommit connection (each query its own snapshot)."""
        if self._sql is None or self._sql.closed:
            self._sql = admin_connect()
            self._sql.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
            self._sql.execute("SET TIME ZONE 'UTC'")
        cursor = self._sql.execute(text.encode("utf-8"), params)
        return list(cursor.fetchall()) if cursor.description is not None else []

    def scalar(self, text: str, params: tuple[Any, ...] = ()) -> Any:
        return self.query(text, params)[0][0]

    def open_commands(self) -> int:
        return int(self.scalar("SELECT count(*) FROM commands WHERE status IN ('PENDING', 'PROCESSING')"))

    def enqueue(self, run_id: str, n: int) -> list[str]:
        """``n`` Attempts of ``run_id``, each enqueued in its own transaction as the CLI and API do."""
        service = self.service
        return [service.enqueue_attempt(run_id).id for _ in range(n)]

    def audit_findings(self) -> list[str]:
        """``fencepost audit``'s checks, in process."""
        return [f"{f.check}: {f.subject}: {f.detail}" for f in audit(self.store)]

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._sql is not None:
            self._sql.close()
            self._sql = None


@contextmanager
def scale_db(root: Path, tag: str = "scale") -> Iterator[ScaleDB]:
    """A fresh migrated schema under ``root``; dropped afterwards (raises BackendUnreachable if down)."""
    root.mkdir(parents=True, exist_ok=True)
    schema = new_schema_name(tag)
    create_schema(schema)
    db = ScaleDB(schema, schema_url(schema), root)
    try:
        migrated = open_store(db.url)
        try:
            migrated.migrate()
        finally:
            migrated.close()
        yield db
    finally:
        db.close()
        drop_schema(schema)


@dataclass
class Fleet:
    """The worker subprocesses of one test (all on ``db``); ``kill_all`` SIGKILLs leftovers by pid."""

    db: ScaleDB
    started: list[Process] = field(default_factory=list)

    def start(self, worker_id: str, *, lease_seconds: float = 30.0, poll_interval: float = 0.2,
              batch_size: int = 10, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None,
              argv_prefix: list[str] | None = None) -> Process:
        """A ``fencepost worker`` (JSON log merged with stdout into one file) with as many execution slots as its
        batch size; ``stop_cleanly`` waits for its ``worker_started`` line before the SIGTERM."""
        args = worker_args(self.db.url, self.db.root / "work", lease_seconds=lease_seconds,
                           poll_interval=poll_interval, batch_size=batch_size, worker_id=worker_id,
                           extra=("--concurrency", str(batch_size), *extra_args))
        log_path = self.db.root / f"worker-{len(self.started):03d}-{worker_id}.log"
        worker = start(args, name=worker_id, stdout_path=log_path, cwd=self.db.root, env=env,
                       argv_prefix=argv_prefix or FENCEPOST, worker_id=worker_id, started_event="worker_started")
        self.started.append(worker)
        return worker

    def running(self) -> list[Process]:
        return [w for w in self.started if w.alive]

    def kill_all(self) -> None:
        kill_all(self.started)
