"""The SIGKILL crash harness: real ``python -m fencepost.cli`` subprocesses killed at named crash points.

A crash point (``fencepost.core.crashpoints``) sits on each side of every COMMIT: every
``store.transaction(name=...)`` fires ``<name>:before-commit`` and ``<name>:after-commit``. A process started
with ``FENCEPOST_CRASHPOINT=<name>:<side>[@n]`` SIGKILLs itself there, exactly like a power cut of the process.

This module holds everything the crash tests share:

- ``CrashDB``: one fresh control database of one backend (SQLite WAL/FULL, SQLite DELETE/FULL, or a fresh
  PostgreSQL schema reached through ``?options=-csearch_path=...`` so that subprocesses use it too);
- ``cli``/``start_worker``: the real CLI and the real long-lived worker, with or without a crash point;
- ``check_structure``: no half-applied transition (the Receipt sequence of every Attempt is one a sequence of
  whole transactions can produce) — run after every crash, next to ``fencepost audit``;
- ``Summary``: the converged outcome (statuses, semantic evidence fingerprint, gate verdict) compared with
  the crash-free reference of the same flow on the same backend.

Waits are bounded and condition-driven; nothing sleeps hoping a state was reached, except where the point
is to give a worker the chance to do something it must not do (``idle_worker``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from fencepost.core.statuses import AttemptStatus, ReceiptStatus
from fencepost.evidence.comparison import semantic_fingerprint
from fencepost.rehearsal.audit import audit as run_audit
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store, open_store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import AttemptRecord, LeaseEvent, ReceiptRecord
from helpers.store_backends import create_schema, drop_schema, new_schema_name, postgres_url
from helpers.waiting import wait_until as _wait_until

T = TypeVar("T")

FENCEPOST = [sys.executable, "-m", "fencepost.cli"]
LEASE_SECONDS = 1.0        # short, so that a takeover after a crash comes quickly
POLL_SECONDS = 0.05        # worker poll interval
CLI_TIMEOUT = 120.0        # one CLI invocation
STATE_TIMEOUT = 60.0       # a worker reaching a state (generous: two busy cores)
EXIT_TIMEOUT = 30.0        # a signalled or crashing process exiting
KILLED = -signal.SIGKILL   # Popen's returncode for a process that died of SIGKILL
TERMINAL_EVENTS = ("deliver", "fail", "abort")
CLAIM_EVENTS = ("claim", "takeover")

# Rows the slow package's seed inserts into a TEMP table: Receipt 3 then runs for about a second, long
# enough for heartbeats (every lease/3) and for a SIGTERM to land while the Attempt is mid-way.
SLOW_ROWS = int(os.environ.get("FENCEPOST_CRASH_SLOW_ROWS", "1500000"))


# ── waiting ──
def wait_until(predicate: Callable[[], T], timeout: float = STATE_TIMEOUT, what: str = "condition",
               interval: float = 0.02) -> T:
    """``helpers.waiting.wait_until`` with this suite's default timeout."""
    return _wait_until(predicate, timeout, what, interval)


# ── the database under test ──
BACKENDS = ("sqlite-wal", "sqlite-delete", "postgres")


@dataclass
class CrashDB:
    """One fresh control database, reachable by URL from subprocesses and in-process for reads.

    Attributes:
        name: ``sqlite-wal``, ``sqlite-delete`` or ``postgres``.
        url: the ``--database`` URL every subprocess gets.
        root: the test's directory (work dirs, worker logs, packages).
    """

    name: str
    url: str
    root: Path
    schema: str | None = None
    _store: Store | None = None

    @property
    def store(self) -> Store:
        """An in-process store on the same database (reads and in-process setup only)."""
        if self._store is None:
            self._store = open_store(self.url, create=False)
        return self._store

    @property
    def service(self) -> RehearsalService:
        return RehearsalService(self.store)

    def migrate(self) -> None:
        store = open_store(self.url, create=True)
        try:
            store.migrate()
        finally:
            store.close()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # reads
    def attempt(self, attempt_id: str) -> AttemptRecord:
        found = self.store.read(lambda tx: tx.rehearsal.get_attempt(attempt_id))
        assert found is not None, f"no attempt {attempt_id}"
        return found

    def receipts(self, attempt_id: str) -> list[ReceiptRecord]:
        return self.store.read(lambda tx: tx.rehearsal.attempt_receipts(attempt_id))

    def events(self, command_id: str) -> list[LeaseEvent]:
        return self.store.read(lambda tx: tx.outbox.lease_events(command_id))

    def attempts(self) -> list[AttemptRecord]:
        return all_attempts(self.store)

    def run_ids(self) -> list[str]:
        return [r.id for r in self.store.read(lambda tx: tx.rehearsal.list_runs(1000))]

    def command_count(self) -> int:
        return sum(self.store.read(lambda tx: tx.outbox.count_by_status()).values())


