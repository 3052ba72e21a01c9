"""``fencepost serve``: the HTTP API, the operator pages and (unless ``--no-worker``) an in-process worker pool."""

from __future__ import annotations

import importlib
import ipaddress
import logging
import os
import re
import secrets
import signal
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fencepost.cli import logs
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
from fencepost.cli.telemetry_opt import TelemetryOpt
from fencepost.core.errors import InvalidInput
from fencepost.outbox import Worker, WorkerConfig
from fencepost.outbox.worker import (
    HURRIED_INTERRUPT_WAIT_SECONDS,
    IDLE_STOP_WAIT_SECONDS,
    INTERRUPT_WAIT_SECONDS,
    default_worker_id,
)
from fencepost.store.url import DEFAULT_URL

if TYPE_CHECKING:
    from fencepost.api.completions import CompletionProvider

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as error:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class _DropColor(logging.Filter):
    """uvicorn adds a ``color_message`` field with ANSI escapes; our formatters print every field."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.__dict__.pop("color_message", None)
        return True


def _configure_logging(log_format: str) -> None:
    logs.configure(log_format)
    fencepost_handlers = logging.getLogger("fencepost").handlers
    for handler in fencepost_handlers:
        handler.addFilter(_DropColor())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = list(fencepost_handlers) if name == "uvicorn" else []
        logger.propagate = name != "uvicorn"
        logger.setLevel(logging.INFO)


#: The attribute of the ``--app`` module that may name a completion parser per provider (ADR 0036).
PARSERS_ATTRIBUTE = "COMPLETION_PARSERS"


def completion_providers(app_spec: str | None, specs: list[str], environ: Mapping[str, str]
                         ) -> dict[str, CompletionProvider]:
    """The providers of ``--completion-secret PROVIDER=ENV_VAR`` (repeatable; a provider named twice accepts
    both secrets, for a rotation), each with the parser its ``--app`` module's ``COMPLETION_PARSERS`` names, else
    the JSON one.

    Raises:
        InvalidInput: a malformed spec, secrets without ``--app``, an unset, empty or short variable (named, its
            value never shown), a ``COMPLETION_PARSERS`` that is not a mapping of parsers, or one naming a
            provider without a secret.
    """
    from fencepost.api.completions import MIN_SECRET, CompletionProvider
    from fencepost.host.webhooks import JSON_PARSER

    secrets: dict[str, list[str]] = {}
    for spec in specs:
        provider, sep, variable = spec.partition("=")
        if not sep or not provider or not variable or len(provider) > 100:
            raise InvalidInput(f"--completion-secret is PROVIDER=ENV_VAR, not {spec!r}")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", provider):  # it is a path segment of the endpoint
            raise InvalidInput(f"--completion-secret {provider!r}: a provider is letters, digits, '.', '_' and '-'")
        value = environ.get(variable)
        if value is None or len(value.strip()) < MIN_SECRET:
            state = ("not set" if value is None else "empty" if not value
                     else f"shorter than {MIN_SECRET} characters (not counting blanks)")
            raise InvalidInput(f"--completion-secret {provider}: environment variable {variable} is {state}")
        secrets.setdefault(provider, []).append(value)
    if secrets and not app_spec:
        raise InvalidInput("--completion-secret needs --app: completions settle that host's invocations")
    parsers: Any = {}
    if app_spec:
        module = importlib.import_module(app_spec.partition(":")[0])  # load_host imported it already
        parsers = getattr(module, PARSERS_ATTRIBUTE, {})
    if not isinstance(parsers, Mapping):
        raise InvalidInput(f"--app: {PARSERS_ATTRIBUTE} must map a provider name to a parser")
    for name, parser in parsers.items():
        if name not in secrets:
            raise InvalidInput(f"--app: {PARSERS_ATTRIBUTE} names {name!r}, which has no --completion-secret")
        if not callable(getattr(parser, "parse", None)):
            raise InvalidInput(f"--app: {PARSERS_ATTRIBUTE}[{name!r}] has no parse(body, headers) method")
    return {name: CompletionProvider(tuple(values), parsers.get(name, JSON_PARSER))
            for name, values in secrets.items()}


def _stop_pool(pool: list[Worker], threads: list[threading.Thread], grace_seconds: float) -> None:
    """Stop the in-process workers once the server stopped taking requests: running commands get
    ``grace_seconds`` to finish (a restart should not turn every call in flight into operator work, as a stop
    with no grace did: a new-user trial), then are interrupted with nothing recorded and their leases released.
    A further SIGTERM or Ctrl-C interrupts them at once. The handler only counts (it takes no lock; the loop
    below acts on the count)."""
    received = [0]

    def count(signum: int, frame: FrameType | None) -> None:
        received[0] += 1

    signal.signal(signal.SIGTERM, count)
    signal.signal(signal.SIGINT, count)
    for w in pool:
        w.request_stop(grace_seconds)
    running = sum(w.in_flight for w in pool)
    if running and grace_seconds > 0:
        typer.echo(f"fencepost: stopping: {running} running command(s) get up to {grace_seconds:g} s to finish "
                   "(Ctrl-C again to interrupt them now)", err=True)
    deadline = time.monotonic() + grace_seconds + INTERRUPT_WAIT_SECONDS + 2
    hurried = False
    idle_since: float | None = None
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        for t in threads:
            t.join(timeout=0.05)
        # Nothing running: what is left is releasing claims and deregistering, which a store that answers does at
        # once; on a store that does not, the leases expire (as `fencepost worker` does; a verification trial).
        now = time.monotonic()
        idle_since = (idle_since or now) if not any(w.in_flight for w in pool) else None
        if idle_since is not None:
            deadline = min(deadline, idle_since + IDLE_STOP_WAIT_SECONDS)
        if received[0] and not hurried:
            hurried = True
            for w in pool:
                w.interrupt_now()
            deadline = min(deadline, time.monotonic() + HURRIED_INTERRUPT_WAIT_SECONDS + 2)


def serve(
    database: DatabaseOpt = DEFAULT_URL,
    host: Annotated[str, typer.Option(envvar="FENCEPOST_HOST", show_envvar=True,
                                      help="Address to listen on. Reads are open without a token only on "
                                           "loopback.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="FENCEPOST_PORT", show_envvar=True, min=0, max=65535,
                                      help="Port to listen on (0 picks a free one).")] = 8080,
    no_worker: Annotated[bool, typer.Option("--no-worker", help="Serve only; run `fencepost worker` "
                                                                "elsewhere.")] = False,
    workers: Annotated[int, typer.Option(envvar="FENCEPOST_WORKERS", show_envvar=True, min=1, max=32,
                                         help="In-process worker threads.")] = 1,
    work_dir: Annotated[Path, typer.Option("--work-dir", envvar="FENCEPOST_WORK_DIR", show_envvar=True,
                                           help="Where sandboxes and the local delivery target live.")]
        = Path(".fencepost"),
    lease_seconds: Annotated[float, typer.Option("--lease-seconds", envvar="FENCEPOST_LEASE_SECONDS",
                                                 show_envvar=True, help="Lease duration of the in-process workers "
                                                                        "(0.1-3600).")] = 30.0,
    api_token: Annotated[str | None, typer.Option(envvar="FENCEPOST_API_TOKEN", show_envvar=True,
                                                  help="Bearer token for mutating requests (default: generated "
                                                       "and printed once).")] = None,
    log_format: logs.LogFormatOpt = logs.LogFormat.AUTO,
    sandbox_max_bytes: SandboxBytesOpt = DEFAULT_SANDBOX_MAX_BYTES,
    sandbox_max_memory: SandboxMemoryOpt = DEFAULT_SANDBOX_MAX_MEMORY,
    host_app: Annotated[str | None, typer.Option(
        "--app", envvar="FENCEPOST_APP", show_envvar=True, metavar="MODULE:ATTR",
        help="Your Host (a fencepost.host.Host, or a callable store -> Host): the in-process workers serve its "
             "invocations, and completions settle them. The module may define COMPLETION_PARSERS = "
             "{provider: parser} for vendor-shaped webhooks.")] = None,
    completion_secret: Annotated[list[str] | None, typer.Option(
        "--completion-secret", metavar="PROVIDER=ENV_VAR",
        help="Accept POST /v1/host/completions/PROVIDER signed with the secret in environment variable ENV_VAR "
             "(read from the environment, never given here; 16+ characters). Repeatable; name a provider twice "
             "to accept two secrets while rotating. Needs --app.")] = None,
    signature_window: Annotated[float, typer.Option(
        "--signature-window", envvar="FENCEPOST_SIGNATURE_WINDOW", show_envvar=True, min=1, max=3600,
        help="Seconds a completion's signed timestamp may be from this server's clock, either way "
             "(1-3600).")] = 300.0,
    grace_period: Annotated[float, typer.Option(
        "--grace-period", envvar="FENCEPOST_GRACE_PERIOD", show_envvar=True, min=0, max=3600,
        help="On SIGTERM or Ctrl-C, once the server stopped taking requests, seconds the in-process workers' "
             "running commands may go on before they are interrupted and released (0-3600; a second signal "
             "interrupts them at once). An interrupted host call that may have reached its provider ends "
             "reconciliation_required.")] = 30.0,
    telemetry: TelemetryOpt = "log",
) -> None:
    """Serve the HTTP API and the operator pages; run Attempts with an in-process worker pool.

    Open the printed address in a browser. Actions (create, start, reconcile, abort) need the API token;
    paste it into the page's token field. With --app and --completion-secret, providers post their signed
    completions to /v1/host/completions/PROVIDER (docs/api.md). SIGINT or SIGTERM stops the server, then the
    workers: a running command gets --grace-period to finish, then is interrupted, records nothing, and its
    lease is released (a second signal interrupts at once).
    """
    import uvicorn

    from fencepost.api import create_app
    from fencepost.cli.host_cmds import load_host
    from fencepost.cli.telemetry_opt import attach_telemetry
    from fencepost.cli.worker_cmd import build_worker, limit_sandboxes, require_work_dir
    from fencepost.host.prometheus import PrometheusTelemetry

    if api_token is not None and len(api_token) < 16:
        fail(InvalidInput("the API token must be at least 16 characters"))
    _configure_logging(log_format)
    with opened(database) as store, handled():
        limits = sandbox_limits(sandbox_max_bytes, sandbox_max_memory)
        user_host = load_host(host_app, store) if host_app else None
        attach_telemetry(user_host, telemetry)
        metrics = PrometheusTelemetry()  # GET /metrics: the same telemetry, for those who scrape (ADR 0047)
        if user_host is not None:
            user_host.add_telemetry(metrics)
        providers = completion_providers(host_app, completion_secret or [], os.environ)
        if user_host is not None and providers:
            vendors = {adapter.vendor for adapter in user_host.runtime.adapters.values()}
            unknown = sorted(set(providers) - vendors)
            if unknown:  # a typo would otherwise answer every real webhook 401, visible only in the log
                raise InvalidInput(f"--completion-secret names {', '.join(unknown)}, which is no adapter's vendor in "
                                   f"--app (vendors: {', '.join(sorted(vendors)) or 'none'})")
        pool: list[Worker] = []
        if not no_worker:
            for _ in range(workers):
                config = WorkerConfig(lease_seconds=lease_seconds, worker_id=default_worker_id())
                require_work_dir(work_dir)
                pool.append(build_worker(store, work_dir, config, limits=limits, host=user_host))
            limit_sandboxes(workers, limits)

        def wake() -> None:
            for w in pool:
                w.wake()

        token = api_token or secrets.token_urlsafe(24)
        loopback = is_loopback(host)
        app = create_app(store, api_token=token, open_reads=loopback, on_work=wake,
                         allowed_hosts=["127.0.0.1", "localhost", "::1", "[::1]"] if loopback else None,
                         host=user_host, completion_providers=providers, signature_window_seconds=signature_window,
                         metrics=metrics, access_log=True)
        sock = _bind(host, port)
        bound_port = sock.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        threads = [threading.Thread(target=w.run, name=f"fencepost-worker-{i}", daemon=True)
                   for i, w in enumerate(pool)]
        for t in threads:
            t.start()
        typer.echo(f"fencepost: serving on http://{shown}:{bound_port}/ "
                   f"({len(pool)} worker thread{'s' if len(pool) != 1 else ''}; {store.display_url})")
        if api_token is None:
            typer.echo(f"fencepost: API token (shown once; paste it into the page): {token}")
        if not loopback:
            typer.echo("fencepost: not on loopback: reads need the token too", err=True)
        server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                               timeout_graceful_shutdown=5))

        def stop_workers(signum: int, frame: FrameType | None) -> None:
            # uvicorn handles the signal itself, then re-raises it after its shutdown with the handlers it found:
            # this one, so the process goes on to the ``finally`` below, which stops the workers, instead of
            # dying with their leases held. It does nothing itself: a handler that took a lock could deadlock
            # with the main thread it interrupted (StopSignals in cli/worker_cmd.py).
            return None

        signal.signal(signal.SIGTERM, stop_workers)
        signal.signal(signal.SIGINT, stop_workers)
        try:
            server.run(sockets=[sock])
        finally:
            _stop_pool(pool, threads, grace_period)
            sock.close()
