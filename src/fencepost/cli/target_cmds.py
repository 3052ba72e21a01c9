"""``fencepost target add|list|show|remove``: the databases packages are delivered to (ADR 0055)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.delivery.targets import TargetService, parse_labels, target_json
from fencepost.delivery.urls import target_path
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.url import DEFAULT_URL

app = typer.Typer(help="Delivery targets: the databases a published package is delivered to.", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="The target's name (unique among live targets).")]
LabelOpt = Annotated[list[str] | None, typer.Option("--label", metavar="KEY=VALUE",
                                                    help="A label (repeatable).")]


def _line(target: TargetRecord) -> str:
    labels = ",".join(f"{k}={v}" for k, v in sorted(target.labels.items())) or "-"
    return f"{target.name:<24} {target.url}  labels {labels}"


@app.command()
def add(name: NameArg, url: Annotated[str, typer.Argument(help="sqlite:///absolute/path.db (the file must exist "
                                                               "when a delivery runs; it is never created).")],
        label: LabelOpt = None, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Add a target. Exit 0: added (or the same target again); 2: bad name, URL or label (an unsupported
    scheme is named); 3: the name is taken with another URL or labels."""
    with opened(database) as store, handled():
        target = TargetService(store).add(name, url, parse_labels(label or []))
    emit(json, target_json(target), lambda: typer.echo(f"target {_line(target)}"))
    path = Path(target_path(target.url))
    if not path.is_file():
        # Not refused: the workers that deliver open the path on their own machines, which may see a file that
        # this one does not. Said now rather than at the first delivery (a new user's trial).
        typer.echo(f"warning: {path} is not a file on this machine; a delivery to {target.name} fails until the "
                   "database exists where the workers run (a target is never created)", err=True)


@app.command("list")
def list_targets(label: LabelOpt = None, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """List live targets, those carrying every --label when given."""
    with opened(database) as store, handled():
        targets = TargetService(store).list(parse_labels(label or []))

    def text() -> None:
        if not targets:
            typer.echo("no target")
        for target in targets:
            typer.echo(_line(target))

    emit(json, [target_json(t) for t in targets], text)


@app.command()
def show(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Show one live target. Exit 2: no such target."""
    with opened(database) as store, handled():
        target = TargetService(store).get(name)
    emit(json, target_json(target), lambda: typer.echo(f"{_line(target)}\n  id {target.id}, added "
                                                       f"{target.added_at.isoformat() if target.added_at else '-'}"))


@app.command()
def remove(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Remove a target (its record stays, so past deliveries still name it; new ones are refused). Exit 2: no
    such target."""
    with opened(database) as store, handled():
        target = TargetService(store).remove(name)
    emit(json, target_json(target), lambda: typer.echo(f"removed target {target.name}"))
