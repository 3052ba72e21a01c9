"""``fencepost host submit|show|list`` and the ``--app module:attribute`` loader the worker shares (issue 12).

``--app`` names the user's host: ``module:attribute``, where the attribute is a ``fencepost.host.Host`` (its
actions, adapters and config are taken onto the command's own store) or a callable ``store -> Host``. The
module is imported from the current directory first, as ``python -m`` would.
"""

from __future__ import annotations

import importlib
import json as jsonlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from fencepost.cli import render
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import InvocationStatus
from fencepost.host import Dispatch, Host, Inline, InvocationView
from fencepost.store.base import Store
from fencepost.store.url import DEFAULT_URL

app = typer.Typer(help="Submit action invocations and read their verdicts (the action host).",
                  no_args_is_help=True)

AppOpt = Annotated[str, typer.Option("--app", envvar="FENCEPOST_APP", show_envvar=True, metavar="MODULE:ATTRIBUTE",
                                     help="Your Host: a fencepost.host.Host, or a callable store -> Host.")]


def load_host(spec: str, store: Store) -> Host:
    """The user's ``Host`` named by ``spec`` (``module:attribute``), bound to ``store``.

    Raises:
        InvalidInput: a malformed spec, a module that cannot be imported, an attribute that is neither.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(f"--app must be module:attribute, not {spec!r}")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidInput(f"--app: cannot import {module_name}: {error}") from None
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidInput(f"--app: {module_name} has no attribute {attribute}")
    if isinstance(target, Host):
        return Host(store, actions=list(target.actions), adapters=list(target.runtime.adapters.values()),
                    config=target.config)
    if callable(target):
        made = target(store)
        if isinstance(made, Host):
            return made
    raise InvalidInput(f"--app: {spec} is neither a Host nor a callable returning one")


def _view_json(view: InvocationView) -> dict[str, Any]:
    return view.as_json()


def _show_text(view: InvocationView) -> None:
    render.console.print(f"{view.id}  {view.action_id} v{view.action_version}  {render.styled(str(view.status))}"
                         f"  attempts {view.attempt_count}  key {view.idempotency_key}")
    if view.error:
        render.console.print(f"  error: {view.error}")
    if view.reconciliation:
        render.console.print(f"  reconciliation: {jsonlib.dumps(view.reconciliation, sort_keys=True)}")
    for step in view.steps:
        ref = f"  ext {step.external_reference}" if step.external_reference else ""
        render.console.print(f"  step {step.name:<16} {step.status:<10} attempts {step.attempts}{ref}")


@app.command("submit")
def submit(
    action: Annotated[str, typer.Argument(help="The action id.")],
    host_app: AppOpt,
    params: Annotated[str, typer.Option("--params", help="The params as a JSON object.")] = "{}",
    actor: Annotated[str, typer.Option(help="Who submits (bound to the key).")] = "cli",
    authority: Annotated[str, typer.Option(help="The authority binding (bound to the key).")] = "",
    key: Annotated[str, typer.Option("--key", help="The idempotency key.")] = "",
    tenant: Annotated[str, typer.Option(help="Tenant.")] = "default",
    space: Annotated[str, typer.Option(help="Space.")] = "default",
    inline: Annotated[bool, typer.Option("--inline", help="Run it now in this process (under a caller lease) "
                                                          "instead of handing it to workers.")] = False,
    database: DatabaseOpt = DEFAULT_URL,
    json: JsonOpt = False,
) -> None:
    """Submit ACTION with --params under --key; print the invocation (pending, or its verdict with --inline)."""
    with opened(database) as store, handled():
        try:
            parsed = jsonlib.loads(params)
        except ValueError:
            raise InvalidInput("--params must be a JSON object") from None
        if not isinstance(parsed, dict):
            raise InvalidInput("--params must be a JSON object")
        if not key:
            raise InvalidInput("--key is required: an idempotency key makes a retried submit safe")
        host = load_host(host_app, store)
        view = host.submit(action, parsed, actor=actor, authority=authority, idempotency_key=key, tenant=tenant,
                           space=space, mode=Inline() if inline else Dispatch())
    emit(json, _view_json(view), lambda: _show_text(view))


@app.command("show")
def show(invocation_id: Annotated[str, typer.Argument(help="The invocation id.")],
         database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Show one invocation: its verdict, evidence, attempt count and steps."""
    with opened(database) as store, handled():
        view = Host(store).get(invocation_id)
    emit(json, _view_json(view), lambda: _show_text(view))


@app.command("list")
def list_invocations(
    status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    space: Annotated[str | None, typer.Option(help="Only this space.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (1-10000).")] = 100,
    database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
) -> None:
    """List invocations, newest first."""
    with opened(database) as store, handled():
        try:
            wanted = None if status is None else InvocationStatus(status)
        except ValueError:
            raise InvalidInput(f"--status must be one of {', '.join(s.value for s in InvocationStatus)}") from None
        if not 1 <= limit <= 10_000:
            raise InvalidInput("--limit must be between 1 and 10000")
        views = Host(store).list(tenant=tenant, space=space, status=wanted, limit=limit)
    data = {"invocations": [_view_json(v) for v in views]}

    def text() -> None:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for column in ("id", "action", "status", "attempts", "key", "error"):
            table.add_column(column)
        for v in views:
            table.add_row(v.id, f"{v.action_id} v{v.action_version}", render.styled(str(v.status)),
                          str(v.attempt_count), v.idempotency_key, (v.error or "")[:60])
        render.console.print(table)

    emit(json, data, text)
