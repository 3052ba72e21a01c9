"""``fencepost``: the command line entry point.

Exit codes: 0 success; 1 release gate blocked (or Attempt did not finish); 2 bad input or unknown id;
3 conflicting state (e.g. reconcile of an active lease); 4 schema not migrated; 5 store unavailable or a record
fails verification; 6 a start guard is false; 130 interrupted; 141 stdout's reader went away (``cli.stdio``).
Errors map to codes in ``fencepost.cli.exit_codes``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from fencepost import __version__
from fencepost.catalog.manifest import load_package
from fencepost.cli import helptext, logs, render, stdio
from fencepost.cli.audit_cmd import audit
from fencepost.cli.backup_cmd import backup
from fencepost.cli.check_store_cmd import app as check_store_app
from fencepost.cli.common import (
    DEFAULT_SANDBOX_MAX_BYTES,
    DEFAULT_SANDBOX_MAX_MEMORY,
    DatabaseOpt,
    JsonOpt,
    SandboxBytesOpt,
    SandboxMemoryOpt,
    emit,
    fail,
    handled,
    opened,
    sandbox_limits,
    unwrap_help,
)
from fencepost.cli.demo_cmd import app as demo_app
from fencepost.cli.events_cmds import RELAY_HELP, relay
from fencepost.cli.events_cmds import app as events_app
from fencepost.cli.host_cmds import app as host_app
from fencepost.cli.host_cmds import load_host
from fencepost.cli.package_cmds import app as package_app
from fencepost.cli.rehearsal_cmds import app as rehearsal_app
from fencepost.cli.seal_keys_cmd import app as seal_keys_app
from fencepost.cli.serve import serve
from fencepost.cli.signals import acting_on_signals
from fencepost.cli.target_cmds import app as target_app
from fencepost.cli.telemetry_opt import TelemetryOpt, attach_telemetry
from fencepost.cli.workers_cmd import HELP as WORKERS_HELP
from fencepost.cli.workers_cmd import workers
from fencepost.cli.workflow_cmds import app as workflow_app
from fencepost.core.errors import InvalidInput
from fencepost.delivery.service import delivery_host
from fencepost.host import Host
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.worker import IDLE_STOP_WAIT_SECONDS, INTERRUPT_WAIT_SECONDS, default_worker_id
from fencepost.rehearsal import views
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.sandbox import SandboxLimits, install_heap_limit
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.base import Store
from fencepost.store.url import DEFAULT_URL
from fencepost.workflows.coordinator import Coordinator
from fencepost.workflows.task import workflow_host

app = typer.Typer(
    help="fencepost runs side-effecting work under fenced leases and proves what happened.\n\n"
         "Start with `fencepost migrate`, then `fencepost rehearse examples/inventory`.",
    no_args_is_help=True, add_completion=False)
app.add_typer(check_store_app, name="check-store")
app.add_typer(rehearsal_app, name="rehearsal")
app.add_typer(package_app, name="package")
app.add_typer(target_app, name="target")
app.add_typer(workflow_app, name="workflow")
app.add_typer(host_app, name="host")
app.add_typer(demo_app, name="demo")
app.add_typer(events_app, name="events")
app.add_typer(seal_keys_app, name="seal-keys")
app.command()(serve)
app.command()(audit)
app.command()(backup)
app.command(help=WORKERS_HELP)(workers)
app.command(help=RELAY_HELP)(relay)

WorkDirOpt = Annotated[Path, typer.Option(
    "--work-dir", envvar="FENCEPOST_WORK_DIR", show_envvar=True,
    help="Where sandboxes and the local delivery target live.")]
LeaseOpt = Annotated[float, typer.Option(
    "--lease-seconds", envvar="FENCEPOST_LEASE_SECONDS", show_envvar=True,
    help="Lease duration in seconds (0.1-3600); heartbeat every third of it.")]
DEFAULT_WORK_DIR = Path(".fencepost")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fencepost {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False) -> None:
    """fencepost: durable, fenced execution of side-effecting work."""


@app.command()
def migrate(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Create or upgrade the control database schema (safe to run again)."""
    with opened(database, require_schema=False) as store, handled():
        applied = store.migrate()
        version = store.schema_version()
    names = [f"{m.version:04d}_{m.name}" for m in applied]
    data = {"backend": store.backend, "schema_version": version, "applied": names}
    emit(json, data, lambda: typer.echo(
        f"{store.display_url}: schema at version {version}"
        + (f" (applied {', '.join(names)})" if names else " (already current)")))


