"""Helpers for the acceptance suite: the real CLI and real ``fencepost worker`` processes.

Everything here talks to fencepost the way an operator does: subprocesses running
``python -m fencepost.cli`` against a SQLite control database in a temporary directory. The test process
only *reads* the control database (sqlite3, read-only URI) to wait for states, plus a few in-process
calls of the public service where a test needs many Attempts quickly.

Waits are always bounded and condition-driven (``wait_until``); nothing sleeps a fixed time hoping a
state has been reached.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from helpers.processes import CliResult, Process, kill_all, run_cli, start, subprocess_env, worker_args
from helpers.waiting import wait_until as _wait_until

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_PACKAGE = REPO / "examples" / "inventory"
SCENARIOS = ("deliver_and_install", "integrity_check", "seed_and_verify", "reapply_is_noop",
             "upgrade_from_previous", "uninstall_to_empty")
TERMINAL = ("SUCCEEDED", "FAILED", "ABORTED")
COMMAND_TERMINAL = ("DELIVERED", "FAILED", "ABORTED")

CLI_TIMEOUT = 120.0      # one CLI invocation (rehearse runs two Attempts in-process)
STATE_TIMEOUT = 60.0     # waiting for a worker to reach a state

# Rows inserted by the slow package's seed (a recursive CTE into a TEMP table, so the per-row evidence
# digests stay cheap): about 1-3 s on a small machine, long enough to act while Receipt 3 is RUNNING.
SLOW_ROWS = int(os.environ.get("FENCEPOST_ACCEPTANCE_SLOW_ROWS", "3000000"))


# ── waiting ──
def wait_until(predicate: Callable[[], T], timeout: float = STATE_TIMEOUT, what: str = "condition",
               interval: float = 0.02) -> T:
    """``helpers.waiting.wait_until`` with this suite's default timeout."""
    return _wait_until(predicate, timeout, what, interval)


