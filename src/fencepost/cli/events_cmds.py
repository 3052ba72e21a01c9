"""``fencepost relay`` and ``fencepost events list|show|requeue|dead-letters|log`` (issue 15, ADR 0038, ADR 0039)."""

from __future__ import annotations

import os
import shlex
import signal
from typing import Annotated, Any

import typer

from fencepost.cli import logs, render
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, fail, handled, opened
from fencepost.cli.exit_codes import exit_code
from fencepost.cli.signals import acting_on_signals
from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, FencepostError, InvalidInput, NotFound
from fencepost.core.statuses import EventOutboxStatus
from fencepost.events.relay import DEFAULT_MAX_ATTEMPTS, Publisher, Relay, RelayConfig, default_relay_id
from fencepost.events.sinks import AmqpSink, WebhookSink, redacted
from fencepost.events.views import event_space_view, event_view
from fencepost.events.views import outbox_row_view as row_view
from fencepost.events.views import outbox_summary_view as summary_view
from fencepost.store.host_records import EventRecord, EventSpace, Subject
from fencepost.store.url import DEFAULT_URL

EVENTS_HELP = "\n\n".join([
    "Inspect the host's event publication rows (the outbox that `fencepost relay` drains) and requeue dead "
    "letters.",
    "A row is pending (waiting to be published), processing (a relay holds its lease), retry_pending (a "
    "publish failed; it is tried again from its availability, with exponential backoff), published (a sink "
    "accepted it), or dead_lettered (it failed on every attempt of its budget; its last error is kept). "
    "Rows of conformance probe spaces (event-append-probe-...) are never published.",
])

app = typer.Typer(help=EVENTS_HELP, no_args_is_help=True, add_completion=False)

RELAY_HELP = "\n\n".join([
    "Publish the host's events to a sink until stopped: claim due publication rows under fenced leases, "
    "deliver each, mark it published once the sink accepted it.",
    "Sinks: --sink webhook:https://receiver.example/events POSTs each event as JSON with the "
    "Fencepost-Event-Id header and, with --secret-env VAR, a Fencepost-Signature header "
    "(t=<unix seconds>,v1=<hex HMAC-SHA256(secret, '<t>.' + body)>); a 2xx answer is acceptance. "
    "--sink amqp://user:pass@host:5672/vhost --exchange X publishes to RabbitMQ with publisher confirms "
    "(message_id = the event id; routing key --routing-key, or the row's destination).",
    "Delivery is at least once: after a crash an event may arrive again, always with the same event id, so "
    "receivers drop ids they have processed (docs/events.md). A failure is retried with exponential backoff "
    "and jitter; the attempt that reaches --max-attempts dead-letters the row (`fencepost events "
    "dead-letters`, `fencepost events requeue ID`). Run as many relays as you like against one store.",
    "SIGTERM or Ctrl-C stops it after the event being published; the rows it claimed but had not published "
    "are given back at once. A killed relay's rows are taken over when their leases expire.",
])


def _publisher(sink: str, secret_env: str | None, exchange: str, routing_key: str | None,
               timeout: float) -> Publisher:
    if sink.startswith("webhook:"):
        url = sink.removeprefix("webhook:")
        secret = None
        if secret_env is not None:
            secret = os.environ.get(secret_env)
            if not secret:
                raise InvalidInput(f"--secret-env {secret_env}: that environment variable is unset or empty")
        try:
            return WebhookSink(url, secret=secret, timeout_seconds=timeout)
        except ValueError as error:
            raise InvalidInput(str(error)) from None
    if sink.startswith(("amqp://", "amqps://")):
        if secret_env is not None:
            raise InvalidInput("--secret-env signs webhook bodies; an AMQP sink authenticates with its URL")
        amqp = AmqpSink(sink, exchange=exchange, routing_key=routing_key, timeout_seconds=timeout)
        problem = amqp.startup_problem()  # refused now, not after every row was dead-lettered against it
        if problem is not None:
            amqp.close()
            raise InvalidInput(f"--sink {redacted(sink)}: {problem}")
        return amqp
    raise InvalidInput(f"--sink must be webhook:<http(s) URL> or amqp://...: {redacted(sink)!r}")


