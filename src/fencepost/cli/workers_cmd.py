"""``fencepost workers``: who runs now, and which registrations stopped renewing (ADR 0019)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from fencepost.cli import render
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.outbox.registry import Backlog, census_view, read_backlog
from fencepost.store.url import DEFAULT_URL

#: ``fencepost workers --help`` (paragraphs on one line each: the help formatter keeps line breaks).
HELP = "\n\n".join([
    "List the workers running now and, apart from them, the registrations that stopped renewing.",
    "Every worker registers when it starts, renews its registration at each heartbeat (every third of its "
    "lease) and removes it when it stops. A registration is live while it was renewed within three heartbeat "
    "intervals (one lease duration), by the control store's clock.",
    "An expired registration belongs to a worker that stopped without removing it: killed, hung, or cut off "
    "from the store. The leases it held expire on their own, and live workers of the same kinds take its "
    "commands over. Expired registrations are listed until a worker that starts deletes those older than a day.",
    "Columns: the worker id (the lease owner name its commands show), host, pid, the kinds it claims, commands "
    "in flight at its last heartbeat out of its execution slots, when it started, how long ago it was last seen.",
    "Then the backlog: each kind with PENDING commands, how many, how long the oldest has waited, and whether "
    "any live worker claims that kind. A kind no live worker claims waits until one starts.",
])


def workers(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """List live workers and expired registrations (``HELP``); ``--json`` prints ``census_view`` and
    ``backlog`` (``Backlog.as_json``)."""
    with opened(database) as store, handled():
        backlog = read_backlog(store)
    data = {**census_view(backlog.census), "backlog": backlog.as_json()}
    emit(json, data, lambda: _text(data, backlog))


def _table(items: list[dict[str, Any]]) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    # Worker ids and kinds whole on any width (ids are what `fencepost workers` is read for); the rest folds.
    table.add_column("id", no_wrap=True, min_width=max((len(w["id"]) for w in items), default=2))
    table.add_column("host", overflow="fold")
    table.add_column("pid", no_wrap=True)
    # ... and so are kinds, which a fold split mid-word (a new-user trial read "host.invoke:fe" / "ncepost...")
    table.add_column("kinds", overflow="fold",
                     min_width=max((len(k) for w in items for k in w["kinds"]), default=5))
    for column in ("in flight", "started", "last seen"):
        table.add_column(column, overflow="fold")
    for w in items:
        table.add_row(w["id"], w["host"], str(w["pid"]), "\n".join(w["kinds"]) or "-",
                      f"{w['in_flight']}/{w['concurrency']}", render.when(w["started_at"]),
                      f"{render.age(w['last_seen_seconds'])} ago")
    return table


def backlog_lines(backlog: Backlog) -> list[str]:
    """One line per kind with PENDING commands, saying when no live worker claims it, and what was left out."""
    lines = []
    for b in backlog.kinds:
        n = b.live_workers_serving
        served = (f"{n} live worker{'s claim' if n != 1 else ' claims'} it" if n
                  else "[yellow]no live worker claims this kind[/yellow]")
        lines.append(f"  {escape(render.printable(b.kind))}: {b.pending} pending, the oldest for "
                     f"{render.age(b.oldest_seconds)}; {served}")
    if backlog.omitted:
        lines.append(f"  and {backlog.omitted} more kind{'s' if backlog.omitted != 1 else ''}, newer "
                     f"({backlog.pending_total} pending in all; --json lists the same)")
    return lines


def _text(data: dict[str, Any], backlog: Backlog) -> None:
    live, expired = data["live"], data["expired"]
    at = f"(store time {render.when(data['now'])})"
    if live:
        render.console.print(f"{len(live)} live worker{'s' if len(live) != 1 else ''} {at}")
        render.console.print(_table(live))
    else:
        render.console.print(f"no live worker {at}: nothing claims commands. Start one with `fencepost worker`.")
    if expired:
        render.console.print(f"{len(expired)} registration{'s' if len(expired) != 1 else ''} stopped renewing "
                             "(expired: the worker was killed, hung or lost the store; its leases expire and live "
                             "workers take its commands over)")
        render.console.print(_table(expired))
    if backlog.kinds:
        render.console.print("backlog (PENDING commands by kind):")
        for line in backlog_lines(backlog):
            render.console.print(line)
    else:
        render.console.print("backlog: nothing pending")
