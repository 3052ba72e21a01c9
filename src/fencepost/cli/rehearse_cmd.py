"""``fencepost rehearse``: the main job in one command. Freeze a package as a rehearsal, run its Attempts with an
in-process worker while showing each scenario, then print the comparison and the release gate."""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Annotated, Any

import typer
from rich.markup import escape

from fencepost.catalog.manifest import load_package
from fencepost.cli import render
from fencepost.cli.common import (
    DEFAULT_SANDBOX_MAX_BYTES,
    DEFAULT_SANDBOX_MAX_MEMORY,
    DatabaseOpt,
    JsonOpt,
    SandboxBytesOpt,
    SandboxMemoryOpt,
    emit,
    handled,
    opened,
    sandbox_limits,
)
from fencepost.cli.signals import acting_on_signals
from fencepost.cli.worker_cmd import DEFAULT_WORK_DIR, LeaseOpt, WorkDirOpt, build_worker, exit_soon, require_work_dir
from fencepost.outbox import WorkerConfig
from fencepost.rehearsal import views
from fencepost.rehearsal.sandbox import install_heap_limit
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.url import DEFAULT_URL

#: The widest scenario state ``_watch`` prints (``NOT_APPLICABLE``), so the duration column stays straight.
STATE_WIDTH = len("NOT_APPLICABLE")