def relay(
    sink: Annotated[str, typer.Option("--sink", envvar="FENCEPOST_RELAY_SINK", show_envvar=True,
                                      metavar="webhook:URL|amqp://...", help="Where events go.")],
    database: DatabaseOpt = DEFAULT_URL,
    secret_env: Annotated[str | None, typer.Option(
        "--secret-env", metavar="VAR", help="Webhook: sign bodies with the secret in this environment "
                                           "variable (never on the command line).")] = None,
    exchange: Annotated[str, typer.Option("--exchange", help="AMQP: the exchange (must exist; '' is the "
                                                              "default exchange).")] = "",
    routing_key: Annotated[str | None, typer.Option(
        "--routing-key", help="AMQP: the routing key (default: each row's destination).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Rows per claim (1-1000).")] = 50,
    lease_seconds: Annotated[float, typer.Option(
        "--lease-seconds", help="Lease per claim; renewed every third of it while publishing.")] = 60.0,
    max_attempts: Annotated[int, typer.Option(
        "--max-attempts", help="Dead-letter a row when this attempt fails.")] = DEFAULT_MAX_ATTEMPTS,
    backoff_base: Annotated[float, typer.Option(
        "--backoff-base", help="Seconds before the second attempt; doubled per attempt, jittered.")] = 1.0,
    backoff_max: Annotated[float, typer.Option("--backoff-max", help="The longest retry delay, seconds.")] = 300.0,
    timeout: Annotated[float, typer.Option("--timeout", help="Per publish (HTTP request, broker confirm).")] = 10.0,
    idle_seconds: Annotated[float, typer.Option("--poll-interval", help="Wait when nothing is due.")] = 0.5,
    relay_id: Annotated[str | None, typer.Option("--relay-id", help="Lease owner name "
                                                                     "(default relay-<host>-<pid>).")] = None,
    log_format: logs.LogFormatOpt = logs.LogFormat.AUTO,
) -> None:
    """Run the event relay until stopped (``RELAY_HELP``)."""
    logs.configure(log_format)
    if timeout * 2 > lease_seconds:
        fail(InvalidInput("--timeout must be at most half of --lease-seconds (a publish must end within its lease)"))
    config = RelayConfig(owner=relay_id or default_relay_id(), batch_size=batch_size, lease_seconds=lease_seconds,
                         max_attempts=max_attempts, backoff_base_seconds=backoff_base,
                         backoff_max_seconds=backoff_max, idle_seconds=idle_seconds)
    try:
        config.validate()
    except ValueError as error:
        fail(InvalidInput(str(error)))
    with handled():
        publisher = _publisher(sink, secret_env, exchange, routing_key, timeout)
    with opened(database) as store, handled():
        runner = Relay(store, publisher, config)

        try:
            # The relay's loop waits on the event ``stop`` sets: set from the signal watcher's thread, never from
            # the handler (cli/signals.py).
            with acting_on_signals(lambda _received: runner.stop(), (signal.SIGTERM, signal.SIGINT)):
                typer.echo(f"fencepost relay {config.owner}: publishing to {redacted(sink)}", err=True)
                stats = runner.run()
        finally:
            close = getattr(publisher, "close", None)
            if close is not None:
                close()
    typer.echo(f"fencepost relay stopped: published {stats.published}, failed {stats.failed}, "
               f"dead-lettered {stats.dead_lettered}, released {stats.released}, lost {stats.lost}, "
               f"sink unreachable {stats.unavailable} time(s)", err=True)


def _rows_text(rows: list[dict[str, Any]], summary: dict[str, Any] | None, status_word: str = "") -> None:
    from rich.table import Table

    if summary is not None:
        counts = ", ".join(f"{k} {v}" for k, v in summary["counts"].items())
        age = summary["oldest_unpublished_age_seconds"]
        render.console.print(f"{counts}; backlog {summary['backlog']}"
                             + (f", oldest unpublished {render.age(age)} old" if age is not None else ""))
    if not rows:
        render.console.print(f"no {status_word} publication rows" if status_word else "no publication rows")
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    # Event ids whole on any width (an operator copies them into `events requeue`); the rest folds.
    table.add_column("event", no_wrap=True, min_width=max(len(r["event_id"]) for r in rows))
    for column in ("space", "type", "status", "attempts", "available", "last error"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r["event_id"], f"{r['tenant_id']}/{r['space_id']}", r["type"] or "-", r["status"],
                      str(r["attempts"]), render.when(r["available_at"]), (r["last_error"] or "")[:80])
    render.console.print(table)


