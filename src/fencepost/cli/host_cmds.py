"""``fencepost host submit|show|list|approvals|approve|reject`` and the ``--app module:attribute`` loader the
worker shares (issue 12; approvals: ADR 0044).

``--app`` names the user's host: ``module:attribute``, where the attribute is a ``fencepost.host.Host`` (its
actions, adapters and config are taken onto the command's own store) or a callable ``store -> Host``. The
module is imported from the current directory first, as ``python -m`` would.
"""

from __future__ import annotations

import importlib
import json as jsonlib
import signal
import sys
import traceback
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from fencepost.cli import render, stdio
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.cli.exit_codes import exit_code
from fencepost.cli.signals import acting_on_signals
from fencepost.cli.workers_cmd import backlog_lines
from fencepost.core.canonical import parse_input_json
from fencepost.core.errors import FencepostError, InvalidInput, RecoverableFinalization, SchemaNotReady
from fencepost.core.statuses import CommandStatus, CompletionDisposition, InvocationMode, InvocationStatus
from fencepost.host import Dispatch, Host, Inline, InvocationView
from fencepost.host.handler import KIND_PREFIX, kind_of
from fencepost.host.health import DEFAULT_STUCK_AFTER, read_host_health
from fencepost.host.operator import invocation_events
from fencepost.outbox.history import lease_history
from fencepost.outbox.registry import WorkerCensus, read_census
from fencepost.store.base import Store
from fencepost.store.url import DEFAULT_URL

app = typer.Typer(help="Submit action invocations and read their verdicts (the action host).",
                  no_args_is_help=True)

AppOpt = Annotated[str, typer.Option("--app", envvar="FENCEPOST_APP", show_envvar=True, metavar="MODULE:ATTR",
                                     help="Your Host: a fencepost.host.Host, or a callable store -> Host.")]


def _raised_at(error: BaseException) -> str:
    """`` (at FILE:LINE in FUNCTION)`` for the deepest frame of ``error``'s traceback in the user's own code
    (outside the interpreter's and the virtual environment's libraries and fencepost), or "" when there is none:
    a one-line error must still say where to look (a new-user trial got a bare JSONDecodeError)."""
    libraries = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    ours = str(Path(__file__).resolve().parents[1])
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if not frame.filename or frame.filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
            continue
        where = str(Path(frame.filename).resolve())
        if not where.startswith(libraries) and not where.startswith(ours):
            return f" (at {frame.filename}:{frame.lineno} in {frame.name})"
    return ""


def load_host(spec: str, store: Store) -> Host:
    """The user's ``Host`` named by ``spec`` (``module:attribute``), bound to ``store``.

    Raises:
        InvalidInput: a malformed spec, a module that cannot be imported, an attribute that is neither.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(f"--app must be module:attribute, not {spec!r}")
    if "/" in module_name or "\\" in module_name or module_name.endswith(".py") or module_name.startswith("."):
        raise InvalidInput(f"--app names a module (dotted, importable from the current directory), not a file: "
                           f"for ./shop/app.py use --app shop.app:{attribute}")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if error.name and error.name != module_name and not module_name.startswith(f"{error.name}."):
            # the module was found, and an import inside it failed: say so, and where (a verification trial)
            raise InvalidInput(f"--app: importing {module_name} raised {type(error).__name__}: {error}"
                               f"{_raised_at(error)}") from None
        raise InvalidInput(f"--app: cannot import {module_name}: {error}") from None
    except SyntaxError as error:
        raise InvalidInput(f"--app: {module_name} does not parse: {error.msg} ({error.filename}, line "
                           f"{error.lineno})") from None
    except Exception as error:  # the user's module failed while it was imported
        raise InvalidInput(f"--app: importing {module_name} raised {type(error).__name__}: {error}"
                           f"{_raised_at(error)}") from None
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidInput(f"--app: {module_name} has no attribute {attribute}")
    if isinstance(target, Host):
        return Host(store, actions=list(target.actions), adapters=list(target.runtime.adapters.values()),
                    config=target.config, breakers=target.runtime.breakers,
                    telemetry=target.runtime.telemetry, redaction=target.runtime.redaction,
                    policies=target.runtime.policies)
    if callable(target):
        try:
            made = target(store)
        except Exception as error:  # not a store -> Host factory, or one that failed
            raise InvalidInput(f"--app: {spec}(store) raised {type(error).__name__}: {error}{_raised_at(error)}; "
                               "--app names a Host or a callable taking the store and returning a Host") from None
        if isinstance(made, Host):
            return made
    raise InvalidInput(f"--app: {spec} is neither a Host nor a callable returning one")


def _json_object(text: str, option: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object. Raises ``InvalidInput`` naming ``option`` otherwise (also for JSON
    nested past the parser's recursion limit)."""
    try:
        parsed = parse_input_json(text)
    except jsonlib.JSONDecodeError as error:
        raise InvalidInput(f"{option} must be a JSON object; it is not valid JSON: {error.msg} "
                           f"(line {error.lineno} column {error.colno})") from None
    except ValueError as error:  # a duplicate key, a non-finite number, nesting past the parser's limit
        if "nests too deeply" in str(error):  # the parser's own limit: bad input, not a crash of the command
            raise InvalidInput(f"{option} is nested too deeply to be read") from None
        raise InvalidInput(f"{option} must be a JSON object: {error}") from None
    if not isinstance(parsed, dict):
        raise InvalidInput(f"{option} must be a JSON object")
    return parsed