#: Deliveries of one rehearsal Attempt before it ends FAILED with its lease history (issue 10).
REHEARSAL_MAX_DELIVERIES = 5
#: Seconds one rehearsal scenario may run (``--time-limit rehearsal.attempt=SECONDS`` overrides it).
REHEARSAL_SCENARIO_TIME_LIMIT = 600.0


def build_worker(store: Store, work_dir: Path, config: WorkerConfig, keep_sandboxes: bool = False,
                 limits: SandboxLimits | None = None, host: Host | None = None) -> Worker:
    """A worker with every built-in command kind registered, each with its bounds.

    Args:
        The built-in delivery action (``fencepost.deliver``, ADR 0055) and workflow step tasks
        (``fencepost.workflow.task``, with the coordinator sweep that advances Runs, ADR 0072) are always served.
        host: a user's action host (``--app``): its ``host.invoke`` invocations are served too, with its
            recovery budget (ADR 0024), and its completion-deadline sweep runs before each claim (N13).
        The worker also sweeps the sandboxes of ended Attempts from ``work_dir`` (``AttemptHandler.sweeps``).
        limits: the disk and memory caps of every rehearsal sandbox (defaults when None). The
            process-wide heap limit is the caller's to install (``sandbox.install_heap_limit``): it is
            process state, set once by the command that owns the process.
    """
    registry = HandlerRegistry()
    handler = AttemptHandler(work_dir, keep_sandboxes=keep_sandboxes, limits=limits)
    registry.register(KIND, handler, time_limit=REHEARSAL_SCENARIO_TIME_LIMIT,
                      max_deliveries=REHEARSAL_MAX_DELIVERIES)
    delivery_host(store).register(registry)  # the built-in fencepost.deliver action (ADR 0055)
    workflows = workflow_host(store)  # workflow step tasks and the coordinator sweep (ADR 0072)
    workflows.register(registry)
    if host is not None:
        host.register(registry)
    sweeps = handler.sweeps() + [Coordinator(store, workflows).sweep()] + (host.sweeps() if host is not None else [])
    return Worker(store, registry, config, sweeps=sweeps)


def limit_sandboxes(slots: int, limits: SandboxLimits) -> None:
    """Install SQLite's process-wide heap limit for ``slots`` sandboxes at once and log the caps (ADR 0021)."""
    hard = install_heap_limit(slots, limits)
    logging.getLogger("fencepost.worker").info("sandbox caps", extra={
        "event": "sandbox_caps", "disk_bytes": limits.max_bytes, "memory_bytes": limits.max_memory,
        "value_bytes": limits.value_bytes, "process_heap_limit_bytes": hard})


