"""The worker-side handler of the ``rehearsal.attempt`` command kind.

Seed: "Heartbeat And Takeover". A delivery never resumes mid-way: its first fenced write restarts the
Attempt and discards provisional Receipts, a new sandbox is created from the frozen Run, and all six
scenarios run from the beginning. Every Receipt transition is one fenced transaction that locks the
Attempt first and renews (or finishes) the command last.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from fencepost.catalog.manifest import PackageSpec, package_from_run
from fencepost.core.errors import InvalidInput, LeaseLost
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.evidence.receipts import seal
from fencepost.evidence.sealing import SealKeys, just_created, load_seal_keys, remove_created
from fencepost.outbox.context import CommandContext, EnvironmentFailed, Interrupt, StopRequested, TimeLimitExceeded
from fencepost.outbox.handlers import DeliveryBudget
from fencepost.outbox.history import lease_history
from fencepost.outbox.worker import Sweep
from fencepost.rehearsal.sandbox import Sandbox, SandboxEnvironmentError, SandboxLimitExceeded, SandboxLimits
from fencepost.rehearsal.scenarios import SCENARIOS, ScenarioEnv, ScenarioFailed
from fencepost.rehearsal.target import LocalFileTarget
from fencepost.store.base import Store
from fencepost.store.ports import FencedUnit
from fencepost.store.records import AttemptRecord

KIND = "rehearsal.attempt"
#: The budget verdict's evidence message (the Attempt's error adds the counts: ``... (n/max)``).
BUDGET_EXHAUSTED = "delivery budget exhausted"
log = logging.getLogger("fencepost.rehearsal")


def _require(ok: bool, what: str) -> None:
    # A conditional write that matched nothing means the Attempt changed under us (abort, takeover):
    # treat it as a lost lease so the whole transaction rolls back and the work stops.
    if not ok:
        raise LeaseLost(f"rehearsal state changed under the lease: {what}")


def discard_stale_sandboxes(attempt_dir: Path, delivery: int) -> None:
    """Delete sandboxes that earlier deliveries of this Attempt left behind on this machine (a killed
    worker never cleans up). Safe: a delivery older than ours has lost its lease, so even a worker that is
    merely frozen can persist nothing from its sandbox."""
    if not attempt_dir.is_dir():
        return
    for child in attempt_dir.iterdir():
        number = child.name[1:].split("-", 1)[0]
        if child.name.startswith("d") and number.isdigit() and int(number) < delivery:
            shutil.rmtree(child, ignore_errors=True)


#: Seconds between two sweeps of the sandboxes of ended Attempts on one worker.
SANDBOX_SWEEP_INTERVAL_SECONDS = 10.0


def sweep_ended_sandboxes(store: Store, work_dir: Path, budget_seconds: float) -> int:
    """Remove ``<work_dir>/sandboxes/<attempt>`` of every Attempt that has ended (issue 11 item 8).

    A worker killed mid-delivery leaves its sandbox behind; ``discard_stale_sandboxes`` removes it when the
    Attempt is delivered again, but an Attempt aborted (or failed by its budget elsewhere) is never delivered
    again, so without this its files stayed on disk for ever. Only Attempts this store knows and has ended are
    swept: a directory naming an Attempt the store does not know (another database sharing the work
    directory) or one still open is left alone.

    Args:
        budget_seconds: stop after about this long (the rest waits for the next sweep).
    Returns:
        The number of Attempt directories removed.
    """
    root = work_dir / "sandboxes"
    if not root.is_dir():
        return 0
    deadline = time.monotonic() + budget_seconds
    removed = 0
    for child in sorted(root.iterdir()):
        if time.monotonic() > deadline:
            break
        if not child.is_dir() or not child.name.startswith("att_"):
            continue
        attempt = _attempt(store, child.name)
        if attempt is not None and attempt.status.terminal:
            shutil.rmtree(child, ignore_errors=True)
            removed += not child.exists()
    return removed


def _attempt(store: Store, attempt_id: str) -> AttemptRecord | None:
    return store.read(lambda tx: tx.rehearsal.get_attempt(attempt_id))


def check_seal_keys(store: Store, keys: SealKeys | None = None) -> None:
    """Before a process seals Receipts on ``store``: whether its seal keys include the one the control database's
    last sealed Receipt names (ADR 0064; a new-user trial scaled out to a second machine without the key file).

    A process whose key file was just created (it found none, or one made moments ago by a process starting beside
    it: ``just_created``) while that Receipt names another key is a machine that was not given the keys: what it
    sealed would verify nowhere else and block those rehearsals' gates. It is refused, and the file is removed by
    the process that created it, so that its next start does not take that key for a configured one. A process
    whose configured keys lack that key only gets a warning: the key may have been retired on purpose, and what
    it seals verifies wherever its own keys are.

    Args:
        keys: the process's seal keys (``load_seal_keys()`` when None).
    Raises:
        InvalidInput: the key file was just made (``just_created``) and the store's Receipts use another key.
    """
    keys = load_seal_keys() if keys is None else keys
    latest = store.read(lambda tx: tx.rehearsal.latest_seal_key_id())
    if latest is None or latest in keys.keys:
        return
    if just_created(keys):
        removed = remove_created(keys)  # only its creator removes it; a sibling that read it is refused too
        raise InvalidInput(
            f"this machine had no seal keys, so a new key file was made at {keys.source}; but the Receipts of "
            f"this control database are sealed with key {latest!r}, which it lacks, so what it sealed would "
            "verify nowhere else. "
            + ("The new file was removed. " if removed else "It was made moments ago, by a process starting "
               "beside this one, which removes it. ")
            + "Give this machine the same keys as the others (copy their key file and set "
            "FENCEPOST_SEAL_KEY_FILE, or set FENCEPOST_SEAL_KEYS) and start again (docs/operations.md, Sealed "
            "evidence and its keys)")
    log.warning("seal keys lack the key of the latest sealed Receipt", extra={
        "event": "seal_key_missing", "key_id": latest, "source": keys.source, "active": keys.active,
        "detail": "Receipts it seals use its own active key; Receipts sealed with the missing key are "
                  "unverifiable here (docs/operations.md, Sealed evidence and its keys)"})


class AttemptHandler:
    """Runs the six scenarios of one Attempt.

    Args:
        work_dir: where sandboxes live (``<work_dir>/sandboxes/<attempt>/d<delivery>-<rand>``).
        target: the external delivery target.
        keep_sandboxes: keep sandbox files after the delivery ends (for debugging).
        limits: the disk and memory caps of every sandbox (``SandboxLimits``; its defaults when None).
        seal_keys: the keys Receipts are sealed with (ADR 0064). None: the configured ones
            (``load_seal_keys``), loaded now, so a worker with no usable key refuses to start, and again at each
            seal, so a rotated key file is used without a restart.
    Raises:
        InvalidInput: no usable seal key (the key file cannot be created or read, or the variable is malformed).
    """

    def __init__(self, work_dir: Path, target: LocalFileTarget | None = None, keep_sandboxes: bool = False,
                 limits: SandboxLimits | None = None, seal_keys: SealKeys | None = None) -> None:
        if seal_keys is None:
            load_seal_keys()
        self.seal_keys = seal_keys
        self.work_dir = work_dir
        self.target = target or LocalFileTarget(work_dir / "target")
        self.keep_sandboxes = keep_sandboxes
        self.limits = limits or SandboxLimits()
        self.limits.validate()

    def sweeps(self) -> list[Sweep]:
        """The housekeeping a worker running this handler does before it claims: remove the sandboxes of
        ended Attempts (``sweep_ended_sandboxes``), unless ``keep_sandboxes`` asked to keep them."""
        if self.keep_sandboxes:
            return []
        return [Sweep(name="rehearsal.sandboxes", interval_seconds=SANDBOX_SWEEP_INTERVAL_SECONDS,
                      run=lambda store, budget: sweep_ended_sandboxes(store, self.work_dir, budget))]

    def handle(self, ctx: CommandContext) -> None:
        attempt_id = str(ctx.command.payload["attempt_id"])
        delivery = ctx.delivery

        def start(tx: FencedUnit) -> str | None:
            tx.rehearsal.lock_attempt(attempt_id)
            run_id = tx.rehearsal.start_attempt(attempt_id)
            if run_id is not None:
                _require(tx.rehearsal.receipt_running(attempt_id, 1), "receipt 1 not PENDING after reset")
            return run_id

        run_id = ctx.fenced(start, name="rehearsal.start")
        if run_id is None:
            raise RuntimeError(f"Attempt {attempt_id} is already terminal while its command is still open")
        run, files = ctx.store.read(lambda tx: (tx.rehearsal.get_run(run_id), tx.rehearsal.run_files(run_id)))
        assert run is not None
        package = package_from_run(run.manifest, files)
        attempt_dir = self.work_dir / "sandboxes" / attempt_id
        discard_stale_sandboxes(attempt_dir, delivery)
        try:
            sandbox = Sandbox(attempt_dir / f"d{delivery}-{secrets.token_hex(4)}", package.functions,
                              ctx.should_interrupt, self.limits)
        except OSError as error:
            # The worker's machine, not the package: a full disk, an I/O error, a work directory that stopped
            # being usable after start-up (`fencepost worker` checks it then). No verdict is invented; the lease
            # is left to expire and another worker takes the Attempt over (docs/operations.md, Bounds). A
            # trial's full disk sealed the Attempt FAILED and blocked the gate.
            raise EnvironmentFailed(f"the worker could not create a sandbox: {error.strerror}") from None
        try:
            self._scenarios(ctx, attempt_id, package, sandbox)
        finally:
            if self.keep_sandboxes:
                sandbox.close()
            else:
                sandbox.destroy()

    def _scenarios(self, ctx: CommandContext, attempt_id: str, package: PackageSpec, sandbox: Sandbox) -> None:
        delivery = ctx.delivery
        env = ScenarioEnv(package=package, sandbox=sandbox, target=self.target, attempt_id=attempt_id)
        sandbox_id = "sbx_" + secrets.token_hex(8)
        last = len(SCENARIOS)
        for position, (code, scenario) in enumerate(SCENARIOS, start=1):
            _check_stop(ctx)
            ctx.start()  # a rehearsal's time limit is per scenario (issue 10): each gets the whole limit
            env.extras = {}
            started = time.monotonic()
            error: str | None = None
            # The cap the scenario went past, if any: a definite outcome, recorded with the cap (ADR 0021).
            limit: dict[str, Any] | None = None
            try:
                result = scenario(env)
                status = ReceiptStatus.SUCCEEDED
            except ScenarioFailed as failure:
                result, error, status, limit = failure.result, failure.message, ReceiptStatus.FAILED, failure.limit
            except (sqlite3.Error, MemoryError) as failure:  # e.g. while fingerprinting tables
                verdict = sandbox.judge(failure)
                if isinstance(verdict, SandboxEnvironmentError):
                    raise verdict from None
                if not isinstance(verdict, SandboxLimitExceeded):
                    raise
                result, error, status, limit = {}, str(verdict), ReceiptStatus.FAILED, verdict.limit
            ctx.pause()  # recording the scenario (and waiting on the store for it) is not the scenario's time
            # Lost while the scenario ran (abort, takeover), or interrupted by a stop: stop here, claim no
            # outcome, log no success. An interrupted statement then is not a scenario failure either.
            _check_stop(ctx)
            if ctx.interrupted is Interrupt.TIME_LIMIT and ctx.time_limit is not None:
                # Over its time limit: a definite outcome of the work, recorded with the limit (issue 10).
                status, error = ReceiptStatus.FAILED, str(TimeLimitExceeded(ctx.time_limit))
                limit = {"time_seconds": ctx.time_limit}
            evidence: dict[str, Any] = {
                "scenario": code, "position": position, "status": str(status),
                "package": {"name": package.name, "version": package.version,
                            "content_digest": package.content_digest},
                "result": result,
                "execution": {"worker": ctx.lease.owner, "delivery": delivery, "attempt_id": attempt_id,
                              "duration_ms": round((time.monotonic() - started) * 1000, 3)},
                "sandbox": {"id": sandbox_id},
            }
            if error is not None:
                evidence["error"] = {"message": error}
            if limit is not None:
                evidence["limit"] = limit
            evidence.update(env.extras)
            text, fp = seal(evidence, self.seal_keys)
            if status is ReceiptStatus.FAILED:
                self._fail(ctx, attempt_id, position, text, fp, f"scenario {code} failed: {error}")
            elif position == last:
                self._succeed(ctx, attempt_id, position, text, fp)
            else:
                self._advance(ctx, attempt_id, position, text, fp)
            # Logged once its Receipt is stored: a trial read "SUCCEEDED" in the log for a Receipt that a store
            # which had stopped answering never kept (its row stayed RUNNING).
            log.log(logging.INFO if error is None else logging.WARNING, "scenario finished", extra={
                "event": "scenario_finished", "attempt_id": attempt_id, "scenario": code, "position": position,
                "status": str(status), "delivery": delivery, **({"error": error} if error is not None else {})})
            if status is ReceiptStatus.FAILED or position == last:
                return

    def _advance(self, ctx: CommandContext, attempt_id: str, position: int, text: str, fp: str) -> None:
        def unit(tx: FencedUnit) -> None:
            tx.rehearsal.lock_attempt(attempt_id)
            _require(tx.rehearsal.receipt_finish(attempt_id, position, ReceiptStatus.SUCCEEDED, text, fp),
                     f"receipt {position} not RUNNING")
            _require(tx.rehearsal.receipt_running(attempt_id, position + 1), f"receipt {position + 1} not PENDING")

        ctx.fenced(unit, name="rehearsal.receipt")

    def _succeed(self, ctx: CommandContext, attempt_id: str, position: int, text: str, fp: str) -> None:
        def unit(tx: FencedUnit) -> None:
            tx.rehearsal.lock_attempt(attempt_id)
            _require(tx.rehearsal.receipt_finish(attempt_id, position, ReceiptStatus.SUCCEEDED, text, fp),
                     f"receipt {position} not RUNNING")
            _require(tx.rehearsal.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED), "attempt not RUNNING")

        ctx.fenced(unit, name="rehearsal.succeed", finish=CommandStatus.DELIVERED)

    def _fail(self, ctx: CommandContext, attempt_id: str, position: int, text: str, fp: str, error: str) -> None:
        def unit(tx: FencedUnit) -> None:
            tx.rehearsal.lock_attempt(attempt_id)
            _require(tx.rehearsal.receipt_finish(attempt_id, position, ReceiptStatus.FAILED, text, fp),
                     f"receipt {position} not RUNNING")
            tx.rehearsal.abort_open_receipts(attempt_id)
            _require(tx.rehearsal.finish_attempt(attempt_id, AttemptStatus.FAILED, error), "attempt not RUNNING")

        ctx.fenced(unit, name="rehearsal.fail", finish=CommandStatus.FAILED, error=error)

    def on_failure(self, tx: FencedUnit, ctx: CommandContext, error: str) -> None:
        """An unexpected handler error fails the Attempt with the command (open Receipts become ABORTED)."""
        attempt_id = str(ctx.command.payload["attempt_id"])
        tx.rehearsal.lock_attempt(attempt_id)
        tx.rehearsal.abort_open_receipts(attempt_id)
        tx.rehearsal.finish_attempt(attempt_id, AttemptStatus.FAILED, error)

    def on_budget_exhausted(self, tx: FencedUnit, ctx: CommandContext, budget: DeliveryBudget) -> None:
        """The budget verdict, with the lease history as sealed evidence (issue 10, ADR 0021).

        In the worker's fenced unit that fails the command: like every delivery, this one restarts the
        Attempt (the last delivery's provisional Receipts are discarded, what they had reached is kept in the
        evidence), then seals Receipt 1 FAILED with ``error`` = ``budget.error``, ``budget`` ``{"deliveries",
        "max"}``, ``lease_history`` (``outbox.history.lease_history``) and ``last_progress``, aborts the
        other Receipts and fails the Attempt with ``budget.error``. Receipt 1, because a Receipt is only ever
        sealed by the delivery that started it and a FAILED Receipt follows only SUCCEEDED ones (the audit's
        sequence rule).
        """
        attempt_id = str(ctx.command.payload["attempt_id"])
        tx.rehearsal.lock_attempt(attempt_id)
        attempt = tx.rehearsal.get_attempt(attempt_id)
        before = tx.rehearsal.attempt_receipts(attempt_id)
        history = lease_history(tx.outbox.lease_events(ctx.command.id))
        for entry in history:
            if entry["delivery"] == ctx.delivery:  # this delivery: the fenced finish below ends it FAILED
                entry["ended"], entry["ended_at"] = "failed", tx.now().isoformat().replace("+00:00", "Z")
        run_id = tx.rehearsal.start_attempt(attempt_id)
        run = tx.rehearsal.get_run(run_id) if run_id is not None else None
        if attempt is None or run is None:  # already terminal while its command is open: fail it plainly
            self.on_failure(tx, ctx, budget.error)
            return
        progress = None
        if attempt.delivery > 0:
            progress = {"delivery": attempt.delivery,
                        "succeeded": [r.scenario for r in before
                                      if r.status is ReceiptStatus.SUCCEEDED and r.delivery == attempt.delivery],
                        "running": next((r.scenario for r in before if r.status is ReceiptStatus.RUNNING
                                         and r.delivery == attempt.delivery), None)}
        code = SCENARIOS[0][0]
        evidence: dict[str, Any] = {
            "scenario": code, "position": 1, "status": str(ReceiptStatus.FAILED),
            "package": {"name": run.package_name, "version": run.package_version,
                        "content_digest": run.content_digest},
            "result": {"ran": False, "reason": "the delivery budget is exhausted: the Attempt is not run again"},
            "execution": {"worker": ctx.lease.owner, "delivery": ctx.delivery, "attempt_id": attempt_id},
            # The counts are in "budget": a crash right before this verdict commits spends one more delivery,
            # and the verdict's meaning (the package was not judged) must not differ with it.
            "error": {"message": BUDGET_EXHAUSTED},
            "budget": {"deliveries": budget.deliveries, "max": budget.max_deliveries},
            "lease_history": history,
            "last_progress": progress,
        }
        text, fp = seal(evidence, self.seal_keys)
        _require(tx.rehearsal.receipt_running(attempt_id, 1), "receipt 1 not PENDING after reset")
        _require(tx.rehearsal.receipt_finish(attempt_id, 1, ReceiptStatus.FAILED, text, fp), "receipt 1 not RUNNING")
        tx.rehearsal.abort_open_receipts(attempt_id)
        _require(tx.rehearsal.finish_attempt(attempt_id, AttemptStatus.FAILED, budget.error), "attempt not RUNNING")


def _check_stop(ctx: CommandContext) -> None:
    """Raise ``LeaseLost`` when fenced out, ``StopRequested`` when a stop interrupted the Attempt."""
    ctx.check_lease()
    if ctx.interrupted is Interrupt.STOP:
        raise StopRequested()

