"""``fencepost workflow plan | admit | show | run | status | list | cancel`` (ADR-0224 admission; ADR 0072 execution).

Exit codes: 2 invalid plan or input, unknown run; 3 conflict; 5 unavailable (store error or corrupt evidence);
6 not allowed (a start guard is false; the message names it). ``run`` and ``status --watch`` exit by the Run's
verdict (``cli.exit_codes.RUN_VERDICT_EXIT``): 0 succeeded, 1 failed, 7 timed_out, 8 cancelled; 9 still running
when ``--timeout`` ran out; 130 interrupted (Ctrl-C stops following, never the Run).
"""

from __future__ import annotations

import json as jsonlib
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from fencepost.cli import render
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.cli.exit_codes import FOLLOW_TIMEOUT_EXIT, INTERRUPTED_EXIT, RUN_VERDICT_EXIT
from fencepost.cli.signals import acting_on_signals
from fencepost.cli.workflow_follow import (
    Followed,
    follow,
    headline,
    one_line,
    shown,
    step_reason,
    steps_table,
    verdict_line,
)
from fencepost.core.canonical import parse_input_json, parse_json
from fencepost.core.errors import InvalidInput, InvalidPlan
from fencepost.core.statuses import WorkflowRunStatus
from fencepost.rehearsal.views import iso
from fencepost.store.base import Store
from fencepost.store.url import DEFAULT_URL
from fencepost.workflows.service import WorkflowService, require_target
from fencepost.workflows.views import runs_view

app = typer.Typer(help="Plan, admit, run, follow and cancel workflow runs of installed packages.", no_args_is_help=True)

TargetOpt = Annotated[str | None, typer.Option(
    "--target", help="The live delivery target whose database the tasks run on (default: the one target the "
                     "installed version was delivered to).")]
InputsOpt = Annotated[str, typer.Option("--inputs", help="Run inputs as a JSON object.")]
PlanIdOpt = Annotated[str | None, typer.Option(help="Idempotency key of this run (default: random).")]