def require_work_dir(path: Path) -> None:
    """Refuse to start a worker whose work directory is not usable: it would fail innocent Attempts.

    Raises:
        InvalidInput: the directory cannot be created, or a file cannot be written in it (names why).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".fencepost-probe-"):
            pass
    except OSError as error:
        # mkdir's own "File exists" would leave a reader guessing: the path is there but is not a directory.
        why = ("it exists and is not a directory" if isinstance(error, FileExistsError)
               else error.strerror or str(error))
        raise InvalidInput(f"the work directory {str(path)!r} is not usable ({why}): "
                           "give --work-dir a directory this worker can write") from None


def parse_time_limits(values: list[str]) -> dict[str, float]:
    """``["KIND=SECONDS", ...]`` as a dict.

    Raises:
        InvalidInput: a value that is not ``KIND=SECONDS`` with a positive number.
    """
    limits: dict[str, float] = {}
    for value in values:
        kind, sep, seconds = value.partition("=")
        try:
            limit = float(seconds)
        except ValueError:
            limit = -1.0
        if not sep or not kind.strip() or not 0 < limit < float("inf"):
            raise InvalidInput(f"--time-limit takes KIND=SECONDS with SECONDS above 0, not {value!r}")
        limits[kind.strip()] = limit
    return limits


class StopSignals:
    """SIGTERM and SIGINT, counted. The handler only counts: it runs on the main thread between any two
    bytecodes, possibly while that thread holds a lock (inside ``threading.Event.set`` of an earlier stop), so
    a handler that itself stopped the worker could deadlock on that lock (a burst of SIGTERMs did). The main
    thread's wait loop (``run_until_stopped``) acts on the count instead: the first signal stops the worker
    gracefully, the second interrupts it at once and calls ``exit_now``."""

    def __init__(self, exit_now: Callable[[], None]) -> None:
        self.exit_now = exit_now
        self.count = 0
        self._acted = 0

    def install(self) -> StopSignals:
        signal.signal(signal.SIGTERM, self._count)
        signal.signal(signal.SIGINT, self._count)
        return self

    def _count(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1

    def act(self, w: Worker) -> None:
        """On the main thread, outside any handler: do what the signals received so far ask for, once each."""
        if self.count >= 1 and self._acted < 1:
            self._acted = 1
            w.request_stop()
        if self.count >= 2 and self._acted < 2:
            self._acted = 2
            w.interrupt_now()
            self.exit_now()


def run_until_stopped(w: Worker, signals: StopSignals | None = None) -> None:
    """Run ``w`` on its own thread while this (main) thread only waits and acts on ``signals``: a stop then
    runs on a thread that holds none of the worker's locks, so it never deadlocks with the loop it stops."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            w.run()
        except BaseException as error:  # re-raised on the main thread below
            failure.append(error)

    # A daemon: once stopping, a loop stuck on an unreachable store (a pool waiting for a connection) must not
    # keep the process alive past its grace period and the interrupt wait; its leases then simply expire.
    thread = threading.Thread(target=body, name="fencepost-worker", daemon=True)
    thread.start()
    give_up: float | None = None
    idle_since: float | None = None
    while thread.is_alive():
        thread.join(0.1)
        if signals is not None:
            signals.act(w)
        now = time.monotonic()
        if w.stopping and give_up is None:
            give_up = now + w.config.grace_seconds + INTERRUPT_WAIT_SECONDS + 5.0
        # Nothing running: what is left is releasing unstarted claims and deregistering, which a store that
        # answers does at once. Waiting out the grace period for a handler that does not exist only kept a
        # worker on a dead store alive for 40 s after SIGTERM (a break-it trial).
        idle_since = (idle_since or now) if w.stopping and not w.in_flight else None
        if idle_since is not None and give_up is not None:
            give_up = min(give_up, idle_since + IDLE_STOP_WAIT_SECONDS)
        if give_up is not None and now > give_up and thread.is_alive():
            logging.getLogger("fencepost.worker").error(
                "the worker did not stop in time (the store is not answering); exiting, its leases will expire",
                extra={"event": "worker_abandoned"})
            return
    if failure:
        raise failure[0]


def exit_soon(code: int, seconds: float) -> Callable[[], None]:
    """A callable that makes the process exit with ``code`` once ``seconds`` pass, whatever still runs (a
    last resort after leases were released or left to expire)."""

    def arm() -> None:
        def end() -> None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

        timer = threading.Timer(seconds, end)
        timer.daemon = True
        timer.start()

    return arm