StatusOpt = Annotated[str | None, typer.Option(
    "--status", help="Only rows of this status: pending, processing, retry_pending, published, dead_lettered.")]
LimitOpt = Annotated[int, typer.Option("--limit", help="At most this many rows (1-10000), oldest first.")]


def _status(value: str | None) -> EventOutboxStatus | None:
    if value is None:
        return None
    try:
        return EventOutboxStatus(value)
    except ValueError:
        raise InvalidInput(f"--status must be one of {', '.join(s.value for s in EventOutboxStatus)}") from None


@app.command("list")
def list_rows(database: DatabaseOpt = DEFAULT_URL, status: StatusOpt = None, limit: LimitOpt = 100,
              json: JsonOpt = False) -> None:
    """List publication rows, oldest first, with counts per status and the oldest unpublished row's age."""
    with opened(database) as store, handled():
        wanted = _status(status)
        if not 1 <= limit <= 10_000:
            raise InvalidInput("--limit must be between 1 and 10000")
        rows, summary = store.read(lambda tx: (tx.events.list_event_outbox(status=wanted, limit=limit),
                                               tx.events.summarize_event_outbox()))
    data: dict[str, Any] = {"summary": summary_view(summary), "items": [row_view(r) for r in rows]}
    emit(json, data, lambda: _rows_text(data["items"], data["summary"]))


@app.command("dead-letters")
def dead_letters(database: DatabaseOpt = DEFAULT_URL, limit: LimitOpt = 100, json: JsonOpt = False) -> None:
    """List dead-lettered rows with their last error; `fencepost events requeue ID` sends one again."""
    with opened(database) as store, handled():
        rows = store.read(lambda tx: tx.events.list_event_outbox(status=EventOutboxStatus.DEAD_LETTERED,
                                                                 limit=limit))
    data: dict[str, Any] = {"items": [row_view(r) for r in rows]}
    emit(json, data, lambda: _rows_text(data["items"], None, "dead-lettered"))


@app.command()
def show(event_id: Annotated[str, typer.Argument(help="The event id.")], database: DatabaseOpt = DEFAULT_URL,
         json: JsonOpt = False) -> None:
    """Show one event as stored and its publication row."""
    with opened(database) as store, handled():
        event, row = store.read(lambda tx: (tx.events.get_event(event_id), tx.events.get_event_outbox(event_id)))
        if event is None:
            raise NotFound(f"no event {event_id}")
    data: dict[str, Any] = {"event": event_view(event), "outbox": None if row is None else row_view(row)}

    def text() -> None:
        e = data["event"]
        render.console.print(f"event {e['id']}  {e['type']}  {e['tenant_id']}/{e['space_id']} #{e['sequence']}")
        render.console.print(f"  subject {e['subject']['subject_type']} {e['subject']['subject_id']}; occurred "
                             f"{render.when(e['occurred_at'])}")
        o = data["outbox"]
        if o is None:
            render.console.print("  no publication row (appended without the outbox)")
        else:
            render.console.print(f"  {o['status']} after {o['attempts']} attempt(s) to {o['destination']}"
                                 + (f"; last error: {o['last_error']}" if o["last_error"] else ""))

    emit(json, data, text)


