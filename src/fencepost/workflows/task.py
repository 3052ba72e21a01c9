"""A workflow step's task as a host action, ``fencepost.workflow.task`` v1 (ADRs 0073, 0074).

The start barrier (``fencepost.workflows.progress``) submits one invocation per step attempt. Its params name the
Run, the StepRun and the version the barrier started, the task and its digest, the target and the deadline.

- The **handler** runs in the invocation's fenced control-store transaction. It locks the Run and, while the task
  never reached its target (no adapter row exists yet), refuses to start it when the Run carries a cancel intent
  (guard ``run_cancelled``: the step ends ``cancelled``) or the deadline has passed (guard ``task_deadline``: the
  step ends ``timed_out``). Once the adapter row exists the task may have run, so a later cancel lets it finish.
- The one step ``run`` calls ``TaskAdapter``: the task's SQL, read from the frozen files of the publication's
  rehearsal and checked against its digest, runs against the Run's target in ONE target transaction with a row in
  the target's ``fencepost_workflow_tasks`` ledger, keyed by the step's ``adapter_invocation_id``. A re-run after
  a crash on either side of the target COMMIT finds the row (the task is not run twice) or finds nothing applied,
  so the action is idempotent for the host. SQLite's progress handler interrupts the task at its deadline: the
  transaction rolls back and the step ends ``timed_out`` (a definite outcome: nothing was applied).

``task_verdict`` maps the invocation's verdict onto the StepRun: ``succeeded``; ``failed`` (``timed_out`` or
``cancelled`` when the refusal or the interruption says so); ``reconciliation_required`` is ``lost``, awaiting
an operator, and an operator's resolution of it is the step's verdict.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import threading
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fencepost.catalog.lifecycle import not_allowed
from fencepost.catalog.manifest import PackageSpec, package_from_run
from fencepost.catalog.script_control import manages_own_transaction, split_statements
from fencepost.catalog.sql_guard import REFUSAL, deny_escapes, is_refusal, package_sql
from fencepost.core.clock import to_iso
from fencepost.core.crashpoints import crashpoint
from fencepost.core.errors import InvalidInput
from fencepost.core.fingerprint import sha256_bytes
from fencepost.core.statuses import InvocationStatus, StepRunStatus
from fencepost.delivery import target_db
from fencepost.delivery.action import TARGET_RETRY as DELIVERY_TARGET_RETRY
from fencepost.delivery.lock import checksum_of, rehearsal_run_of
from fencepost.delivery.target_db import TargetBusy, TargetMissing
from fencepost.delivery.urls import target_path
from fencepost.host import Host, HostConfig
from fencepost.host.action import Action, AdapterStep, HandlerContext, StepInputContext
from fencepost.host.adapter import AdapterCall, PermanentFailure, Succeeded, TransientFailure
from fencepost.host.outcome import describe_error
from fencepost.rehearsal.host_functions import resolve
from fencepost.rehearsal.sandbox import register_host_functions
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.workflow_records import PublicationRecord, RunState, StepRunRow, TaskOutcome
from fencepost.workflows.frontier import Verdict

TASK_ACTION_ID = "fencepost.workflow.task"
TASK_ACTION_VERSION = 1
ADAPTER_TYPE = "fencepost.workflow_target"
#: Seconds a step may run from its start barrier when its task declares no ``timeout_seconds``.
DEFAULT_TIMEOUT_SECONDS = 300
#: The target's ledger of task runs (delivery's drift check and fingerprint leave it out).
TASK_LEDGER = target_db.TASK_LEDGER_TABLE
#: Rows of a task's last result set kept in its output (the rest are counted).
SAMPLE_ROWS = 20
#: The task action's one adapter step.
RUN_STEP = "run"
#: Markers in a failure's text that say which StepRun verdict it is (the host stores the text as the error).
TIMED_OUT_MARK = "[task_timed_out]"
CANCELLED_MARK = "guard run_cancelled"
DEADLINE_MARK = "guard task_deadline"
#: Where the host writes them (``fencepost.host.execution``): a definite failure of the adapter step is stored as
#: ``step run failed: <reason>`` (the adapter puts ``TIMED_OUT_MARK`` first in its reason), the handler's refusal
#: as ``handler: NotAllowed: not allowed by guard <name>: ...``. A marker counts only at the start of the text: a
#: task's own SQL error (``no such table: [task_timed_out]``) may quote any words, further on.
_TIMED_OUT_PREFIXES = (f"step {RUN_STEP} failed: {TIMED_OUT_MARK}",
                       f"handler: {describe_error(not_allowed('task_deadline', ''))}")
_CANCELLED_PREFIX = f"handler: {describe_error(not_allowed('run_cancelled', ''))}"
#: A locked target (another step's task, a delivery) is retried within the step: about a minute of waiting in all
#: (a target runs one writer at a time, so the tasks of a wide fan-out queue on it), as deliveries do.
TARGET_RETRY = DELIVERY_TARGET_RETRY

_LEDGER_DDL = (f'CREATE TABLE IF NOT EXISTS "{TASK_LEDGER}" (adapter_invocation_id TEXT PRIMARY KEY, '
               "run_id TEXT NOT NULL, step_key TEXT NOT NULL, task TEXT NOT NULL, task_digest TEXT NOT NULL, "
               "result TEXT NOT NULL, applied_at TEXT NOT NULL)")


class TaskParams(BaseModel):
    """One step attempt's task; every field derives from the Run, the StepRun version started and the target."""

    model_config = ConfigDict(extra="forbid")
    run_id: str = Field(min_length=1, max_length=100)
    step_run_id: str = Field(min_length=1, max_length=100)
    step_key: str = Field(min_length=1, max_length=64)
    step_fence: int = Field(ge=2)
    attempt: int = Field(ge=1, le=64)
    package: str = Field(min_length=1, max_length=100)
    version: str = Field(min_length=1, max_length=64)
    publication_id: str = Field(min_length=1, max_length=100)
    task: str = Field(min_length=1, max_length=64)
    task_digest: str = Field(min_length=71, max_length=71)
    target: str = Field(min_length=1, max_length=100)
    target_id: str = Field(min_length=1, max_length=100)
    target_url: str = Field(min_length=1, max_length=2000)
    timeout_seconds: int = Field(ge=1, le=86400)
    deadline_at: str = Field(min_length=20, max_length=40)