@app.command()
def worker(
    database: DatabaseOpt = DEFAULT_URL,
    work_dir: WorkDirOpt = DEFAULT_WORK_DIR,
    lease_seconds: LeaseOpt = 30.0,
    poll_interval: Annotated[float, typer.Option(envvar="FENCEPOST_POLL_INTERVAL", show_envvar=True,
                                                 help="Seconds to wait after finding no work (0.01-60).")] = 1.0,
    batch_size: Annotated[int, typer.Option(envvar="FENCEPOST_BATCH_SIZE", show_envvar=True,
                                            help="At most this many commands per claim transaction (1-1000).")] = 10,
    concurrency: Annotated[int, typer.Option(envvar="FENCEPOST_CONCURRENCY", show_envvar=True,
                                             help="Commands run at once (1-1000). A worker never claims more than "
                                                  "it can start now.")] = 1,
    grace_period: Annotated[float, typer.Option(envvar="FENCEPOST_GRACE_PERIOD", show_envvar=True,
                                                help="On SIGTERM or Ctrl-C, seconds running commands may go on "
                                                     "before they are interrupted and released (0-3600); a "
                                                     "handler that ignores the interrupt gets 5 s more.")] = 30.0,
    time_limit: Annotated[list[str] | None, typer.Option(
        "--time-limit", metavar="KIND=SECONDS",
        help="Interrupt a command of KIND after SECONDS and record that it ran over its limit (repeatable; "
             "overrides the kind's own limit). For rehearsal.attempt the limit applies to each scenario "
             "(600 s by default).")] = None,
    worker_id: Annotated[str | None, typer.Option(envvar="FENCEPOST_WORKER_ID", show_envvar=True,
                                                  help="Lease owner name (default host:pid:random).")] = None,
    # One flag, no --no- form (off is the default): the negative form widened the help's option column until
    # every description was cut at 80 columns (a new user's trial).
    keep_sandboxes: Annotated[bool, typer.Option("--keep-sandboxes",
                                                 help="Keep sandbox databases after each delivery.")] = False,
    sandbox_max_bytes: SandboxBytesOpt = DEFAULT_SANDBOX_MAX_BYTES,
    sandbox_max_memory: SandboxMemoryOpt = DEFAULT_SANDBOX_MAX_MEMORY,
    log_format: Annotated[str, typer.Option(envvar="FENCEPOST_LOG_FORMAT", show_envvar=True,
                                            help=logs.FORMAT_HELP)] = "auto",
    listen: Annotated[bool, typer.Option("--listen/--no-listen", envvar="FENCEPOST_LISTEN", show_envvar=True,
                                         help="PostgreSQL: wake at once when work is enqueued (LISTEN/NOTIFY) "
                                              "instead of sleeping out the poll interval; polling stays the "
                                              "fallback. No effect on SQLite.")] = True,
    host_app: Annotated[str | None, typer.Option(
        "--app", envvar="FENCEPOST_APP", show_envvar=True, metavar="MODULE:ATTR",
        help="Also serve the action invocations of your Host (a fencepost.host.Host, or a callable "
             "store -> Host).")] = None,
    telemetry: TelemetryOpt = "log",
) -> None:
    """Run a long-lived worker: claim commands, run them under fenced leases, heartbeat, take over.

    It serves rehearsal Attempts, deliveries to targets and workflow step tasks, and advances admitted workflow
    Runs (the coordinator sweep, before each claim).

    SIGTERM or Ctrl-C stops it gracefully: it claims nothing more, gives back what it has not started, lets
    running commands finish within --grace-period, then interrupts them: an interrupted command records
    nothing and its lease is released. A second SIGTERM or Ctrl-C skips the grace period and exits 130.

    A scenario that runs past its time limit, or whose SQL goes past the sandbox's disk or memory cap, fails
    with the limit in its evidence; a command delivered more often than its kind allows fails with its lease
    history.
    """
    if log_format not in logs.FORMATS:
        fail(InvalidInput(f"--log-format must be auto, json or text, not {log_format!r}"))
    logs.configure(log_format)
    try:  # a setting out of range is refused before the store is opened (no database is looked for)
        config = WorkerConfig(poll_interval=poll_interval, batch_size=batch_size, concurrency=concurrency,
                              lease_seconds=lease_seconds, grace_seconds=grace_period,
                              time_limits=parse_time_limits(time_limit or []),
                              worker_id=worker_id or default_worker_id(), listen=listen)
        config.validate()  # bad input leaves nothing behind, not even the work directory
        limits = sandbox_limits(sandbox_max_bytes, sandbox_max_memory)
    except InvalidInput as error:
        fail(error)
    with opened(database) as store, handled():
        require_work_dir(work_dir)
        user_host = load_host(host_app, store) if host_app else None
        attach_telemetry(user_host, telemetry)
        w = build_worker(store, work_dir, config, keep_sandboxes, limits, user_host)
        limit_sandboxes(config.concurrency, limits)
        interrupted = threading.Event()
        # After a second signal the worker stops at once; whatever still hangs gets two seconds.
        last_resort = exit_soon(130, 2.0)

        def exit_now() -> None:
            interrupted.set()
            last_resort()

        run_until_stopped(w, StopSignals(exit_now).install())
    if interrupted.is_set():
        raise typer.Exit(130)


#: The widest scenario state ``_watch`` prints (``NOT_APPLICABLE``), so the duration column stays straight.
STATE_WIDTH = len("NOT_APPLICABLE")


def _watch(service: RehearsalService, attempt_id: str, timeout: float, stop: threading.Event) -> Any:
    """Print each scenario as it finishes; return the terminal Attempt view (or the last seen on timeout or
    ``stop``). A failed Attempt's cause is printed when no scenario's failure explains it."""
    shown: set[tuple[int, int]] = set()
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
        if attempt.status.terminal:
            explained = any(((r.get("evidence") or {}).get("error") or {}).get("message") for r in view["receipts"])
            if attempt.error and not explained:
                render.console.print(f"  [red]attempt {attempt.status}[/red]: {attempt.error}")
            return view
        if time.monotonic() > deadline or stop.is_set():
            return view
        stop.wait(0.1)