def _view_json(view: InvocationView) -> dict[str, Any]:
    return view.as_json()


def _events(store: Store, view: InvocationView) -> list[dict[str, Any]]:
    """The lifecycle events recorded about the invocation and its steps, and its StateTransitioned fact (about
    the bound entity, ADR 0077), in sequence order."""
    events = store.read(lambda tx: invocation_events(
        tx, tenant_id=view.tenant_id, space_id=view.space_id, invocation_id=view.id,
        adapter_ids=[step.adapter_invocation_id for step in view.steps], state_bound=view.state is not None))
    return [{"id": e.id, "sequence": e.sequence, "type": e.type, "subject": e.subject.subject_id,
             "occurred_at": e.occurred_at.isoformat(), "payload": e.payload}
            for e in events]


def _reconciliations(store: Store, view: InvocationView) -> list[dict[str, Any]]:
    """The invocation's reconciliation records (the governance and completion logs, ADR 0032), oldest first."""
    records = store.read(lambda tx: tx.host.list_reconciliations(view.id))
    return [{"id": r.id, "log": str(r.log), "kind": str(r.kind), "adapter_invocation_id": r.adapter_invocation_id,
             "payload": r.payload, "created_at": r.created_at.isoformat()} for r in records]


def _budget_line(reconciliation: dict[str, Any]) -> str:
    """What ``recovery attempts exhausted (n/max)`` (host-spec H4) means, in words: the count is of claims
    including the first, so claim ``max + 1`` is the one that settles it, without running the handler again."""
    if reconciliation.get("kind") != "recovery_budget_exhausted":
        return ""
    attempts, budget = reconciliation.get("attempts"), reconciliation.get("max")
    if not isinstance(attempts, int) or not isinstance(budget, int):
        return ""
    return (f"(the budget allows {budget} claims, the first included; claim {attempts} settled it without running "
            f"the handler again)")


def attempts_text(view: InvocationView) -> str:
    """``attempts N``: the worker claims (``attempt_count``). An inline run is its caller's, under a lease of
    delivery 0 (ADR 0022), so it reads ``attempts 0 (run inline)`` rather than a bare 0 an auditor would take for
    "never ran" (a new-user trial)."""
    if view.attempt_count == 0 and view.mode is InvocationMode.INLINE and view.status is not InvocationStatus.PENDING:
        return "attempts 0 (run inline)"
    return f"attempts {view.attempt_count}"