class _Abandonments(logging.Handler):
    """Keeps what the in-process worker abandoned to its lease and why (``command_abandoned``: the store stopped
    answering, or the machine failed: a full disk, a work directory that cannot be written). Nothing else of
    the worker's log is shown: rehearse prints for people."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == "command_abandoned":
            self.reasons.append(str(getattr(record, "error", record.getMessage())))


def _watch(service: RehearsalService, attempt_id: str, timeout: float, stop: threading.Event,
           abandoned: _Abandonments | None = None) -> Any:
    """Print each scenario as it finishes; return the terminal Attempt view (or the last seen on timeout or
    ``stop``). A failed Attempt's cause is printed when no scenario's failure explains it, and so is each
    delivery the worker abandoned to its lease (no verdict: it is retried when the lease expires)."""
    shown: set[tuple[int, int]] = set()
    told = len(abandoned.reasons) if abandoned is not None else 0
    delivery_seen = 0
    deadline = time.monotonic() + timeout
    while True:
        attempt = service.attempt(attempt_id)
        receipts = service.receipts(attempt_id)
        if attempt.delivery_count > 1 and attempt.delivery_count != delivery_seen and attempt.delivery > 1:
            render.console.print(f"  [yellow]takeover[/yellow]: delivery {attempt.delivery_count} replays all six "
                                 "scenarios in a new sandbox")
        delivery_seen = max(delivery_seen, attempt.delivery_count)
        view = views.attempt_view(attempt, receipts, evidence=True)
        for r in view["receipts"]:
            key = (r["position"], r["delivery"] or 0)
            if r["status"] in ("SUCCEEDED", "FAILED", "ABORTED") and key not in shown:
                shown.add(key)
                ms = ((r.get("evidence") or {}).get("execution") or {}).get("duration_ms")
                took = f"{ms:>9.1f} ms" if isinstance(ms, (int, float)) else ""
                pad = " " * max(0, STATE_WIDTH - len(r["state"]))  # the durations line up under NOT_APPLICABLE too
                state = render.styled(r["state"]) + pad
                render.console.print(f"  [{r['position']}/6] {r['scenario']:<22} {state}{took}")
                if r.get("not_applicable_reason"):
                    render.console.print(f"        not applicable: {r['not_applicable_reason']}")
                elif r.get("partial"):
                    render.console.print(f"        {r['partial']}")
                failure = ((r.get("evidence") or {}).get("error") or {}).get("message")
                if failure:
                    render.console.print(f"        {failure}")
        while abandoned is not None and told < len(abandoned.reasons):
            render.console.print(f"  [yellow]not run[/yellow]: {escape(render.printable(abandoned.reasons[told]))}; "
                                 "nothing was recorded, and a worker retries it once its lease expires (each "
                                 "such delivery counts against the delivery budget)")
            told += 1
        if attempt.status.terminal:
            explained = any(((r.get("evidence") or {}).get("error") or {}).get("message") for r in view["receipts"])
            if attempt.error and not explained:
                render.console.print(f"  [red]attempt {attempt.status}[/red]: {attempt.error}")
            return view
        if time.monotonic() > deadline or stop.is_set():
            return view
        stop.wait(0.1)


def rehearse(
    package_dir: Annotated[str, typer.Argument(help="Plugin package directory (see docs/package-format.md).")],
    database: DatabaseOpt = DEFAULT_URL,
    work_dir: WorkDirOpt = DEFAULT_WORK_DIR,
    attempts: Annotated[int, typer.Option(help="Attempts to run; the second and later are compared with the "
                                               "previous successful one.", min=1, max=20)] = 2,
    lease_seconds: LeaseOpt = 30.0,
    timeout: Annotated[float, typer.Option(help="Give up waiting for an Attempt after this many seconds.",
                                           min=0.1)] = 600.0,
    sandbox_max_bytes: SandboxBytesOpt = DEFAULT_SANDBOX_MAX_BYTES,
    sandbox_max_memory: SandboxMemoryOpt = DEFAULT_SANDBOX_MAX_MEMORY,
    json: JsonOpt = False,
) -> None:
    """The main job: freeze PACKAGE_DIR as a rehearsal, run its Attempts with an in-process worker while
    showing each scenario, then print the comparison and the release gate.

    Exit 0 when the gate passes, 1 when it is blocked, 2 for bad input.
    """
    with opened(database) as store, handled():
        service = RehearsalService(store)
        spec = load_package(package_dir)
        config = WorkerConfig(poll_interval=0.05, batch_size=1, lease_seconds=lease_seconds)
        config.validate()  # every input is checked before the Run is written: bad input leaves no rows
        limits = sandbox_limits(sandbox_max_bytes, sandbox_max_memory)
        require_work_dir(work_dir)
        # Before the Run is written: a machine without the store's seal keys is refused leaving nothing behind.
        w = build_worker(store, work_dir, config, limits=limits)
        run = service.create_run_from_spec(spec)
        run_view = views.run_view(run)
        if not json:
            render.run(run_view)
        w.serve_only([])  # this worker serves this rehearsal's Attempts only, never other queued work
        install_heap_limit(config.concurrency, limits)  # no log line: rehearse prints for people
        # ... nor the in-process worker's: without a handler, Python's last resort would print each WARNING
        # record's bare message on stderr ("scenario finished" per failed scenario, which the text above shows).
        quiet = _Abandonments()
        logging.getLogger("fencepost").addHandler(quiet)
        thread = threading.Thread(target=w.run, name="fencepost-worker", daemon=True)
        thread.start()
        finished = []
        unfinished: str | None = None  # why rehearse stopped waiting: exit 1, like a blocked gate
        interrupted = threading.Event()

        def stop(received: int) -> None:
            # rehearse is interactive: Ctrl-C interrupts at once (nothing is recorded, the lease is released).
            # On the signal watcher's thread (cli/signals.py): never inside the main thread's locks.
            if received == 1:
                exit_soon(130, 2.0)()  # first, so that nothing below can keep the process alive
                interrupted.set()
                w.interrupt_now()

        try:
            with acting_on_signals(stop, (signal.SIGINT, signal.SIGTERM)):
                try:
                    for _ in range(attempts):
                        if interrupted.is_set():
                            break
                        attempt = service.enqueue_attempt(run.id)
                        w.serve_only([attempt.command_id])
                        w.wake()
                        if not json:
                            render.console.print(f"attempt #{attempt.seq} {attempt.id} enqueued")
                        view = (_watch(service, attempt.id, timeout, interrupted, quiet) if not json
                                else _quiet_wait(service, attempt.id, timeout, interrupted))
                        finished.append(view)
                        if interrupted.is_set():
                            break
                        if view["status"] not in ("SUCCEEDED", "FAILED", "ABORTED"):
                            unfinished = (f"attempt {attempt.id} did not finish within {timeout:g} s (still "
                                          f"{view['status']}); it stays queued for `fencepost worker`")
                            if quiet.reasons:
                                unfinished += f"; its last delivery was not run: {render.printable(quiet.reasons[-1])}"
                            break
                finally:
                    w.request_stop(0.0)  # nothing of ours is left running: nothing to wait for
                    thread.join(timeout=lease_seconds + 5)
        finally:
            logging.getLogger("fencepost").removeHandler(quiet)
        if interrupted.is_set():
            # Read after the worker stopped: a unit already committing when the signal came has committed.
            last = service.attempt(finished[-1]["id"]) if finished else None
            if last is not None and last.status.terminal:
                typer.echo(f"fencepost: interrupted after attempt {last.id} ended {last.status}", err=True)
            else:
                typer.echo("fencepost: interrupted: the running scenario recorded nothing and the lease was "
                           "released; the Attempt stays queued and the next worker replays it from its first "
                           "scenario", err=True)
            raise typer.Exit(130)
        if unfinished is not None:
            # A CLI outcome, not a domain error: no FencepostError, so no row in the API's table (ADR 0016).
            typer.echo(f"fencepost: {unfinished}", err=True)
            raise typer.Exit(1)
        comparison = views.comparison_view(service.compare(run.id))
        gate = views.gate_view(service.gate(run.id))
    data = {"rehearsal": run_view, "attempts": finished, "comparison": comparison, "gate": gate}

    def text() -> None:
        render.comparison(comparison)
        render.gate(gate)

    emit(json, data, text)
    if not gate["passed"]:
        raise typer.Exit(1)


def _quiet_wait(service: RehearsalService, attempt_id: str, timeout: float, stop: threading.Event) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        attempt = service.attempt(attempt_id)
        if attempt.status.terminal or time.monotonic() > deadline or stop.is_set():
            return views.attempt_view(attempt, service.receipts(attempt_id))
        stop.wait(0.1)