@app.command()
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
        run = service.create_run_from_spec(spec)
        run_view = views.run_view(run)
        if not json:
            render.run(run_view)
        w = build_worker(store, work_dir, config, limits=limits)
        w.serve_only([])  # this worker serves this rehearsal's Attempts only, never other queued work
        install_heap_limit(config.concurrency, limits)  # no log line: rehearse prints for people
        # ... nor the in-process worker's: without a handler, Python's last resort would print each WARNING
        # record's bare message on stderr ("scenario finished" per failed scenario, which the text above shows).
        quiet = logging.NullHandler()
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
                        view = (_watch(service, attempt.id, timeout, interrupted) if not json
                                else _quiet_wait(service, attempt.id, timeout, interrupted))
                        finished.append(view)
                        if interrupted.is_set():
                            break
                        if view["status"] not in ("SUCCEEDED", "FAILED", "ABORTED"):
                            unfinished = (f"attempt {attempt.id} did not finish within {timeout:g} s (still "
                                          f"{view['status']}); it stays queued for `fencepost worker`")
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


unwrap_help(app)  # after every command is registered: the terminal wraps the help, not the source's lines


#: Click's error classes, found through typer's public ``BadParameter`` (typer may bundle its own Click).
_USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")



def main(prog_name: str | None = None) -> None:
    """The ``fencepost`` command. Arguments that are not valid UTF-8 (the shell passed raw bytes) and an
    interrupt before a command took its own signal handlers are one-line answers, never tracebacks. Its help
    is ``helptext.polish``-ed (``prog_name``: the name it shows, default from ``sys.argv``)."""
    for position, argument in enumerate(sys.argv[1:], start=1):
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            sys.stderr.write(f"fencepost: argument {position} is not valid UTF-8\n")
            raise SystemExit(2) from None
    watch = stdio.interrupts
    watch.install()
    guarded = stdio.GuardedStdout(sys.stdout)
    sys.stdout = guarded
    try:
        code = helptext.polish(typer.main.get_command(app))(prog_name=prog_name, standalone_mode=False)
    except stdio.StdoutClosed:
        # Silent, as any Unix filter is when its reader leaves (`fencepost events list | head -1`): the reader
        # got what it wanted, and a line on stderr there is noise (a new-user trial). The exit code says it.
        stdio.silence_stdout()
        raise SystemExit(stdio.STDOUT_CLOSED_EXIT) from None
    except stdio.StdoutFailed as error:
        stdio.silence_stdout()
        stdio.say(f"fencepost: cannot write to standard output: {error}; stopped")
        raise SystemExit(stdio.STDOUT_FAILED_EXIT) from None
    except _CLICK_ERROR as error:
        # A usage error (a bad option value, a missing option or argument) is one line naming the command, as
        # every other refusal is, instead of Click's usage block and a framed box (a new user's trial).
        context = getattr(error, "ctx", None)
        usage = isinstance(error, _USAGE_ERROR)
        command = context.command_path if usage and context is not None else "fencepost"
        hint = f" (see `{command} --help`)" if usage else ""
        message = " ".join(error.format_message().split())  # type: ignore[attr-defined]
        if message:  # none after a group's help shown for want of a command (``no_args_is_help``)
            sys.stderr.write(f"{command}: {message}{hint}\n")
        raise SystemExit(error.exit_code) from None  # type: ignore[attr-defined]
    except typer.Abort:
        sys.stderr.write("fencepost: interrupted\n")
        raise SystemExit(130) from None
    except KeyboardInterrupt:
        sys.stderr.write("fencepost: interrupted\n")
        raise SystemExit(130) from None
    finally:
        sys.stdout = guarded.stream
    if guarded.closed_by_reader:  # only another thread wrote after the reader left
        stdio.silence_stdout()
        raise SystemExit(stdio.STDOUT_CLOSED_EXIT)
    if code == 130 and watch.interrupted and not watch.explained:  # Typer answered it with a silent 130
        stdio.say("fencepost: interrupted")
    raise SystemExit(code if isinstance(code, int) else 0)