def parse_instant(text: str) -> datetime:
    """A control-database instant (``2026-01-01T00:00:00.000000Z``) or a CLI ISO time as a datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def assert_one_line_error(result: CliResult, code: int, *needles: str) -> str:
    """Exit ``code``, nothing on stdout, exactly one line on stderr containing every needle, no traceback."""
    assert result.returncode == code, result.describe()
    assert result.stdout.strip() == "", result.describe()
    lines = result.stderr_lines
    assert len(lines) == 1, result.describe()
    line = lines[0]
    assert line.startswith("fencepost: "), result.describe()
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


# ── the control database, read from the test process ──
class ControlDB:
    """Read-only SQL on the control database (a fresh connection per query: no long read snapshot)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, tuple(params)).fetchall()]
        finally:
            conn.close()

    def one(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any]:
        found = self.rows(sql, params)
        assert len(found) == 1, f"expected one row from {sql!r}, got {len(found)}"
        return found[0]

    def scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        return next(iter(self.one(sql, params).values()))

    def write_lock_free(self) -> bool:
        """True when nobody holds the write lock right now (probe with BEGIN IMMEDIATE, then roll back)."""
        conn = sqlite3.connect(str(self.path), timeout=0.3, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()

    # shortcuts
    def attempt(self, attempt_id: str) -> dict[str, Any]:
        return self.one(
            "SELECT a.*, c.status AS command_status, c.delivery_count, c.lease_owner, c.lease_until, "
            "c.lease_token, c.last_error FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id "
            "WHERE a.id = ?", (attempt_id,))

    def receipts(self, attempt_id: str) -> list[dict[str, Any]]:
        found = self.rows("SELECT * FROM rehearsal_receipts WHERE attempt_id = ? ORDER BY position", (attempt_id,))
        for r in found:
            r["evidence_json"] = json.loads(r["evidence"]) if r["evidence"] else None
        return found

    def receipt_status(self, attempt_id: str, position: int) -> str:
        return str(self.scalar("SELECT status FROM rehearsal_receipts WHERE attempt_id = ? AND position = ?",
                               (attempt_id, position)))

    def lease_events(self, command_id: str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM lease_events WHERE command_id = ? ORDER BY seq", (command_id,))

    def counts(self) -> dict[str, int]:
        return {table: int(self.scalar(f"SELECT count(*) FROM {table}"))
                for table in ("rehearsal_runs", "rehearsal_run_files", "rehearsal_attempts", "rehearsal_receipts",
                              "commands", "lease_events")}


class TokenWatch:
    """Collects every lease token that appears in ``commands`` while it runs (tokens are cleared at
    completion, so they can only be seen while a command is PROCESSING)."""

    def __init__(self, db: ControlDB, interval: float = 0.005) -> None:
        self.db = db
        self.interval = interval
        self.tokens: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="token-watch", daemon=True)

    def start(self) -> TokenWatch:
        self._thread.start()
        return self

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.tokens

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for row in self.db.rows("SELECT lease_token FROM commands WHERE lease_token IS NOT NULL"):
                    self.tokens.add(str(row["lease_token"]))
            except sqlite3.Error:
                pass  # the file may not exist yet, or be mid-checkpoint: look again next tick
            self._stop.wait(self.interval)


class Env:
    """One isolated fencepost installation: control database, work directory, CLI and workers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db_path = root / "c.db"
        self.url = f"sqlite:///{self.db_path}"
        self.work_dir = root / "work"
        self.db = ControlDB(self.db_path)
        self.results: list[CliResult] = []
        self.workers: list[Process] = []
        self.watch: TokenWatch | None = None
        self._store: Any = None

    # CLI
    def cli(self, *args: str, db: bool = True, timeout: float = CLI_TIMEOUT,
            env: dict[str, str] | None = None) -> CliResult:
        """Run ``fencepost ARGS`` (with ``-d URL`` appended unless ``db=False``); never a traceback."""
        argv = list(args) + (["-d", self.url] if db else [])
        result = run_cli(argv, cwd=self.root, env=subprocess_env(**(env or {})), timeout=timeout)
        self.results.append(result)
        assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.describe()
        return result

    def migrate(self) -> None:
        result = self.cli("migrate")
        assert result.returncode == 0, result.describe()

    # workers
    def start_worker(self, name: str, *, lease_seconds: float = 30.0, worker_id: str | None = None,
                     poll_interval: float = 0.05, extra: Iterable[str] = (),
                     env: dict[str, str] | None = None) -> Process:
        """A ``fencepost worker`` whose stdout and stderr (its JSON log, every line of which must parse) go to
        ``worker-NAME.out``/``.err``."""
        args = worker_args(self.url, self.work_dir, lease_seconds=lease_seconds, poll_interval=poll_interval,
                           worker_id=worker_id, extra=extra)
        worker = start(args, name=name, stdout_path=self.root / f"worker-{name}.out",
                       stderr_path=self.root / f"worker-{name}.err", cwd=self.root,
                       env=subprocess_env(**(env or {})), worker_id=worker_id, strict_json=True,
                       started_event="worker_started")
        self.workers.append(worker)
        return worker

    def kill_leftovers(self) -> None:
        """Teardown: SIGKILL (by pid) any worker this test started that is still alive."""
        kill_all(self.workers)

    # token watch
    def watch_tokens(self) -> TokenWatch:
        self.watch = TokenWatch(self.db).start()
        return self.watch

    # in-process service (for bulk enqueue and reads through the public API)
    @property
    def service(self) -> Any:
        from fencepost.rehearsal.service import RehearsalService
        from fencepost.store import open_store

        if self._store is None:
            self._store = open_store(self.url, create=False)
        return RehearsalService(self._store)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        if self._store is not None:
            self._store.close()

    # waiting on states
    def wait_attempt(self, attempt_id: str, statuses: Iterable[str] = TERMINAL,
                     timeout: float = STATE_TIMEOUT) -> dict[str, Any]:
        wanted = tuple(statuses)
        return wait_until(lambda: (lambda a: a if a["status"] in wanted else None)(self.db.attempt(attempt_id)),
                          timeout, what=f"attempt {attempt_id} to be one of {wanted}")

    def wait_receipt(self, attempt_id: str, position: int, status: str, timeout: float = STATE_TIMEOUT) -> None:
        wait_until(lambda: self.db.receipt_status(attempt_id, position) == status, timeout,
                   what=f"receipt {position} of {attempt_id} to be {status}", interval=0.005)

    # leak check
    def all_output(self) -> list[tuple[str, str]]:
        """(source, text) of every CLI output and every worker's stdout/stderr in this test."""
        out = []
        for r in self.results:
            out += [(f"stdout of {' '.join(r.args)}", r.stdout), (f"stderr of {' '.join(r.args)}", r.stderr)]
        for w in self.workers:
            out += [(f"stdout of worker {w.name}", w.stdout), (f"stderr of worker {w.name}", w.stderr)]
        return out

    def assert_no_secrets(self, tokens: Iterable[str] = ()) -> None:
        """No output line contains a lease token or the control database's path."""
        secrets = [(t, "a lease token") for t in tokens]
        secrets += [(p, "the database path") for p in {str(self.db_path), str(self.db_path.resolve())}]
        for source, text in self.all_output():
            for line in text.splitlines():
                for secret, what in secrets:
                    assert secret not in line, f"{source} leaks {what}: {line!r}"


# ── packages ──
def write_package(root: Path, name: str, *, seed_sql: str | None = None, version: str = "1.0.0") -> Path:
    """A one-migration package (``tally`` table, with its down file) and an optional seed script."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "migrations").mkdir(exist_ok=True)
    (root / "migrations" / "0001_tally.up.sql").write_text(
        "CREATE TABLE tally (id INTEGER PRIMARY KEY, label TEXT NOT NULL, n INTEGER NOT NULL);\n", encoding="utf-8")
    (root / "migrations" / "0001_tally.down.sql").write_text("DROP TABLE tally;\n", encoding="utf-8")
    seed_line = ""
    if seed_sql is not None:
        (root / "seed").mkdir(exist_ok=True)
        (root / "seed" / "seed.sql").write_text(seed_sql, encoding="utf-8")
        seed_line = 'seed = ["seed/seed.sql"]\n'
    (root / "fencepost-package.toml").write_text(
        f'[package]\nname = "{name}"\nversion = "{version}"\nmigrations_dir = "migrations"\n{seed_line}',
        encoding="utf-8")
    return root


def slow_package(root: Path, rows: int = SLOW_ROWS) -> Path:
    """A package whose seed scenario (Receipt 3) takes a second or more: a recursive CTE inserts ``rows``
    rows into a TEMP table (invisible to the evidence digests), and one summary row is kept."""
    seed = (
        "CREATE TEMP TABLE bulk (x INTEGER NOT NULL);\n"
        f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})\n"
        "INSERT INTO bulk (x) SELECT x FROM c;\n"
        "INSERT INTO tally (label, n) SELECT 'bulk', count(*) FROM bulk;\n"
        "DROP TABLE bulk;\n")
    return write_package(root, "bulkload", seed_sql=seed)


def small_package(root: Path) -> Path:
    """A package whose six scenarios take a few milliseconds."""
    return write_package(root, "tiny", seed_sql="INSERT INTO tally (label, n) VALUES ('one', 1), ('two', 2);\n")
