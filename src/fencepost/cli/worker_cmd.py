"""``fencepost worker``: a long-lived worker serving every built-in command kind (and a user's action host),
with its bounds, its stop signals and its last-resort exit; ``build_worker`` is what ``serve`` and the tests
run in-process."""

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
from typing import Annotated

import typer

from fencepost.cli import logs, stdio
from fencepost.cli.common import (
    DEFAULT_SANDBOX_MAX_BYTES,
    DEFAULT_SANDBOX_MAX_MEMORY,
    DatabaseOpt,
    SandboxBytesOpt,
    SandboxMemoryOpt,
    fail,
    handled,
    opened,
    sandbox_limits,
)
from fencepost.cli.host_cmds import load_host
from fencepost.cli.telemetry_opt import TelemetryOpt, attach_telemetry
from fencepost.core.errors import InvalidInput
from fencepost.delivery.service import delivery_host
from fencepost.host import Host
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.outbox.worker import IDLE_STOP_WAIT_SECONDS, INTERRUPT_WAIT_SECONDS, default_worker_id
from fencepost.rehearsal.handler import KIND, AttemptHandler, check_seal_keys
from fencepost.rehearsal.sandbox import SandboxLimits, install_heap_limit
from fencepost.store.base import Store
from fencepost.store.url import DEFAULT_URL
from fencepost.workflows.coordinator import Coordinator
from fencepost.workflows.task import workflow_host

WorkDirOpt = Annotated[Path, typer.Option(
    "--work-dir", envvar="FENCEPOST_WORK_DIR", show_envvar=True,
    help="Where sandboxes and the local delivery target live.")]
LeaseOpt = Annotated[float, typer.Option(
    "--lease-seconds", envvar="FENCEPOST_LEASE_SECONDS", show_envvar=True,
    help="Lease duration in seconds (0.1-3600); heartbeat every third of it.")]
DEFAULT_WORK_DIR = Path(".fencepost")


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
    Raises:
        InvalidInput: no usable seal key, or a key file this process just created while the store's Receipts
            are sealed with another key (``check_seal_keys``).
    """
    registry = HandlerRegistry()
    handler = AttemptHandler(work_dir, keep_sandboxes=keep_sandboxes, limits=limits)
    check_seal_keys(store)  # a machine not given the seal keys is refused before it seals anything
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
        # A SIGINT that came while the process started (a background job, where it was ignored until now) is
        # acted on as one that comes now.
        self.count += stdio.interrupts.take_ignored()
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
    log_format: logs.LogFormatOpt = logs.LogFormat.AUTO,
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