@contextmanager
def crash_db(name: str, root: Path) -> Iterator[CrashDB]:
    """A fresh, migrated control database of backend ``name`` under ``root``; dropped afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    if name.startswith("sqlite-"):
        mode = name.removeprefix("sqlite-")
        db = CrashDB(name, f"sqlite:///{root / 'control.db'}?journal_mode={mode}&synchronous=full", root)
        db.migrate()
        try:
            yield db
        finally:
            db.close()
        return
    if name != "postgres":
        raise ValueError(f"unknown backend {name!r}")
    schema = new_schema_name("crash")
    create_schema(schema)
    base = postgres_url()
    url = f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={schema}', safe='')}"
    db = CrashDB(name, url, root, schema=schema)
    try:
        db.migrate()
        yield db
    finally:
        db.close()
        drop_schema(schema)


# ── subprocesses ──
def subprocess_env(crash: str | None = None) -> dict[str, str]:
    """This environment without any FENCEPOST_* setting, plus the crash point when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEPOST_")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "PYTHONDONTWRITEBYTECODE": "1"})
    if crash is not None:
        env["FENCEPOST_CRASHPOINT"] = crash
    return env


@dataclass
class CliResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    crash: str | None = None

    def json(self) -> Any:
        return json.loads(self.stdout)

    def describe(self) -> str:
        armed = f" [FENCEPOST_CRASHPOINT={self.crash}]" if self.crash else ""
        return (f"fencepost {' '.join(self.args)}{armed} -> exit {self.returncode}\n--- stdout ---\n"
                f"{self.stdout}--- stderr ---\n{self.stderr}")


def cli(db: CrashDB, *args: str, crash: str | None = None, timeout: float = CLI_TIMEOUT) -> CliResult:
    """Run ``fencepost ARGS -d URL``; with ``crash`` the process must die of SIGKILL at that point."""
    argv = [*args, "-d", db.url]
    done = subprocess.run([*FENCEPOST, *argv], cwd=db.root, env=subprocess_env(crash), capture_output=True,
                          text=True, timeout=timeout, check=False)
    result = CliResult(argv, done.returncode, done.stdout, done.stderr, crash)
    if crash is not None:
        assert result.returncode == KILLED, f"expected death by SIGKILL at {crash}\n{result.describe()}"
        assert result.stdout == "", f"a process killed before answering printed an answer\n{result.describe()}"
    else:
        assert "Traceback" not in result.stderr, result.describe()
    return result