@app.command()
def requeue(event_ids: Annotated[list[str] | None, typer.Argument(help="Dead-lettered event ids.")] = None,
            every: Annotated[bool, typer.Option("--all", help="Every dead letter there is (once what made the "
                                                             "sink refuse them is fixed).")] = False,
            database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Send dead letters again: each becomes pending now with a fresh attempt budget.

    Name the event ids, or give --all for every dead letter (a sink that answered with a refusal for every event,
    such as a routing key with no queue bound, dead-letters the whole backlog once its budget is spent). Each id
    is its own transaction and is reported on its own (with --json: "items" requeued, "refused" with the reason);
    --all prints a count instead of a line per event.
    A row that is not dead-lettered, or a conformance probe space's event (never published), is refused; an
    unknown id is refused as unknown. Exit 0 when every id was requeued; otherwise the exit code of the first
    refusal (3: refused, 2: unknown), after all ids were tried.
    """
    if every == bool(event_ids):
        raise typer.BadParameter("name the dead-lettered event ids, or give --all (not both)",
                                 param_hint="EVENT_IDS")
    done: list[dict[str, Any]] = []
    refused: list[tuple[str, FencepostError]] = []
    with opened(database) as store, handled():
        def requeue_one(event_id: str) -> None:
            try:
                done.append(row_view(store.transact(lambda tx: tx.events.requeue_event(event_id))))
            except (NotFound, Conflict, InvalidInput) as error:  # reported with the others, below
                refused.append((event_id, error))

        if every:
            tried: set[str] = set()
            while True:  # a page at a time; a refused row stays dead-lettered and is not tried twice
                page = [r.event_id for r in store.read(lambda tx: tx.events.list_event_outbox(
                    status=EventOutboxStatus.DEAD_LETTERED, limit=1000)) if r.event_id not in tried]
                if not page:
                    break
                for event_id in page:
                    tried.add(event_id)
                    requeue_one(event_id)
        else:
            for event_id in event_ids or []:
                requeue_one(event_id)

    def text() -> None:
        lines = ([f"requeued {len(done)} dead letter(s): pending"] if every
                 else [f"requeued {r['event_id']}: pending" for r in done])
        render.console.print("\n".join(lines + [f"not requeued {i}: {e}" for i, e in refused]), markup=False)

    emit(json, {"items": done, "refused": [{"event_id": i, "error": str(e), "exit_code": exit_code(type(e))}
                                          for i, e in refused]}, text)
    if refused:
        raise typer.Exit(exit_code(type(refused[0][1])))


#: The largest sequence a store holds (a signed 64-bit integer on both backends).
MAX_SEQUENCE = 2**63 - 1

LOG_HELP = "\n\n".join([
    "Read the event log itself, in sequence order: what the host recorded, space by space.",
    "Sequences are per (tenant, space), so a space is named with --tenant and --space; without them the log "
    "is read when the store holds exactly one space, and otherwise the spaces are listed to choose from "
    "(exit 2). --subject TYPE:ID keeps one subject's events (e.g. ActionInvocation:inv_...). Page with "
    "--after: each page ends with the sequence to pass next.",
])


def _subject(value: str | None) -> Subject | None:
    if value is None:
        return None
    subject_type, colon, subject_id = value.partition(":")
    if not colon or not subject_type or not subject_id:
        raise InvalidInput(f"--subject must be TYPE:ID, e.g. ActionInvocation:inv_123, not {value!r}")
    return Subject(subject_type, subject_id)


def _space(spaces: list[EventSpace], tenant: str | None, space: str | None) -> tuple[str, str] | None:
    """The (tenant, space) to read: the one given, or the store's only space; None when it holds no event."""
    if tenant is not None and space is not None:
        return tenant, space
    if tenant is not None or space is not None:
        raise InvalidInput("--tenant and --space name a space together: give both")
    if not spaces:
        return None
    if len(spaces) == 1:
        return spaces[0].tenant_id, spaces[0].space_id
    listed = "\n".join(f"  --tenant {shlex.quote(s.tenant_id)} --space {shlex.quote(s.space_id)}   "
                       f"({s.last_sequence} events)" for s in spaces[:20])
    more = f"\n  ... and {len(spaces) - 20} more (`fencepost events spaces` lists them)" if len(spaces) > 20 else ""
    raise InvalidInput(f"the store holds events in {len(spaces)} spaces; name one:\n{listed}{more}")


@app.command("log", help=LOG_HELP)
def log(database: DatabaseOpt = DEFAULT_URL,
        tenant: Annotated[str | None, typer.Option("--tenant", help="The space's tenant.")] = None,
        space: Annotated[str | None, typer.Option("--space", help="The space (with --tenant).")] = None,
        subject: Annotated[str | None, typer.Option(
            "--subject", metavar="TYPE:ID", help="Only this subject's events, e.g. ActionInvocation:inv_123.")] = None,
        after: Annotated[int, typer.Option("--after", metavar="SEQUENCE", min=0, max=MAX_SEQUENCE,
                                           help="Only events after this sequence (0: from the start).")] = 0,
        limit: Annotated[int, typer.Option("--limit", help="At most this many events (1-10000).")] = 100,
        json: JsonOpt = False) -> None:
    """The event log of one space in sequence order (``LOG_HELP``)."""
    with opened(database) as store, handled():
        wanted = _subject(subject)
        if not 1 <= limit <= 10_000:
            raise InvalidInput("--limit must be between 1 and 10000")
        spaces = store.read(lambda tx: tx.events.list_event_spaces(limit=10_000))
        named = _space(spaces, tenant, space)
        events: list[EventRecord] = [] if named is None else store.read(lambda tx: tx.events.list_events(
            tenant_id=named[0], space_id=named[1], subject=wanted, after=after, limit=limit))
    items = [event_view(e) for e in events]
    next_after = items[-1]["sequence"] if len(items) == limit else None
    data: dict[str, Any] = {"tenant_id": None if named is None else named[0],
                            "space_id": None if named is None else named[1],
                            "spaces": [event_space_view(s) for s in spaces], "items": items,
                            "next_after": next_after}
    emit(json, data, lambda: _log_text(data))


@app.command("spaces")
def spaces(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """List the spaces of the event log, by tenant then space, each with its last sequence (what `fencepost events
    log --tenant T --space S` reads)."""
    with opened(database) as store, handled():
        found = store.read(lambda tx: tx.events.list_event_spaces(limit=10_000))
    items = [event_space_view(s) for s in found]

    def text() -> None:
        if not items:
            render.console.print("no events yet: the host appends them as invocations change")
        for item in items:
            render.console.print(f"--tenant {shlex.quote(item['tenant_id'])} --space {shlex.quote(item['space_id'])}"
                                 f"   ({item['last_sequence']} events)", markup=False)

    emit(json, {"items": items}, text)


#: Below this terminal width, or the width its ids need whole, `events log` prints one block per event instead of
#: a table (trials found subject ids and payloads folded mid-id at 80 and at 140 columns).
LOG_TABLE_MIN_WIDTH = 120


def _log_text(data: dict[str, Any]) -> None:
    from rich.table import Table

    if data["space_id"] is None:
        render.console.print("no events yet: the host appends them as invocations change")
        return
    where = f"{data['tenant_id']}/{data['space_id']}"
    if not data["items"]:
        render.console.print(f"no events in {where} after the given sequence", markup=False)
        return
    subjects = [f"{e['subject']['subject_type']}:{e['subject']['subject_id']}" for e in data["items"]]
    # seq, the instant (19), the type and the subject whole, and room for the payload: else one block per event
    needed = (max(len(str(e["sequence"])) for e in data["items"]) + 19
              + max(len(e["type"]) for e in data["items"]) + max(len(s) for s in subjects) + 4 * 2 + 30)
    if render.console.width < max(LOG_TABLE_MIN_WIDTH, needed):  # a table would fold ids and payloads mid-word
        render.console.print(where, markup=False)
        for e in data["items"]:
            render.console.print(f"#{e['sequence']}  {render.when(e['occurred_at'])}  {e['type']}", markup=False)
            render.console.print(f"    {e['subject']['subject_type']}:{e['subject']['subject_id']}", markup=False)
            render.console.print(f"    {canonical_json(e['payload'])}", markup=False)
        if data["next_after"] is not None:
            render.console.print(f"more may follow: --after {data['next_after']}", markup=False)
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, title=where, title_justify="left")
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("occurred", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("subject", no_wrap=True)
    table.add_column("payload", overflow="fold")
    for e in data["items"]:
        payload = canonical_json(e["payload"])
        table.add_row(str(e["sequence"]), render.when(e["occurred_at"]), e["type"],
                      f"{e['subject']['subject_type']}:{e['subject']['subject_id']}",
                      payload if len(payload) <= 120 else payload[:119] + "…")
    render.console.print(table, markup=False)
    if data["next_after"] is not None:
        render.console.print(f"more may follow: --after {data['next_after']}", markup=False)