def _show_text(view: InvocationView, events: list[dict[str, Any]] | None = None,
               reconciliations: list[dict[str, Any]] | None = None, waiting: dict[str, Any] | None = None,
               timeline: list[dict[str, Any]] | None = None) -> None:
    print_ = render.line  # every line carries stored text: shown, never acted on (a break-it trial)

    print_(f"{view.id}  {escape(view.action_id)} v{view.action_version}  {render.styled(str(view.status))}"
           f"  {attempts_text(view)}  key {escape(view.idempotency_key)}")
    print_(f"  submitted by {view.actor}" + (f" under {view.authority}" if view.authority else "")
           + f", {view.mode}, {view.created_at.isoformat()}", markup=False)
    if waiting is not None and "unheld_seconds" in waiting:
        served = waiting["live_workers_serving"]
        print_(f"  no lease held for {render.age(waiting['unheld_seconds'])}: whoever ran it stopped; "
               + ("a worker serving it takes it over and its recovery settles the verdict" if served else
                  f"no live worker serves {waiting['kind']}: it stays running until one starts and takes it over "
                  "(`fencepost worker --app ...`)"), markup=False)
    elif waiting is not None:
        served = waiting["live_workers_serving"]
        print_(f"  pending for {render.age(waiting['pending_seconds'])}; " + (
            f"{served} live worker{'s' if served != 1 else ''} serve{'s' if served == 1 else ''} it"
            if served else f"no live worker serves {waiting['kind']}: nothing runs it until one starts "
                           "(`fencepost worker --app ...`; `fencepost workers` lists them)"), markup=False)
    print_(f"  params {jsonlib.dumps(view.params, sort_keys=True)}  ({view.params_digest})", markup=False)
    # After an operator's resolution these are the verdict it replaced (kept as evidence): say so, next to a
    # status they no longer describe (a new user's trial).
    before = "original " if view.resolution else ""
    if view.error:
        print_(f"  {before}error: {view.error}", markup=False)
    if view.reconciliation:
        print_(f"  {before}reconciliation: {jsonlib.dumps(view.reconciliation, sort_keys=True)}", markup=False)
        budget = _budget_line(view.reconciliation)
        if budget:
            print_(f"  {budget}", markup=False)
    if view.handoff:
        h = view.handoff
        state = ("parked, waiting for its completion" if view.parked
                 else "swept: overdue" if h["overdue_at"] else "parked" if h["parked_at"] else "not parked")
        print_(f"  handoff: {h['provider']} {h['external_reference']} (step {h['step']}), {state}; due "
               f"{h['due_at']}" + (f", overdue since {h['overdue_at']}" if h["overdue_at"] else ""), markup=False)
    if view.external_completion:
        c = view.external_completion
        print_(f"  external completion: {c.get('outcome')} ({c.get('disposition')}), received {c.get('received_at')}"
               f"; result {jsonlib.dumps(c.get('result'), sort_keys=True)}"
               + (f"; error {c.get('error')}" if c.get("error") else "")
               + (f"; evidence {jsonlib.dumps(c.get('evidence'), sort_keys=True)}" if c.get("evidence") else ""),
               markup=False)
    if view.resolution:
        r = view.resolution
        print_(f"  resolved {r['outcome']} by {r['operator']} at {r['resolved_at']} (was {r['prior']['status']}): "
               f"{r['note']}" + (f"; evidence {jsonlib.dumps(r['evidence'], sort_keys=True)}" if r["evidence"] else ""),
               markup=False)
    if view.state:
        _state_text(view)
    for step in view.steps:
        ref = f"  external reference {step.external_reference}" if step.external_reference else ""
        print_(f"  step {step.name} {step.status}  attempts {step.attempts}  provider key "
               f"{step.adapter_invocation_id}{ref}", markup=False)
        if step.output:
            print_(f"    output {jsonlib.dumps(step.output, sort_keys=True)}", markup=False)
        if step.error:
            print_(f"    error {step.error}", markup=False)
    for event in events or []:
        print_(f"  event {event['sequence']:>4} {event['type']}  {event['occurred_at']}{_decision(event)}",
               markup=False)
    for record in reconciliations or []:
        about = f"  adapter invocation {record['adapter_invocation_id']}" if record["adapter_invocation_id"] else ""
        print_(f"  reconciliation record ({record['log']}) {record['kind']}{about}  {record['created_at']}",
               markup=False)
    for d in timeline or []:  # who held it, and how each lease ended (the page's lease timeline)
        print_(f"  lease #{d['delivery']} ({d['claim']}) {d['owner'] or '-'}  claimed {d['claimed_at']}, "
               f"{d['heartbeats']} heartbeat(s), until {d['lease_until'] or '-'}: {d['ended']}"
               + (f" at {d['ended_at']}" if d["ended_at"] else ""), markup=False)


_SET_BY = {"host": "set by the host", "handler": "set by the handler, kept by the host",
           "earlier": "already so before this invocation, kept"}


def _state_text(view: InvocationView) -> None:
    """The state binding (ADR 0077): the bound entity and target, the StateTransitioned fact (or that there is
    none) and the entity's recorded state now, saying whether this invocation or another one last changed it."""
    print_ = render.line
    state = view.state or {}
    print_(f"  state: {state['subject']} {state['entity_id']} -> {state['target']}", markup=False)
    fact = state.get("transition")
    if fact:
        print_(f"    transitioned {fact['from'] or '(no state)'} -> {fact['to']} at {fact['at']} "
               f"({_SET_BY.get(fact['set_by'], fact['set_by'])}), event {fact['sequence']}", markup=False)
    else:
        print_("    no StateTransitioned fact" + (" (it records one when it succeeds or parks)"
                                                   if not view.status.terminal else ""), markup=False)
    recorded = state.get("recorded")
    if recorded:
        by = ("this invocation" if recorded["updated_by_invocation"] == view.id
              else f"invocation {recorded['updated_by_invocation']}")
        print_(f"    recorded state {recorded['state']}, last changed by {by} at {recorded['updated_at']}",
               markup=False)
    else:
        print_("    recorded state: none", markup=False)