@dataclass
class WorkerProcess:
    """A running ``fencepost worker`` (stdout and stderr in files under the test's directory)."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    crash: str | None

    @property
    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def events(self, event: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log.splitlines():
            with suppress(json.JSONDecodeError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("event") == event:
                    found.append(entry)
        return found

    def describe(self) -> str:
        armed = f" [FENCEPOST_CRASHPOINT={self.crash}]" if self.crash else ""
        return f"worker {self.name}{armed}, exit {self.proc.poll()}\n--- log ---\n{self.log[-4000:]}"

    def wait_killed(self, timeout: float = STATE_TIMEOUT) -> None:
        """The worker must die of SIGKILL (its armed crash point) within ``timeout`` seconds."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=EXIT_TIMEOUT)
            raise AssertionError(f"crash point never fired within {timeout:g} s\n{self.describe()}") from None
        assert code == KILLED, f"expected death by SIGKILL\n{self.describe()}"
        assert "Traceback" not in self.log, self.describe()

    def stop(self) -> None:
        """SIGTERM (graceful stop) and wait for exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=EXIT_TIMEOUT)
            raise AssertionError(f"worker did not stop on SIGTERM\n{self.describe()}") from None
        assert code == 0, self.describe()
        assert "Traceback" not in self.log, self.describe()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=EXIT_TIMEOUT)


class Workers:
    """Starts workers for one test and SIGKILLs (by pid) any it left running."""

    def __init__(self, db: CrashDB, work_dir: Path | None = None) -> None:
        self.db = db
        self.work_dir = work_dir or db.root / "work"
        self.started: list[WorkerProcess] = []

    def start(self, name: str, *, crash: str | None = None, lease_seconds: float = LEASE_SECONDS,
              work_dir: Path | None = None) -> WorkerProcess:
        log_path = self.db.root / f"worker-{len(self.started)}-{name}.log"
        args = ["worker", "-d", self.db.url, "--work-dir", str(work_dir or self.work_dir),
                "--lease-seconds", f"{lease_seconds:g}", "--poll-interval", f"{POLL_SECONDS:g}",
                "--batch-size", "1", "--worker-id", f"{name}-{len(self.started)}", "--log-format", "json"]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([*FENCEPOST, *args], cwd=self.db.root, env=subprocess_env(crash),
                                    stdout=log, stderr=subprocess.STDOUT)
        worker = WorkerProcess(name, proc, log_path, crash)
        self.started.append(worker)
        return worker

    def kill_all(self) -> None:
        for worker in self.started:
            worker.kill()


# ── structural check: no half-applied transition ──
def all_attempts(store: Store) -> list[AttemptRecord]:
    """Every Attempt of every Run, by Run creation then seq."""
    def unit(tx: UnitOfWork) -> list[AttemptRecord]:
        found: list[AttemptRecord] = []
        for run in sorted(tx.rehearsal.list_runs(1000), key=lambda r: (r.created_at, r.id)):
            found.extend(tx.rehearsal.list_attempts(run.id))
        return found
    return store.read(unit)


def check_structure(store: Store) -> list[str]:
    """Problems with the Receipt sequence of any Attempt (empty when every state is a whole transition).

    Every fenced transaction moves the sequence by whole steps (start: receipt 1 RUNNING; receipt k:
    k SUCCEEDED and k+1 RUNNING; succeed/fail/abort: all terminal together), so after any crash each
    Attempt must read, by status:

    - PENDING: six PENDING Receipts without delivery or evidence;
    - RUNNING: SUCCEEDED*, then exactly one RUNNING, then PENDING*; every started Receipt from the
      Attempt's current delivery, evidence exactly on the SUCCEEDED ones;
    - SUCCEEDED: six SUCCEEDED; FAILED: SUCCEEDED*, then FAILED or ABORTED, then ABORTED*;
      ABORTED: SUCCEEDED*, then ABORTED*;
    - an open Attempt's command open, a finished Attempt's command finished, and no Attempt delivery
      beyond its command's delivery count.
    """
    problems: list[str] = []
    for attempt in all_attempts(store):
        receipts = store.read(lambda tx, a=attempt.id: tx.rehearsal.attempt_receipts(a))
        codes = "".join(_code(r.status) for r in receipts)
        where = f"attempt {attempt.id} ({attempt.status}, command {attempt.command_status}) receipts {codes}"
        patterns = {
            AttemptStatus.PENDING: r"P{6}",
            AttemptStatus.RUNNING: r"S*RP*",
            AttemptStatus.SUCCEEDED: r"S{6}",
            AttemptStatus.FAILED: r"S*[FA]A*",
            AttemptStatus.ABORTED: r"S*A*",
        }
        if len(receipts) != 6 or not re.fullmatch(patterns[attempt.status], codes):
            problems.append(f"{where}: not a sequence of whole transitions")
        if attempt.status.terminal != attempt.command_status.terminal:
            problems.append(f"{where}: Attempt and command not finished together")
        if attempt.delivery > attempt.delivery_count:
            problems.append(f"{where}: delivery {attempt.delivery} > delivery_count {attempt.delivery_count}")
        for r in receipts:
            if r.status is ReceiptStatus.PENDING:
                if r.delivery is not None or r.evidence is not None:
                    problems.append(f"{where}: PENDING receipt {r.position} carries delivery or evidence")
                continue
            if attempt.status is AttemptStatus.RUNNING and r.delivery != attempt.delivery:
                problems.append(f"{where}: receipt {r.position} from delivery {r.delivery}, "
                                f"Attempt at delivery {attempt.delivery}")
            has_evidence = r.evidence is not None and r.evidence_fingerprint is not None
            if r.status in (ReceiptStatus.SUCCEEDED, ReceiptStatus.FAILED) and not has_evidence:
                problems.append(f"{where}: {r.status} receipt {r.position} without evidence")
            if r.status is ReceiptStatus.RUNNING and r.evidence is not None:
                problems.append(f"{where}: RUNNING receipt {r.position} already has evidence")
    return problems


def _code(status: ReceiptStatus) -> str:
    return {"PENDING": "P", "RUNNING": "R", "SUCCEEDED": "S", "FAILED": "F", "ABORTED": "A"}[str(status)]


def receipt_codes(db: CrashDB, attempt_id: str) -> str:
    """The Receipt statuses of an Attempt as letters, e.g. ``SSRPPP``."""
    return receipt_codes_of(db.store, attempt_id)


def receipt_codes_of(store: Store, attempt_id: str) -> str:
    return "".join(_code(r.status) for r in store.read(lambda tx: tx.rehearsal.attempt_receipts(attempt_id)))


def unsound(store: Store) -> list[str]:
    """Findings of ``fencepost audit``'s checks (in-process) plus ``check_structure``; empty when sound."""
    return [f"{f.check}: {f.subject}: {f.detail}" for f in run_audit(store)] + check_structure(store)