def parse_inputs(text: str) -> dict[str, Any]:
    """``--inputs`` as a JSON object.

    Raises:
        InvalidPlan: not JSON, or JSON that is not an object (exit 2).
    """
    try:
        parsed = parse_input_json(text)
    except ValueError as error:
        raise InvalidPlan(f"--inputs is not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise InvalidPlan("--inputs must be a JSON object")
    return parsed


def read_plan(plan_file: str) -> Any:
    """The JSON of a plan file (``-``: standard input); normalization happens at admission.

    Raises:
        InvalidPlan: unreadable, not UTF-8, not JSON (exit 2).
    """
    source = "on standard input" if plan_file == "-" else plan_file  # the message names what the user gave
    try:
        raw = sys.stdin.read() if plan_file == "-" else Path(plan_file).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidPlan(f"cannot read the plan {source}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidPlan(f"the plan {source} is not UTF-8 text") from None
    try:
        return parse_input_json(raw)
    except ValueError as error:
        raise InvalidPlan(f"the plan {source} is not valid JSON: {error}") from None


def _warn_untargeted(plan: Any) -> None:
    """Warn on stderr when ``plan`` names no target: admission (ADR-0224) accepts it, but ``workflow run`` refuses
    it and every step of an admitted one is refused by the ``target`` start guard, so the user hears it now."""
    try:
        require_target(plan)
    except InvalidInput as error:
        typer.echo(f"warning: {error}", err=True)


@app.command()
def plan(package: Annotated[str, typer.Argument(help="Installed package name.")],
         workflow: Annotated[str, typer.Argument(help="Workflow id from the package manifest.")],
         database: DatabaseOpt = DEFAULT_URL,
         plan_id: PlanIdOpt = None, inputs: InputsOpt = "{}", target: TargetOpt = None,
         output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the plan here.")] = None) -> None:
    """Build a normalized plan (with its digest) for one run; prints JSON (or writes --output)."""
    with handled():
        parsed = parse_inputs(inputs)
    with opened(database) as store, handled():
        data = WorkflowService(store).plan(package, workflow, plan_id=plan_id, inputs=parsed, target=target)
    _warn_untargeted(data)
    text = jsonlib.dumps(data, indent=2, sort_keys=True) + "\n"
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as error:
            typer.echo(f"fencepost: cannot write the plan to {output}: {error.strerror or error}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"plan {data['plan_id']} ({len(data['steps'])} steps, digest {data['digest']}) -> {output}",
                   err=True)
    else:
        sys.stdout.write(text)


@app.command()
def admit(plan_file: Annotated[str, typer.Argument(help="Plan JSON file, or - for standard input.")],
          database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Admit a plan in one transaction: prints created (new Run) or existing (the original receipt)."""
    with handled():
        data = read_plan(plan_file)
    with opened(database) as store, handled():
        result = WorkflowService(store).admit(data)
    _warn_untargeted(data)  # after admission: a refused plan's one stderr line is its refusal
    view = {"outcome": result.outcome, "run_id": result.run_id, "receipt": result.receipt}
    emit(json, view, lambda: typer.echo(f"{result.outcome}: run {result.run_id} "
                                        f"({len(result.receipt['step_runs'])} steps, receipt "
                                        f"{result.receipt['receipt_id']})"))


def _rows_view(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def clean(row: dict[str, Any]) -> dict[str, Any]:
        return {k: (iso(v) if hasattr(v, "isoformat") else v) for k, v in row.items()}

    return {table: [clean(r) for r in items] for table, items in rows.items()}


@app.command()
def show(ident: Annotated[str, typer.Argument(help="Plan id or workflow run id.")],
         database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Show an admission: Run, StepRuns, events, mutations and receipt."""
    with opened(database) as store, handled():
        found = WorkflowService(store).show(ident)
    admission = found["admission"]
    rows = _rows_view(found["rows"])
    view = {"plan_id": admission.plan_id, "plan_digest": admission.plan_digest, "run_id": admission.run_id,
            "package": admission.package_name, "workflow_id": admission.workflow_id,
            "admitted_at": iso(admission.admitted_at), **rows}

    def text() -> None:
        # printable: the names come from a stored plan, shown and never acted on by the terminal
        typer.echo(render.printable(f"run {admission.run_id} of {admission.package_name}/{admission.workflow_id} "
                                    f"(plan {admission.plan_id}, admitted {iso(admission.admitted_at)})"))
        for step in rows["workflow_step_runs"]:
            needs = ", ".join(parse_json(step["needs"])) or "-"
            typer.echo(render.printable(f"  {step['step_key']:<20} {step['status']:<8} task {step['task_id']:<20} "
                                        f"needs {needs}"))

    emit(json, view, text)


# ── execution: run, status, list, cancel (ADR 0072) ──

def _read_view(store: Store, run_id: str) -> dict[str, Any]:
    return WorkflowService(store).run(run_id)


@contextmanager
def _sigint_stops(stop: threading.Event) -> Iterator[None]:
    """While inside: SIGINT sets ``stop`` (following ends at its next poll) instead of raising in a store call;
    set from the signal watcher's thread, never from the handler (``cli/signals.py``: following waits on
    ``stop`` itself, and a handler setting it there could wait for its own lock)."""
    with acting_on_signals(lambda _received: stop.set()):
        yield


def _follow(store: Store, run_id: str, timeout: float | None, *, quiet: bool,
            stop: threading.Event | None = None) -> Followed:
    """Follow under ``_sigint_stops`` (``stop``: an event a caller already handed to it, else a new one)."""
    if stop is None:
        stop = threading.Event()
        with _sigint_stops(stop):
            return _follow(store, run_id, timeout, quiet=quiet, stop=stop)
    return follow(store, run_id, timeout=timeout, stop=stop, quiet=quiet,
                  warn=(lambda text: typer.echo(text.strip(), err=True)) if quiet else None)


def _finish(followed: Followed, timeout: float | None) -> None:
    """The closing lines on stderr for a Run still running, and the exit code of how following ended."""
    run_id = followed.view["run_id"]
    again = f"follow it again with `fencepost workflow status {run_id} --watch`"
    if followed.why == "interrupted":
        typer.echo(f"fencepost: stopped following run {run_id}; it goes on (nothing was cancelled): {again}",
                   err=True)
        raise typer.Exit(INTERRUPTED_EXIT)
    if followed.why == "timeout":
        typer.echo(f"fencepost: run {run_id} is still {followed.view['status']} after {timeout:g} s; it goes on: "
                   f"{again}", err=True)
        raise typer.Exit(FOLLOW_TIMEOUT_EXIT)
    code = RUN_VERDICT_EXIT[followed.view["status"]]
    if code:
        raise typer.Exit(code)


def _print_verdict(view: dict[str, Any]) -> None:
    render.console.print(verdict_line(view), soft_wrap=True)
    for step in view["steps"]:
        if step["status"] in ("failed", "timed_out", "lost") or (step["status"] == "skipped"
                                                                  and view["status"] == "failed"):
            render.console.print(f"  {shown(step['status'])} step {shown(step['key'])} (task "
                                 f"{shown(step['task'])}): {escape(one_line(step_reason(step)) or '-')}",
                                 soft_wrap=True)


RunIdArg = Annotated[str, typer.Argument(help="Workflow run id (wfr_...), or the plan id it was admitted with.")]
TimeoutOpt = Annotated[float | None, typer.Option(
    "--timeout", min=0.0, help="Seconds to follow at most (default: until the Run settles); then exit 9, the Run "
                               "goes on.")]


@app.command()
def run(package: Annotated[str | None, typer.Argument(help="Installed package name.", show_default=False)] = None,
        workflow: Annotated[str | None, typer.Argument(help="Workflow id from the package manifest.",
                                                       show_default=False)] = None,
        database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
        plan_file: Annotated[str | None, typer.Option(
            "--plan", metavar="FILE", help="Admit this plan file (from `workflow plan -o`; - for stdin) instead "
                                           "of planning PACKAGE WORKFLOW.")] = None,
        target: TargetOpt = None, plan_id: PlanIdOpt = None, inputs: InputsOpt = "{}",
        no_wait: Annotated[bool, typer.Option("--no-wait", help="Admit and print the run id; do not follow.")] = False,
        timeout: TimeoutOpt = None) -> None:
    """Plan, admit and follow one run of a workflow until it settles.

    Plans PACKAGE WORKFLOW (or reads --plan FILE), admits it in one transaction (the same --plan-id again
    follows the existing Run: nothing runs twice), then follows it: on a terminal a live table of its steps,
    elsewhere one line per step transition. The steps run in `fencepost worker` processes on the same
    database; while none is live it says so. Ctrl-C stops following, never the Run (`workflow cancel` does).

    Exit codes: 0 the Run succeeded; 1 it failed (the failed step and its reason are printed); 7 it timed out
    (a task passed its timeout_seconds); 8 it was cancelled; 9 still running when --timeout ran out; 130
    interrupted (Ctrl-C); 2 bad input (bad --inputs or plan, unknown package, workflow or target, no target
    to run on); 3 the --plan-id was admitted before with a different plan; 4 the database needs `fencepost
    migrate`; 5 the store is unavailable or a record is corrupt; 6 a start guard refuses (quarantine, disabled
    package)."""
    with handled():
        if plan_file is not None and (package is not None or workflow is not None):
            raise InvalidInput("give PACKAGE WORKFLOW or --plan FILE, not both")
        if plan_file is not None and (target is not None or plan_id is not None or inputs != "{}"):
            raise InvalidInput("--target, --plan-id and --inputs build a plan: a --plan file already carries them")
        if plan_file is None and (package is None or workflow is None):
            raise InvalidInput("name the PACKAGE and WORKFLOW to run (or --plan FILE); see --help")
        data = read_plan(plan_file) if plan_file is not None else None
        parsed = parse_inputs(inputs)
    with opened(database) as store, handled(), ExitStack() as stack:
        service = WorkflowService(store)
        if data is None:
            assert package is not None and workflow is not None
            data = service.plan(package, workflow, plan_id=plan_id, inputs=parsed, target=target)
        admitted = service.start(data)
        stop = threading.Event()
        # From here a Ctrl-C only stops following: the Run is admitted, whatever the user sees next.
        stack.enter_context(_sigint_stops(stop))
        view = _read_view(store, admitted.run_id)
        if not json:
            target_name = view["target"]["name"] if view.get("target") else "-"
            render.console.print(
                f"{admitted.outcome}: run [bold]{admitted.run_id}[/bold] ({len(view['steps'])} steps) of "
                f"{shown(view['package'])}/{shown(view['workflow_id'])} on {shown(target_name)}"
                + ("" if no_wait else "; following (Ctrl-C stops following, the Run goes on)"), soft_wrap=True)
        if no_wait:
            emit(json, {"outcome": admitted.outcome, "run_id": admitted.run_id, "followed": "no",
                        "run": view}, lambda: typer.echo(
                f"  follow it with `fencepost workflow status {admitted.run_id} --watch`"))
            return
        followed = _follow(store, admitted.run_id, timeout, quiet=json, stop=stop)
    emit(json, {"outcome": admitted.outcome, "run_id": admitted.run_id, "followed": followed.why,
                "run": followed.view}, lambda: _print_verdict(followed.view) if followed.why == "settled" else None)
    _finish(followed, timeout)


@app.command()
def status(run_id: RunIdArg,
           database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
           watch: Annotated[bool, typer.Option("--watch", help="Follow the Run until it settles (a live table on "
                                                               "a terminal, a line per step transition "
                                                               "elsewhere).")] = False,
           timeout: TimeoutOpt = None) -> None:
    """Show a workflow Run: its status, cancel intent and every step (status, attempts, reason; --json adds
    each step's task invocation).

    Exit 0 (shown), 2 no such run. With --watch it follows the Run like `workflow run` and exits by its verdict:
    0 succeeded, 1 failed, 7 timed_out, 8 cancelled, 9 still running after --timeout, 130 interrupted."""
    if timeout is not None and not watch:
        with handled():
            raise InvalidInput("--timeout bounds --watch; without --watch the Run is shown once")
    with opened(database) as store, handled():
        view = _read_view(store, run_id)
        if not watch:
            emit(json, view, lambda: _print_run(view))
            return
        followed = _follow(store, run_id, timeout, quiet=json)
    emit(json, followed.view, lambda: _print_verdict(followed.view) if followed.why == "settled" else None)
    _finish(followed, timeout)


def _print_run(view: dict[str, Any]) -> None:
    render.console.print(headline(view), soft_wrap=True)
    render.console.print(f"  plan {shown(view['plan_id'])}, created {render.when(view['created_at'])}, settled "
                         f"{render.when(view['settled_at'])}, fence {view['fence']}, {view['events']} events",
                         soft_wrap=True)
    if view.get("cancel"):
        render.console.print(f"  cancel requested {render.when(view['cancel']['requested_at'])}: "
                             f"{shown(view['cancel']['reason'])}", soft_wrap=True)
    render.console.print(steps_table(view))


@app.command("list")
def list_runs(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
              status: Annotated[WorkflowRunStatus | None, typer.Option(
                  "--status", case_sensitive=False, help="Only Runs of this status.")] = None,
              limit: Annotated[int, typer.Option(min=1, max=10000, help="At most this many Runs.")] = 50) -> None:
    """List workflow Runs, newest first (with --json, one object: {"items": [...]})."""
    with opened(database) as store, handled():
        items = store.read(lambda tx: runs_view(tx, status=status, limit=limit))

    def text() -> None:
        if not items:
            typer.echo("no workflow runs" + (f" with status {status}" if status else ""))
            return
        for r in items:
            cancel = "  cancel requested" if r["cancel"] else ""
            pad = " " * max(0, 10 - len(r["status"]))
            workflow = f"{r['package'] or '?'}/{r['workflow_id']}"
            render.console.print(f"{r['run_id']}  {shown(workflow):<28} {render.styled(r['status'])}{pad} "
                                 f"created {render.when(r['created_at'])}  settled {render.when(r['settled_at'])}"
                                 f"{cancel}", soft_wrap=True)

    emit(json, {"items": items}, text)


@app.command()
def cancel(run_id: RunIdArg,
           reason: Annotated[str, typer.Option("--reason", help="Why: one line of 1-1000 characters, no control "
                                                                "characters (kept on the Run and in its ledger).")],
           database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
           actor: Annotated[str, typer.Option(help="Who cancels (kept in the Run's ledger).")] = "cli") -> None:
    """Cancel a workflow Run: store the intent, then finalize what is not executing.

    The intent is stored first (one transaction); then one advance of the Run cancels at once every step that
    has not started. A step whose task is already running finishes (or reaches its deadline) and the Run
    settles after it, as `cancelled` (or by that step's verdict). A Run already settled is left as it is.
    Exit 0 (requested, or already requested or settled), 2 bad reason (blank, too long, or holding a control
    character or line break) or no such run."""
    with opened(database) as store, handled():
        data = WorkflowService(store).cancel(run_id, reason=reason, actor=actor)
    after, outcome = data["run"], data["outcome"]
    still = [s for s in after["steps"] if s["key"] in data["still_running"]]
    cancelled_now = data["cancelled_now"]

    def text() -> None:
        if outcome == "settled":
            render.console.print(f"run {run_id} already settled {render.styled(after['status'])}: nothing to cancel",
                                 soft_wrap=True)
            return
        said = "cancel requested" if outcome == "requested" else "cancel was already requested"
        kept = (after["cancel"] or {}).get("reason")
        render.console.print(f"{said}: run {shown(run_id)} ({shown(kept)})", soft_wrap=True)
        if outcome == "existing" and kept != reason:
            render.console.print("  the first request's reason is kept; this one was not recorded", soft_wrap=True)
        render.console.print(f"  cancelled now: {', '.join(cancelled_now) or 'none'}", soft_wrap=True)
        for step in still:
            ends = (f"until it finishes or reaches its deadline {render.when(step['deadline_at'])}"
                    if step["status"] == "running" else "until an operator resolves its task")
            render.console.print(f"  still {step['status']}: {shown(step['key'])} ({ends})", soft_wrap=True)
        if after["terminal"]:
            render.console.print(f"run {run_id} is {render.styled(after['status'])}", soft_wrap=True)
        else:
            render.console.print(f"  the Run settles once they end: `fencepost workflow status {run_id} --watch`",
                                 soft_wrap=True)

    emit(json, data, text)