def timeout_of(definition: dict[str, Any], task_id: str) -> int:
    """The declared ``timeout_seconds`` of ``task_id`` in a publication definition, else the default."""
    task = definition.get("tasks", {}).get(task_id)
    value = task.get("timeout_seconds") if isinstance(task, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_TIMEOUT_SECONDS


def task_params(*, run: RunState, step: StepRunRow, step_fence: int, attempt: int, publication: PublicationRecord,
                target: TargetRecord, timeout_seconds: int, deadline_at: datetime) -> dict[str, Any]:
    """The params of a step attempt's task invocation (validated by ``TaskParams`` at submission)."""
    return {"run_id": run.id, "step_run_id": step.id, "step_key": step.step_key, "step_fence": step_fence,
            "attempt": attempt, "package": publication.package_name, "version": publication.version,
            "publication_id": publication.id, "task": step.task_id, "task_digest": step.task_digest,
            "target": target.name, "target_id": target.id, "target_url": target.url,
            "timeout_seconds": timeout_seconds, "deadline_at": to_iso(deadline_at)}


def task_verdict(outcome: TaskOutcome) -> Verdict | None:
    """The StepRun verdict of a task invocation's status and error, or None while it has none."""
    error = (outcome.error or "")[:1000] or None
    if outcome.status == InvocationStatus.SUCCEEDED:
        return Verdict(StepRunStatus.SUCCEEDED, None)
    if outcome.status == InvocationStatus.FAILED:
        text = error or ""
        if text.startswith(_TIMED_OUT_PREFIXES):
            return Verdict(StepRunStatus.TIMED_OUT, error)
        if text.startswith(_CANCELLED_PREFIX):
            return Verdict(StepRunStatus.CANCELLED, error)
        return Verdict(StepRunStatus.FAILED, error)
    if outcome.status == InvocationStatus.RECONCILIATION_REQUIRED:
        return Verdict(StepRunStatus.LOST, error)
    return None


def _deadline(params: TaskParams) -> datetime:
    return datetime.fromisoformat(params.deadline_at.replace("Z", "+00:00"))


def start_check(ctx: HandlerContext, params: TaskParams) -> dict[str, Any]:
    """The task's own start check, in the invocation's control-store transaction (module docstring).

    Raises:
        NotAllowed: ``run_cancelled`` (the Run carries a cancel intent) or ``task_deadline`` (the deadline passed),
            only while no adapter row of this invocation exists (the task never reached its target).
    """
    tx = ctx.tx
    tx.progress.lock_run(params.run_id)
    if tx.host.list_adapter_invocations(ctx.invocation_id):
        return {"start": "resumed"}  # the task may have reached its target: it finishes
    run = tx.progress.get_run(params.run_id)
    if run is not None and run.cancel_requested_at is not None:
        raise not_allowed("run_cancelled", f"run {params.run_id} was cancelled before step {params.step_key} "
                                           f"started ({run.cancel_reason}); nothing ran on the target")
    if tx.now() >= _deadline(params):
        raise not_allowed("task_deadline", f"step {params.step_key} reached its {params.timeout_seconds} s "
                                           "deadline before its task started; nothing ran on the target")
    return {"start": "checked"}


def _input(ctx: StepInputContext, params: TaskParams) -> dict[str, Any]:
    return params.model_dump(mode="json")


TASK = Action(id=TASK_ACTION_ID, version=TASK_ACTION_VERSION, params=TaskParams, handler=start_check,
              idempotent=True,
              steps=(AdapterStep(RUN_STEP, ADAPTER_TYPE, "run_task", input=_input, retry=TARGET_RETRY),))


class TaskAdapter:
    """Runs a workflow task's SQL against its target database (``type`` ``fencepost.workflow_target``).

    Args:
        store: the control store, to read the frozen task SQL of the publication's rehearsal Run.
        busy_timeout: seconds a target connection waits for another writer before the step is retried.
    """

    type = ADAPTER_TYPE
    vendor = "sqlite"

    def __init__(self, store: Store, *, busy_timeout: float = target_db.DEFAULT_BUSY_TIMEOUT) -> None:
        self.store = store
        self.busy_timeout = busy_timeout
        self._packages: dict[str, PackageSpec] = {}
        self._lock = threading.Lock()

    def _package(self, publication_id: str) -> PackageSpec:
        """The frozen package of a publication (cached: a publication's content never changes)."""
        with self._lock:
            found = self._packages.get(publication_id)
        if found is None:
            def read(tx: Any) -> PackageSpec:
                publication = tx.catalog.get_publication(publication_id)
                if publication is None:
                    raise InvalidInput(f"publication {publication_id} is gone")
                run = rehearsal_run_of(tx, publication)
                return package_from_run(run.manifest, tx.rehearsal.run_files(run.id))
            found = self.store.read(read)
            with self._lock:
                self._packages[publication_id] = found
        return found

    def execute(self, call: AdapterCall) -> object:
        """Run the task once (module docstring); never raises for a target's answer."""
        params = TaskParams.model_validate(call.input)
        name = params.target
        # The deadline is on the control store's clock (the barrier and the start check read it there too). A
        # deadline already past is reported by ``_run`` only after the target's ledger said the task never ran:
        # a re-run after a crash past the target COMMIT must replay its result, not claim nothing was applied.
        remaining = (_deadline(params) - self.store.read(lambda tx: tx.now())).total_seconds()
        deadline = time.monotonic() + remaining  # fixed now: a worker frozen from here on gets no extra time
        try:
            package = self._package(params.publication_id)
            entry = next((t for t in package.tasks if t.id == params.task), None)
            if entry is None or entry.digest != params.task_digest:
                return PermanentFailure(f"task {params.task} of {params.package} {params.version} does not match "
                                        f"the step's digest {params.task_digest}; nothing was applied")
            sql = package.sql(entry.source)
            if sha256_bytes(sql.encode("utf-8")) != params.task_digest:
                return PermanentFailure(f"the frozen source of task {params.task} does not match its digest")
            if manages_own_transaction(sql):
                return PermanentFailure(f"task {params.task} manages its own transaction; a workflow task runs in "
                                        "one fenced target transaction, so it was not run")
            path = target_path(params.target_url)
            with target_db.connect(name, path, busy_timeout=self.busy_timeout) as conn:
                register_host_functions(conn, resolve(package.functions))
                deny_escapes(conn)
                return self._run(conn, call.adapter_invocation_id, params, package, sql, deadline)
        except TargetMissing as error:  # the target was not reached: nothing sent now (ADR 0113)
            return PermanentFailure(str(error), sent=False)
        except InvalidInput as error:
            return PermanentFailure(f"{error}; nothing was applied")
        except TargetBusy as error:
            return TransientFailure(str(error))
        except sqlite3.Error as error:
            if target_db._busy(error):
                return TransientFailure(f"target {name} is locked: {error}; nothing was applied")
            return PermanentFailure(f"target {name}: {error}; nothing was applied")

    def _run(self, conn: sqlite3.Connection, adapter_id: str, params: TaskParams, package: PackageSpec, sql: str,
             deadline: float) -> object:
        """The task's one target transaction. The ledger is read first: a task an earlier run applied is reported
        applied whatever has changed since (the deadline passed, the target moved on to another version)."""
        name = params.target
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if target_db._busy(error):
                return TransientFailure(f"target {name} is locked by another connection; nothing was applied")
            raise
        try:
            conn.execute(_LEDGER_DDL)
            row = conn.execute(f'SELECT result FROM "{TASK_LEDGER}" WHERE adapter_invocation_id = ?',
                               (adapter_id,)).fetchone()
            if row is not None:
                conn.execute("COMMIT")
                return Succeeded({**json.loads(row[0]), "replayed": True})
            if time.monotonic() >= deadline:
                _rollback(conn)
                return PermanentFailure(f"{TIMED_OUT_MARK} step {params.step_key} reached its "
                                        f"{params.timeout_seconds} s deadline before its task ran; nothing was applied")
            problem = _version_problem(conn, params, package)
            if problem is not None:
                _rollback(conn)
                return PermanentFailure(problem)
            conn.set_progress_handler(lambda: 1 if time.monotonic() >= deadline else 0, 1000)
            try:
                with package_sql(conn):  # the task's SQL may not write this ledger (ADR 0102)
                    result = _statements(conn, sql)
            except sqlite3.DatabaseError as error:
                if not is_refusal(error):
                    raise
                _rollback(conn)
                return PermanentFailure(f"task {params.task} of step {params.step_key} was refused on target {name}: "
                                        f"{REFUSAL}; rolled back, nothing was applied")
            finally:
                conn.set_progress_handler(None, 0)
            problem = _non_finite(result)
            if problem is not None:  # the step's result is JSON: it could never be recorded, so nothing commits
                _rollback(conn)
                return PermanentFailure(f"task {params.task} of step {params.step_key} returned {problem}, which "
                                        "its result (JSON) cannot hold; rolled back, nothing was applied")
            text = json.dumps(result, sort_keys=True, separators=(",", ":"), allow_nan=False)
            conn.execute(f'INSERT INTO "{TASK_LEDGER}" (adapter_invocation_id, run_id, step_key, task, task_digest, '
                         "result, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (adapter_id, params.run_id, params.step_key, params.task, params.task_digest, text,
                          datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")))
            crashpoint(f"workflow.task:{params.step_key}:before-commit")
            conn.execute("COMMIT")
            crashpoint(f"workflow.task:{params.step_key}:after-commit")
            return Succeeded({**result, "replayed": False})
        except sqlite3.OperationalError as error:
            _rollback(conn)
            if "interrupted" in str(error):
                return PermanentFailure(f"{TIMED_OUT_MARK} task {params.task} of step {params.step_key} passed its "
                                        f"{params.timeout_seconds} s deadline on target {name} and was interrupted; "
                                        "rolled back, nothing was applied")
            if target_db._busy(error):
                return TransientFailure(f"target {name} is locked: {error}; rolled back, nothing was applied")
            return PermanentFailure(f"task {params.task} failed on target {name}: {error}; rolled back, nothing "
                                    "was applied")
        except sqlite3.Error as error:
            _rollback(conn)
            return PermanentFailure(f"task {params.task} failed on target {name}: {error}; rolled back, nothing "
                                    "was applied")


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _version_problem(conn: sqlite3.Connection, params: TaskParams, package: PackageSpec) -> str | None:
    """Why the target cannot run a task of ``package`` (``params.version``), or None.

    The target qualifies when every migration of that version is in its ledger, applied, with the version's
    checksum. The ledger names the version that *applied* each migration, so a version that adds no migration
    (a patch of task SQL only) is recognised by its migrations, not by its version string.
    """
    rows = {r.migration: r for r in target_db.ledger_rows(conn, params.package)}
    wanted = {m.id: checksum_of(package.files[m.up]) for m in package.migrations}
    if not rows and wanted:
        return (f"target {params.target} has no delivery of {params.package} in its ledger; deliver "
                f"{params.package} {params.version} to it first (nothing was applied)")
    unfinished = [mid for mid, r in rows.items() if r.state != "applied"]
    if unfinished:
        return (f"target {params.target} has migrations of {params.package} started and never marked applied "
                f"({', '.join(unfinished)}); resolve its delivery first (nothing was applied)")
    changed = [mid for mid, checksum in wanted.items() if mid in rows and rows[mid].checksum != checksum]
    if changed:
        return (f"target {params.target} has migrations of {params.package} whose checksum differs from "
                f"{params.version}'s ({', '.join(changed)}): migrated outside fencepost or changed after delivery; "
                "resolve its delivery first (nothing was applied)")
    missing = [mid for mid in wanted if mid not in rows]
    if missing:
        held = ", ".join(sorted({r.version for r in rows.values()}))
        return (f"target {params.target} holds {params.package} at {held}, without {params.version}'s migrations "
                f"{', '.join(missing)}; deliver {params.version} to it first (nothing was applied)")
    return None


def _non_finite(result: dict[str, Any]) -> str | None:
    """The first infinite or NaN number in the sample of ``_statements``' result, named by its column and row, or
    None (every other value of the result is an int, text or None)."""
    columns: list[str] = result["columns"]
    for index, row in enumerate(result["sample"]):
        for column, value in zip(columns, row, strict=True):
            if isinstance(value, float) and not math.isfinite(value):
                return f"a non-finite number ({value}) in column {column!r} of result row {index + 1}"
    return None


def _statements(conn: sqlite3.Connection, sql: str) -> dict[str, Any]:
    """Run each statement of ``sql``; the result counts rows and keeps a sample of the last result set."""
    statements = 0
    rows_seen = 0
    columns: list[str] = []
    sample: list[list[Any]] = []
    before = conn.total_changes
    for _offset, statement in split_statements(sql):
        cursor = conn.execute(statement)
        statements += 1
        if cursor.description is None:
            continue
        columns = [d[0] for d in cursor.description]
        sample = []
        for row in cursor:
            rows_seen += 1
            if len(sample) < SAMPLE_ROWS:
                sample.append([v if isinstance(v, int | float | str) or v is None else repr(v) for v in row])
    return {"statements": statements, "rows": rows_seen, "changes": conn.total_changes - before,
            "columns": columns, "sample": sample}


def workflow_host(store: Store, config: HostConfig | None = None) -> Host:
    """The built-in host of ``fencepost.workflow.task``: the action and its target adapter, over ``store``."""
    return Host(store, actions=[TASK], adapters=[TaskAdapter(store)], config=config)
