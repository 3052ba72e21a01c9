"""Following a workflow Run from the command line: ``workflow run`` and ``workflow status --watch`` (ADR 0072).

``follow`` polls ``views.run_view`` (one control-store read per poll) until the Run is terminal, ``timeout``
seconds pass or ``stop`` is set (SIGINT). It only reads: following never advances, starts or cancels anything;
the workers' coordinator sweep does that. Its output follows ADR 0069's rule for live displays: on a terminal a
rich ``Live`` table of the steps (status, attempts, reason) redrawn in place; elsewhere (a pipe, a log, CI) one
line per step transition, so a log reads as the Run's history. While no live ``fencepost worker`` serves the
step task kind it says so at once (and again when one appears), as ``package install --wait`` does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fencepost.cli import render
from fencepost.host.handler import kind_of
from fencepost.store.base import Store
from fencepost.workflows.task import TASK_ACTION_ID, TASK_ACTION_VERSION
from fencepost.workflows.views import run_view

#: The outbox kind a worker must serve to run step tasks (``host.kind_of``); ``fencepost worker`` serves it.
TASK_KIND = kind_of(TASK_ACTION_ID, TASK_ACTION_VERSION)
#: Seconds between two checks of the worker registry while following (a registry read per check).
WORKER_CHECK_SECONDS = 2.0

_STEP_STYLE = {"waiting": "dim", "ready": "blue", "running": "cyan", "lost": "yellow", "succeeded": "green",
               "failed": "red", "skipped": "yellow", "cancelled": "yellow", "timed_out": "red",
               "timed out": "red"}


@dataclass(frozen=True)
class Followed:
    """How following ended. ``view``: the Run as last read (``run_view``). ``why``: ``settled`` (terminal),
    ``timeout`` (still running when ``timeout`` ran out) or ``interrupted`` (``stop`` was set)."""

    view: dict[str, Any]
    why: str


def worker_serves_tasks(store: Store) -> bool:
    """Whether a live worker in the registry (``tx.workers``, the store's clock) serves ``TASK_KIND``."""
    workers, now = store.read(lambda tx: (tx.workers.list_workers(), tx.now()))
    return any(w.is_live(now) and w.serves(TASK_KIND) for w in workers)


def styled(status: str) -> str:
    """``status`` in its colour (rich markup)."""
    style = _STEP_STYLE.get(status)
    return f"[{style}]{status}[/{style}]" if style else status


def shown(text: object) -> str:
    """Stored text (a cancel reason, a task's error, a name) as rich markup that prints it literally:
    ``render.printable`` (an escape code or a newline is shown as ``\\x1b``, ``\\n``, never acted on: a reason
    redrew the screen and forged a line of ``workflow status``, a trial), then markup-escaped."""
    return escape(render.printable(str(text)))


def one_line(text: str | None, width: int = 160) -> str:
    """``text`` on one line, at most ``width`` characters (an error can be a multi-line SQL message), with the
    characters a terminal would act on written as escapes (``render.printable``); not markup-escaped."""
    flat = render.printable(" ".join((text or "").split()))
    return flat if len(flat) <= width else flat[:width - 3] + "..."


def step_line(step: dict[str, Any]) -> str:
    """``  load            failed     attempt 1  <reason>``: one step as one plain line (rich markup escaped)."""
    attempts = f"attempt {step['attempts']}" if step["attempts"] else ""
    reason = one_line(step.get("reason"))
    return shown(f"  {step['key']:<20} {step['status']:<10} {attempts:<10} {reason}".rstrip())


def steps_table(view: dict[str, Any]) -> Table:
    """The steps of ``view`` as a table: step, task, needs, status, attempts, reason."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for column in ("step", "task", "needs", "status", "attempts", "reason"):
        table.add_column(column, overflow="fold")
    for step in view["steps"]:
        table.add_row(shown(step["key"]), shown(step["task"]), shown(", ".join(step["needs"]) or "-"),
                      step_status(step), str(step["attempts"]), escape(one_line(step_reason(step), 100)))
    return table


def step_status(step: dict[str, Any]) -> str:
    """A step's status (rich markup); a ``running`` step whose task no worker has claimed yet reads
    ``running (queued)``: it passed the start barrier, but nothing executes it until a worker claims the task."""
    status = styled(step["status"])
    if step["status"] == "running" and step.get("invocation_status") == "pending":
        return f"{status} (queued)"
    return status


def step_reason(step: dict[str, Any]) -> str | None:
    """A step's reason, naming for a skipped step the needs that did not succeed:
    ``dependency_not_succeeded: build failed, lint skipped``."""
    reason, blockers = step.get("reason"), step.get("blocked_by") or []
    if not blockers:
        return reason
    named = ", ".join(f"{b['key']} {b['status']}" for b in blockers)
    return f"{reason}: {named}" if reason else named


def headline(view: dict[str, Any]) -> str:
    """Two lines (rich markup), short enough for an 80-column live display:
    ``run wfr_...  shop/flow on t1  running`` and ``  2/3 steps terminal, cancel requested``."""
    target = view["target"]["name"] if view.get("target") else "no target"
    done = sum(n for status, n in view["counts"].items() if status not in ("waiting", "ready", "running", "lost"))
    cancel = ", cancel requested" if view.get("cancel") else ""
    return (f"run [bold]{shown(view['run_id'])}[/bold]  {shown(view['package'])}/"
            f"{shown(view['workflow_id'])} on {shown(target)}  {render.styled(view['status'])}\n"
            f"  {done}/{len(view['steps'])} steps terminal{cancel}")


def verdict_line(view: dict[str, Any]) -> str:
    """``run wfr_... succeeded: 3 succeeded`` (the counts of the non-zero step statuses; rich markup)."""
    counts = ", ".join(f"{n} {status}" for status, n in view["counts"].items() if n)
    return f"run {shown(view['run_id'])} {render.styled(view['status'])}: {counts}"


def follow(store: Store, run_id: str, *, timeout: float | None, stop: threading.Event, quiet: bool,
           console: Console | None = None, warn: Callable[[str], None] | None = None,
           interval: float = 0.25) -> Followed:
    """Poll Run ``run_id`` until it settles (module docstring).

    Args:
        timeout: seconds to follow at most; None: until it settles or ``stop``.
        stop: set it (a signal handler does) to stop following at the next poll, within ``interval``.
        quiet: print nothing of the progress (``--json``); the no-worker notice still goes to ``warn``.
        console: where progress goes (default the CLI's console). warn: where the no-worker notice goes
            (default ``console``). interval: seconds between polls.
    Returns:
        ``Followed``.
    Raises:
        NotFound: no such Run. StoreUnavailable: the store failed.
    """
    out = console or render.console
    tell = warn or (lambda text: out.print(text, soft_wrap=True))
    live = not quiet and out.is_terminal
    deadline = None if timeout is None else time.monotonic() + timeout
    seen: dict[str, tuple[str, int]] = {}
    served: bool | None = None
    next_check = 0.0
    view = store.read(lambda tx: run_view(tx, run_id))
    display = Live(console=out, auto_refresh=False, transient=False) if live else None
    why = "settled"
    try:
        if display is not None:
            display.start()
        while True:
            if not view["terminal"] and time.monotonic() >= next_check:
                next_check = time.monotonic() + WORKER_CHECK_SECONDS
                now_served = worker_serves_tasks(store)
                if now_served != served and (served is not None or not now_served):
                    tell(f"  a live `fencepost worker` serves workflow tasks ({TASK_KIND}) now" if now_served else
                         f"  no live `fencepost worker` serves workflow tasks ({TASK_KIND}) on this control "
                         "database: the Run's steps wait until one is started (`fencepost worker`, with the same "
                         "--database)")
                served = now_served
            if display is not None:
                display.update(Group(Text.from_markup(headline(view)), steps_table(view)), refresh=True)
            elif not quiet:
                for step in view["steps"]:
                    state = (step["status"], step["attempts"])
                    if seen.get(step["key"]) != state and (step["key"] in seen or step["status"] != "waiting"):
                        out.print(step_line(step), soft_wrap=True)
                    seen[step["key"]] = state
            if view["terminal"]:
                break
            if deadline is not None and time.monotonic() >= deadline:
                why = "timeout"
                break
            if stop.wait(interval):
                why = "interrupted"
                break
            view = store.read(lambda tx: run_view(tx, run_id))
    finally:
        if display is not None:
            display.stop()
    return Followed(view, why)