#: The governance events whose payload says who decided what, and why: shown on their line (host-spec P; ADR 0044).
_DECISION_FIELDS = ("policy", "decision", "approver", "authority", "note", "reason", "expires_at")


def _decision(event: dict[str, Any]) -> str:
    """``": approver alice, authority payments-ops, note ..."`` for an approval or compliance event, else ``""``."""
    if not str(event["type"]).startswith(("Approval", "Compliance")):
        return ""
    payload = event.get("payload") or {}
    shown = [f"{name} {payload[name]}" for name in _DECISION_FIELDS if payload.get(name) not in (None, "")]
    return (": " + ", ".join(shown)) if shown else ""


@app.command("submit")
def submit(
    action: Annotated[str, typer.Argument(help="The action id.")],
    host_app: AppOpt,
    params: Annotated[str, typer.Option("--params", help="The params as a JSON object.")] = "{}",
    actor: Annotated[str, typer.Option(help="Who submits (bound to the key).")] = "cli",
    authority: Annotated[str, typer.Option(help="The authority binding (bound to the key).")] = "",
    key: Annotated[str, typer.Option("--key", help="The idempotency key (required).")] = "",
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    space: Annotated[str, typer.Option(help="Space.")] = "default",
    inline: Annotated[bool, typer.Option("--inline", help="Run it now in this process (under a caller lease) "
                                                          "instead of handing it to workers.")] = False,
    database: DatabaseOpt = DEFAULT_URL,
    json: JsonOpt = False,
) -> None:
    """Submit ACTION with --params under --key (required); print the invocation.

    Dispatched (the default), the invocation is pending until a worker serving this action runs it. With
    --inline it runs now and its verdict is printed. Exit 0: submitted, or succeeded inline (also for a
    replay of the key, which returns the existing invocation); 1: an inline run ended failed or
    reconciliation_required, or --inline replayed an invocation not finished yet (it ran nothing); 2: bad input;
    3: the key is bound to other params, actor, authority or action version; 5: the outcome could not be
    recorded yet (the message names the invocation; read it with fencepost host show).
    """
    with opened(database) as store, handled():
        parsed = _json_object(params, "--params")
        if not key:
            raise InvalidInput("--key is required: an idempotency key makes a retried submit safe")
        host = load_host(host_app, store)

        def finishing(received: int) -> None:  # the first Ctrl-C, on the signal watcher's thread (cli/signals.py)
            sys.stderr.write("fencepost: finishing the run: a provider call in flight is waited for and recorded, "
                             "as a worker's graceful stop does; press Ctrl-C again to abandon it (an invocation "
                             "that is not idempotent may then need reconciliation)\n")

        try:
            # An inline run's first Ctrl-C does not abandon a provider call that may answer a moment later (a
            # new-user trial's invocation then needed an operator); the second raises KeyboardInterrupt.
            with acting_on_signals(finishing, (signal.SIGINT,), interrupt_at=2) if inline else nullcontext():
                view = host.submit(action, parsed, actor=actor, authority=authority, idempotency_key=key,
                                   tenant=tenant, space=space, mode=Inline() if inline else Dispatch())
        except KeyboardInterrupt:
            if inline:  # the run stops here; say what is stored and who finishes it (a new user's trial)
                _interrupted_inline(store, host, action=action, key=key, tenant=tenant, space=space)
                stdio.interrupts.explained = True
            raise
        except RecoverableFinalization as error:  # name the invocation, so the user can look at what is stored
            if error.invocation_id is None:
                raise
            raise RecoverableFinalization(
                f"{error}; invocation {error.invocation_id} (fencepost host show {error.invocation_id}): "
                + ("its verdict is recorded" if error.verdict_durable
                   else "a worker serving this action recovers it once the caller lease expires"),
                error.cause, invocation_id=error.invocation_id, verdict_durable=error.verdict_durable) from None
        unserved = view.status is InvocationStatus.PENDING and not _served(store, view)
    emit(json, {**_view_json(view), "replayed": view.replayed}, lambda: _show_text(view))
    unfinished_inline = inline and (view.status is InvocationStatus.PENDING
                                    or (view.status is InvocationStatus.RUNNING and not view.parked))
    if view.replayed and not unfinished_inline:  # that case has its own message below
        typer.echo(f"fencepost: --key {key} names invocation {view.id}, submitted before: it is shown as it is and "
                   "nothing ran again", err=True)
    if unserved:
        typer.echo(f"fencepost: no live `fencepost worker` serves {view.action_id} v{view.action_version} on this "
                   "control database yet: the invocation stays pending until a worker started with --app for "
                   "this action registers (fencepost workers lists them)", err=True)
    if inline and view.status in (InvocationStatus.FAILED, InvocationStatus.RECONCILIATION_REQUIRED):
        raise typer.Exit(1)
    # An inline run ends settled, parked or awaiting approval. Pending, or running unparked, is a replay of the
    # key's earlier invocation that is not finished: --inline ran nothing, and exit 0 read as a success to a
    # script (a break-it trial).
    if unfinished_inline:
        typer.echo(f"fencepost: --key {key} names invocation {view.id}, submitted earlier and still {view.status}: "
                   "--inline ran nothing here; "
                   + ("a worker serving this action runs it" if view.status is InvocationStatus.PENDING
                      else "its holder finishes it, or a worker recovers it once that lease expires")
                   + f" (fencepost host show {view.id})", err=True)
        raise typer.Exit(1)


