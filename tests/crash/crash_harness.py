"""The SIGKILL crash harness: real ``python -m fencepost.cli`` subprocesses killed at named crash points.

A crash point (``fencepost.core.crashpoints``) sits on each side of every COMMIT: every
``store.transaction(name=...)`` fires ``<name>:before-commit`` and ``<name>:after-commit``. A process started
with ``FENCEPOST_CRASHPOINT=<name>:<side>[@n]`` SIGKILLs itself there, exactly like a power cut of the process.

This module holds everything the crash tests share:

- ``CrashDB``: one fresh control database of one backend (SQLite WAL/FULL, SQLite DELETE/FULL, or a fresh
  PostgreSQL schema reached through ``?options=-csearch_path=...`` so that subprocesses use it too);
- ``cli``/``Workers``: the real CLI and the real long-lived worker, with or without a crash point (started
  through ``helpers.processes``, which every suite shares);
- ``check_structure``: no half-applied transition (the Receipt sequence of every Attempt is one a sequence of
  whole transactions can produce) — run after every crash, next to ``fencepost audit``;
- ``Summary``: the converged outcome (statuses, semantic evidence fingerprint, gate verdict) compared with
  the crash-free reference of the same flow on the same backend.

Waits are bounded and condition-driven; nothing sleeps hoping a state was reached, except where the point
is to give a worker the chance to do something it must not do (``idle_worker``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from fencepost.core.statuses import AttemptStatus, ReceiptStatus
from fencepost.evidence.comparison import semantic_fingerprint
from fencepost.rehearsal.audit import audit as run_audit
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store, open_store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import AttemptRecord, LeaseEvent, ReceiptRecord
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.progress_audit import audit_progress
from helpers.processes import (
    CLI_TIMEOUT,
    KILLED,
    STATE_TIMEOUT,
    CliResult,
    Process,
    kill_all,
    run_cli,
    start,
    worker_args,
)
from helpers.store_backends import create_schema, drop_schema, new_schema_name, schema_url
from helpers.waiting import wait_until as _wait_until

T = TypeVar("T")

LEASE_SECONDS = 1.0        # short, so that a takeover after a crash comes quickly
POLL_SECONDS = 0.05        # worker poll interval
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
DB_FILE = "control.db"


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
def crash_db(name: str, root: Path, *, template: Path | None = None) -> Iterator[CrashDB]:
    """A fresh, migrated control database of backend ``name`` under ``root``; dropped afterwards.

    ``template`` (SQLite only): a directory holding a closed ``control.db`` of the same journal mode, copied
    instead of migrating an empty one, so that a module prepares its state once and each test starts from a
    copy. PostgreSQL ignores it (a fresh schema, migrated; the caller prepares it).
    """
    root.mkdir(parents=True, exist_ok=True)
    if name.startswith("sqlite-"):
        mode = name.removeprefix("sqlite-")
        db = CrashDB(name, f"sqlite:///{root / DB_FILE}?journal_mode={mode}&synchronous=full", root)
        if template is None:
            db.migrate()
        else:
            for suffix in ("", "-wal", "-shm"):
                if (template / f"{DB_FILE}{suffix}").exists():
                    shutil.copyfile(template / f"{DB_FILE}{suffix}", root / f"{DB_FILE}{suffix}")
        try:
            yield db
        finally:
            db.close()
        return
    if name != "postgres":
        raise ValueError(f"unknown backend {name!r}")
    schema = new_schema_name("crash")
    create_schema(schema)
    db = CrashDB(name, schema_url(schema), root, schema=schema)
    try:
        db.migrate()
        yield db
    finally:
        db.close()
        drop_schema(schema)


# ── subprocesses ──
def cli(db: CrashDB, *args: str, crash: str | None = None, timeout: float = CLI_TIMEOUT) -> CliResult:
    """Run ``fencepost ARGS -d URL``; with ``crash`` the process must die of SIGKILL at that point."""
    result = run_cli([*args, "-d", db.url], cwd=db.root, crash=crash, timeout=timeout)
    if crash is not None:
        assert result.returncode == KILLED, f"expected death by SIGKILL at {crash}\n{result.describe()}"
        assert result.stdout == "", f"a process killed before answering printed an answer\n{result.describe()}"
    else:
        assert "Traceback" not in result.stderr, result.describe()
    return result


class Workers:
    """Starts workers for one test and SIGKILLs (by pid) any it left running."""

    def __init__(self, db: CrashDB, work_dir: Path | None = None) -> None:
        self.db = db
        self.work_dir = work_dir or db.root / "work"
        self.started: list[Process] = []

    def start(self, name: str, *, crash: str | None = None, lease_seconds: float = LEASE_SECONDS,
              work_dir: Path | None = None, grace_seconds: float | None = None) -> Process:
        """A ``fencepost worker`` (batch size 1, JSON log merged with stdout into one file per worker);
        ``grace_seconds`` sets its ``--grace-period`` (the default otherwise)."""
        worker_id = f"{name}-{len(self.started)}"
        extra = [] if grace_seconds is None else ["--grace-period", f"{grace_seconds:g}"]
        args = worker_args(self.db.url, work_dir or self.work_dir, lease_seconds=lease_seconds,
                           poll_interval=POLL_SECONDS, batch_size=1, worker_id=worker_id, extra=extra)
        worker = start(args, name=name, stdout_path=self.db.root / f"worker-{len(self.started)}-{name}.log",
                       cwd=self.db.root, crash=crash, worker_id=worker_id)
        self.started.append(worker)
        return worker

    def kill_all(self) -> None:
        kill_all(self.started)


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
    """Findings of ``fencepost audit``'s checks (in-process: the store's, the admissions' audit, which
    recomputes every publication digest and installation lock, and the progress audit) plus ``check_structure``;
    empty when sound."""
    findings = run_audit(store)
    if not any(f.check == "schema" for f in findings):
        findings += audit_admissions(store) + audit_progress(store)
    return [f"{f.check}: {f.subject}: {f.detail}" for f in findings] + check_structure(store)


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
        # volatile paths or ids, and a budget verdict's count of deliveries is a delivery number.
        error = re.sub(r" \(\d+/\d+\)$", "", (a.error or "").split(":")[0])
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