def assert_sound(db: CrashDB, when: str) -> None:
    """``fencepost audit``'s checks and the structural check both clean."""
    findings = unsound(db.store)
    assert not findings, f"{when}: partial or inconsistent facts:\n" + "\n".join(findings)


def assert_cli_audit_clean(db: CrashDB) -> None:
    result = cli(db, "audit", "--json")
    assert result.returncode == 0, result.describe()
    assert result.json()["sound"] is True, result.describe()


# ── the converged outcome ──
@dataclass(frozen=True)
class Summary:
    """What a flow converges to, comparable across runs (no ids, no timings, no delivery numbers)."""

    runs: int
    attempts: tuple[tuple[str, str, str, str, str], ...]  # (status, command status, receipts, semantics, error)
    gate_passed: bool
    gate_checks: tuple[tuple[str, bool], ...]
    extra: tuple[tuple[str, Any], ...] = field(default_factory=tuple)


def summarize(db: CrashDB, run_id: str) -> Summary:
    attempts = []
    for a in db.service.attempts(run_id):
        receipts = db.receipts(a.id)
        # The error's first clause names what failed (a scenario, an exception type); the rest may hold
        # volatile paths or ids.
        error = (a.error or "").split(":")[0]
        attempts.append((str(a.status), str(a.command_status), "".join(_code(r.status) for r in receipts),
                         semantic_fingerprint(receipts), error))
    gate = db.service.gate(run_id)
    return Summary(runs=len(db.run_ids()), attempts=tuple(attempts), gate_passed=gate.passed,
                   gate_checks=tuple((c.name, c.passed) for c in gate.checks))


def lease_expired(db: CrashDB, attempt_id: str) -> bool:
    until = db.attempt(attempt_id).lease_until
    return until is not None and datetime.now(UTC) > until


def claim_count(events: list[LeaseEvent]) -> int:
    return sum(1 for e in events if e.event in CLAIM_EVENTS)


def terminal_events(events: list[LeaseEvent]) -> list[str]:
    return [e.event for e in events if e.event in TERMINAL_EVENTS]


# ── packages built at test time ──
def write_package(root: Path, name: str, seed_sql: str) -> Path:
    """A one-migration package (``tally`` with its down file) and one seed script."""
    (root / "migrations").mkdir(parents=True, exist_ok=True)
    (root / "seed").mkdir(exist_ok=True)
    (root / "migrations" / "0001_tally.up.sql").write_text(
        "CREATE TABLE tally (id INTEGER PRIMARY KEY, label TEXT NOT NULL, n INTEGER NOT NULL);\n", encoding="utf-8")
    (root / "migrations" / "0001_tally.down.sql").write_text("DROP TABLE tally;\n", encoding="utf-8")
    (root / "seed" / "seed.sql").write_text(seed_sql, encoding="utf-8")
    (root / "fencepost-package.toml").write_text(
        f'[package]\nname = "{name}"\nversion = "1.0.0"\nmigrations_dir = "migrations"\nseed = ["seed/seed.sql"]\n',
        encoding="utf-8")
    return root


def failing_package(root: Path) -> Path:
    """Scenarios 1 and 2 pass; the seed (scenario 3, ``seed_and_verify``) fails on a missing table."""
    return write_package(root, "breaks-at-seed",
                         "INSERT INTO tally (label, n) VALUES ('one', 1);\nINSERT INTO missing_table VALUES (1);\n")


def slow_package(root: Path, rows: int = SLOW_ROWS) -> Path:
    """Scenario 3 runs about a second: a recursive CTE fills a TEMP table (invisible to the evidence)."""
    return write_package(root, "slow-seed", (
        "CREATE TEMP TABLE bulk (x INTEGER NOT NULL);\n"
        f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})\n"
        "INSERT INTO bulk (x) SELECT x FROM c;\n"
        "INSERT INTO tally (label, n) SELECT 'bulk', count(*) FROM bulk;\n"
        "DROP TABLE bulk;\n"))