def _served(store: Store, view: InvocationView) -> bool:
    """Whether a live ``fencepost worker`` in the registry serves the invocation's action version (ADR 0019); True
    when the registry cannot be read (advisory: it says nothing then), as ``package install`` and ``workflow run``
    check before they wait."""
    try:
        return bool(read_census(store).serving(kind_of(view.action_id, view.action_version)))
    except FencepostError:
        return True


def _interrupted_inline(store: Store, host: Host, *, action: str, key: str, tenant: str, space: str) -> None:
    """Say on stderr what an interrupted ``submit --inline`` left: nothing (the same --key submits afresh), or the
    invocation still running under this process's lease, which a worker takes over once it expires."""
    try:
        record = store.read(lambda tx: tx.host.find_invocation(tenant_id=tenant, space_id=space, action_id=action,
                                                               idempotency_key=key))
    except Exception:  # interrupted already: say what can be said, never a second traceback
        record = None
    if record is None:
        sys.stderr.write("fencepost: interrupted before the invocation was stored; submitting again with the same "
                         "--key is safe\n")
        return
    if record.status is not InvocationStatus.RUNNING:
        sys.stderr.write(f"fencepost: interrupted; invocation {record.id} is {record.status} "
                         f"(fencepost host show {record.id})\n")
        return
    sys.stderr.write(f"fencepost: interrupted; invocation {record.id} is still running under this process's lease: "
                     f"a worker serving {action} takes it over once the lease expires (within "
                     f"{host.config.lease_seconds:g} s) and recovers it or settles it reconciliation_required "
                     f"(fencepost host show {record.id})\n")


@app.command("show")
def show(invocation_id: Annotated[str, typer.Argument(help="The invocation id.")],
         database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Show one invocation: who submitted what (params, authority), its verdict and evidence, its attempt count,
    its steps with the provider key to look each one up at the provider, its lifecycle events and its lease
    timeline (one line per delivery: who held it and how the lease ended)."""
    with opened(database) as store, handled():
        view = Host(store).get(invocation_id)
        events = _events(store, view)
        records = _reconciliations(store, view)
        waiting = _waiting(store, view)
        timeline = lease_history(store.read(lambda tx: tx.outbox.lease_events(view.id)))
    emit(json, {**_view_json(view), "events": events, "reconciliations": records, "waiting": waiting,
                "lease_timeline": timeline},
         lambda: _show_text(view, events, records, waiting, timeline))


def _waiting(store: Store, view: InvocationView) -> dict[str, Any] | None:
    """By the store's clock: for a dispatched invocation still ``pending``, ``{"kind", "pending_seconds",
    "live_workers_serving"}``, so that an invocation no worker will run says so (a new-user trial: with no worker
    running, nothing said why it waited); for a ``running`` one that is not parked and whose lease nobody holds
    any more (its worker or inline caller stopped), ``{"kind", "unheld_seconds", "live_workers_serving"}``, since
    only a worker's takeover settles it (a break-it trial: ``show`` said nothing); None otherwise."""
    pending = view.status is InvocationStatus.PENDING and str(view.mode) == "dispatch"
    unparked = view.status is InvocationStatus.RUNNING and not view.parked
    if not pending and not unparked:
        return None
    kind = f"{KIND_PREFIX}{view.action_id}@{view.action_version}"
    census, command = store.read(lambda tx: (WorkerCensus(tx.now(), tuple(tx.workers.list_workers())),
                                             tx.outbox.get(view.id)))
    served = len(census.serving(kind))
    if pending:
        return {"kind": kind, "pending_seconds": max(0.0, (census.now - view.created_at).total_seconds()),
                "live_workers_serving": served}
    if command is None or command.status is not CommandStatus.PROCESSING:
        return None  # parked on its own terms, or settled since the view was read
    if command.lease_until is not None and command.lease_until > census.now:
        return None  # held: its holder is running it
    since = command.lease_until or command.updated_at
    return {"kind": kind, "unheld_seconds": max(0.0, (census.now - since).total_seconds()),
            "live_workers_serving": served}


@app.command("list")
def list_invocations(
    status: Annotated[str | None, typer.Option(
        help="Only this status: " + ", ".join(s.value for s in InvocationStatus) + ".")] = None,
    action: Annotated[str | None, typer.Option("--action", help="Only this action id.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    space: Annotated[str | None, typer.Option(help="Only this space.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (1-10000).")] = 100,
    database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
) -> None:
    """List invocations, newest first. When more match than --limit, the last line says so (--json: "more")."""
    with opened(database) as store, handled():
        try:
            wanted = None if status is None else InvocationStatus(status)
        except ValueError:
            raise InvalidInput(f"--status must be one of {', '.join(s.value for s in InvocationStatus)}") from None
        if not 1 <= limit <= 10_000:
            raise InvalidInput("--limit must be between 1 and 10000")
        # One more than asked: whether the list stopped at --limit (a new-user trial read a cut list as all).
        views = Host(store).list(tenant=tenant, space=space, status=wanted, action_id=action, limit=limit + 1)
    more = len(views) > limit
    views = views[:limit]
    data = {"invocations": [_view_json(v) for v in views], "more": more}

    def text() -> None:
        if not views:
            render.console.print("no invocation matches")
            return
        # One line per invocation, in the order of `host show`'s first line, and the error under it: plain lines
        # wrap in a narrow terminal where a table would drop its last columns (the attempts, the key, the error).
        for v in views:
            render.line(f"{v.id}  {escape(v.action_id)} v{v.action_version}  {render.styled(str(v.status))}"
                        f"  {attempts_text(v)}  key {escape(v.idempotency_key)}")
            if v.resolution is not None:  # the error below is the settled verdict's, kept as history
                render.line(f"  resolved {v.resolution['outcome']} by {v.resolution['operator']} at "
                            f"{v.resolution['resolved_at']}: {v.resolution['note'][:200]}", markup=False)
            if v.error:
                render.line(f"  error: {v.error[:200]}", markup=False)
        if more:
            render.line(f"... more match: these are the newest {limit}; narrow with --status, --action, --tenant or "
                        "--space, or raise --limit", markup=False)

    emit(json, data, text)


@app.command("approvals")
def approvals(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    space: Annotated[str | None, typer.Option(help="Only this space.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (1-10000).")] = 100,
    database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
) -> None:
    """List the invocations awaiting approval, newest first: the policy that asked, the authority an approver
    must present, and when the request expires (ADR 0044). Exit 0."""
    with opened(database) as store, handled():
        if not 1 <= limit <= 10_000:
            raise InvalidInput("--limit must be between 1 and 10000")
        requests = Host(store).approvals(tenant=tenant, space=space, limit=limit)
    data = {"approvals": [r.as_json() for r in requests]}

    def text() -> None:
        if not requests:
            render.console.print("no invocation awaits approval")
            return
        # One block per request (a table of six columns cannot fit 80 columns without folding the expiry).
        for r in requests:
            render.line(f"{r.invocation_id}  {escape(r.action_id)}  awaiting approval")
            render.line(f"  policy {r.policy} asks for authority {r.authority}, expires "
                        f"{render.when(r.expires_at.isoformat())}", markup=False)
            render.line(f"  reason: {r.reason}", markup=False)

    emit(json, data, text)


ApproverOpt = Annotated[str, typer.Option("--as", help="Who decides (recorded with the decision).")]
AuthorityOpt = Annotated[str, typer.Option("--authority", help="The authority the request names.")]
NoteOpt = Annotated[str, typer.Option("--note", help="Why (recorded with the decision).")]


@app.command("approve")
def approve(
    invocation_id: Annotated[str, typer.Argument(help="The invocation id.")],
    host_app: AppOpt,
    approver: ApproverOpt,
    authority: AuthorityOpt,
    note: NoteOpt = "",
    database: DatabaseOpt = DEFAULT_URL,
    json: JsonOpt = False,
) -> None:
    """Approve an invocation awaiting approval and resume it now, in this process, under a temporary lease
    (ADR 0044); print the invocation after the resume.

    Exit 0: it succeeded or awaits a further approval; 1: the resume ended failed or reconciliation_required;
    2: no such invocation, or bad input; 3: it does not await approval, or the request expired; 5: the resume
    could not record its outcome (a worker recovers it once the lease expires); 6: --authority is not the one
    the request names.
    """
    with opened(database) as store, handled():
        view = load_host(host_app, store).approve(invocation_id, approver=approver, authority=authority, note=note)
    emit(json, _view_json(view), lambda: _show_text(view))
    if view.status in (InvocationStatus.FAILED, InvocationStatus.RECONCILIATION_REQUIRED):
        raise typer.Exit(1)


@app.command("reject")
def reject(
    invocation_id: Annotated[str, typer.Argument(help="The invocation id.")],
    approver: ApproverOpt,
    authority: AuthorityOpt,
    note: NoteOpt = "",
    database: DatabaseOpt = DEFAULT_URL,
    json: JsonOpt = False,
) -> None:
    """Reject an invocation awaiting approval: it ends failed with the reason (ADR 0044). Exit codes as for
    approve (0: rejected)."""
    with opened(database) as store, handled():
        view = Host(store).reject(invocation_id, approver=approver, authority=authority, note=note)
    emit(json, _view_json(view), lambda: _show_text(view))


@app.command("sweep")
def sweep(host_app: AppOpt, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Run the workers' sweeps once, now: every handoff past its completion deadline is settled
    reconciliation_required, and every expired approval request ends failed (docs/decisions/0044).

    Workers serving the app run these sweeps before every claim; this command runs them on demand (for
    example from cron when no worker is running). Exit 0; prints how many of each it settled.
    """
    with opened(database) as store, handled():
        host = load_host(host_app, store)
        settled = host.reconcile_overdue_completions()
        expired = host.expire_approvals()
    emit(json, {"settled": settled, "expired_approvals": expired},
         lambda: render.console.print(f"settled {settled} overdue handoff(s), ended {expired} expired approval(s)"))


@app.command("status")
def status(
    stuck_after: Annotated[float, typer.Option("--stuck-after", metavar="SECONDS", min=0,
                                               help="How long a running invocation must be unleased and unchanged "
                                                    "to count as stuck.")] = DEFAULT_STUCK_AFTER.total_seconds(),
    database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
) -> None:
    """The host's health: schema version and the counts an operator watches (docs/decisions/0051).

    Exit 0 whatever the counts say (they are work for an operator); 4 when the schema is not current (the
    counts are then not read), 5 when the store does not answer. The same object as the host field of
    GET /health/ready.
    """
    with opened(database, require_schema=False, create=False) as store, handled():
        health = read_host_health(store, stuck_after=timedelta(seconds=stuck_after))
    data = health.as_json()

    def text() -> None:
        render.console.print(f"schema version {health.schema_version} (this fencepost: "
                             f"{health.expected_schema_version})" + ("" if health.schema_current
                                                                     else ": run fencepost migrate"))
        if health.counts is None:
            return
        labels = {"open_reconciliations": "open reconciliations",
                  "overdue_handoffs": "overdue handoffs not yet swept",
                  "stuck_runs": f"stuck runs (unleased > {stuck_after:g}s)",
                  "budget_exhaustions": "budget exhaustions (last hour)",
                  "dead_letters": "event dead letters", "probe_dead_letters": "probe dead letters (expected)"}
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column("what")
        table.add_column("count", justify="right")
        for name, label in labels.items():
            table.add_row(label, str(data[name]))
        render.console.print(table)
        if health.backlog and health.backlog.kinds:
            render.console.print("invocations waiting for a worker, by action (new, or given back by a stopped "
                                     "worker: those stay running in host list):")
            for line in backlog_lines(health.backlog):
                render.console.print(line)
        counted = any(data[name] for name in labels if name != "probe_dead_letters")
        if counted:
            render.console.print("attention: an operator has work")
        if health.unserved:
            render.console.print("attention: invocations wait for an action no live worker serves; start "
                                 "`fencepost worker --app MODULE:ATTR` with the Host that registers it")
        if not health.attention:
            render.console.print("nothing needs attention")

    emit(json, data, text)
    if not health.schema_current:
        raise typer.Exit(exit_code(SchemaNotReady))


@app.command("complete")
def complete(
    provider: Annotated[str, typer.Argument(help="The provider: the handing-off adapter's vendor.")],
    reference: Annotated[str, typer.Argument(help="The external reference the provider's acceptance carried.")],
    host_app: AppOpt,
    outcome: Annotated[str, typer.Option(help="completed or failed.")] = "completed",
    result: Annotated[str, typer.Option("--result", help="The provider's result, a JSON object.")] = "",
    error: Annotated[str, typer.Option("--error", help="The provider's error text (failed).")] = "",
    evidence: Annotated[str, typer.Option("--evidence", help="What else the provider reported, a JSON object "
                                                             "(part of the completion's identity).")] = "",
    database: DatabaseOpt = DEFAULT_URL,
    json: JsonOpt = False,
) -> None:
    """Record a provider's completion of a handoff, as its callback would (docs/operations.md, "Overdue
    handoffs").

    The completion is matched by PROVIDER and REFERENCE only and decided under the invocation's row lock: it
    settles a parked invocation (or a swept one that had parked), is refused while the invocation still
    executes, is absorbed when identical to the recorded one, turns a contradicting one into
    reconciliation_required, and is kept as evidence otherwise. Exit 0: recorded (settled, evidence_only,
    contradicted: read the printed disposition) or absorbed; 1: not found (nothing recorded) or still
    executing (retry later); 2: bad input; 3: two invocations hold the reference.
    """
    with opened(database) as store, handled():
        parsed = _json_object(result, "--result") if result else None
        facts = _json_object(evidence, "--evidence") if evidence else None
        receipt = load_host(host_app, store).complete(provider, reference, outcome, result=parsed,
                                                      error=error or None, evidence=facts)
    data = {"disposition": str(receipt.disposition), "invocation_id": receipt.invocation_id,
            "status": None if receipt.status is None else str(receipt.status), "detail": receipt.detail}
    emit(json, data, lambda: render.console.print(
        f"{receipt.disposition}: {receipt.detail}" + (f" (invocation {receipt.invocation_id}, {receipt.status})"
                                                       if receipt.invocation_id else ""), markup=False))
    if receipt.disposition in (CompletionDisposition.NOT_FOUND, CompletionDisposition.STILL_EXECUTING):
        raise typer.Exit(1)


# ── the operator: resolution and the reconciliation queue (host-spec §1.Y-13, §2.7; ADR 0048) ──
@app.command("resolve")
def resolve(
    invocation_id: Annotated[str, typer.Argument(help="The reconciliation_required invocation.")],
    operator: Annotated[str, typer.Option("--as", metavar="NAME",
                                          help="Who decides (recorded with the resolution), e.g. ops:alice.")],
    note: Annotated[str, typer.Option("--note", help="What you found at the provider (1-2000 characters).")],
    succeeded: Annotated[bool, typer.Option("--succeeded", help="The effect happened: settle it succeeded.")] = False,
    failed: Annotated[bool, typer.Option("--failed", help="The effect did not happen: settle it failed.")] = False,
    evidence: Annotated[str, typer.Option("--evidence", help="What you found, a JSON object (e.g. the charge "
                                                             "at the provider).")] = "",
    database: DatabaseOpt = DEFAULT_URL,
    json: JsonOpt = False,
) -> None:
    """Resolve a reconciliation_required invocation as --succeeded or --failed, after looking it up at the
    provider (fencepost host queue says what to look up: the vendor, the external reference and the provider
    key, which is the adapter_invocation_id).

    The resolution records --as, --note and --evidence and an InvocationResolved event; the original verdict,
    its error, its reconciliation records and its events stay as they were (fencepost host show lists both
    verdicts). A resolution is final: running the identical command again changes nothing and exits 0; a
    different one is refused. Exit 0: resolved; 2: bad input (exactly one of --succeeded and --failed) or no
    such invocation; 3: the invocation is not reconciliation_required or was resolved differently.
    """
    with opened(database) as store, handled():
        if succeeded == failed:
            raise InvalidInput("give exactly one of --succeeded and --failed")
        facts = _json_object(evidence, "--evidence") if evidence else None
        view = Host(store).resolve(invocation_id, "succeeded" if succeeded else "failed", operator=operator,
                                   note=note, evidence=facts)
    emit(json, _view_json(view), lambda: _show_text(view))


@app.command("queue")
def queue(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    space: Annotated[str | None, typer.Option(help="Only this space.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (1-1000).")] = 100,
    database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
) -> None:
    """The reconciliation queue: every reconciliation_required invocation, oldest first, with its kind, its
    reason and what to look up at the provider (vendor, external reference, provider key). Resolve each with
    fencepost host resolve ID --succeeded|--failed --as NAME --note TEXT."""
    with opened(database) as store, handled():
        if not 1 <= limit <= 1000:  # named as the user wrote it, as list and events list do
            raise InvalidInput("--limit must be between 1 and 1000")
        entries = Host(store).reconciliation_queue(tenant=tenant, space=space, limit=limit)
    data = [e.as_json() for e in entries]

    def text() -> None:
        if not entries:
            render.console.print("no invocation awaits an operator")
        for entry in entries:
            inv = entry.invocation
            render.line(f"{inv['id']}  {inv['action_id']} v{inv['action_version']}  {entry.kind}  since "
                        f"{entry.waiting_since}", markup=False)
            render.line(f"  reason: {entry.reason}", markup=False)
            for lookup in entry.lookups:
                ref = f" external reference {lookup.external_reference}" if lookup.external_reference else ""
                render.line(f"  look up at {lookup.vendor}: step {lookup.step} ({lookup.status}) provider "
                            f"key {lookup.adapter_invocation_id}{ref}", markup=False)

    emit(json, data, text)
