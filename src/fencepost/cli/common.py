"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from fencepost.cli.exit_codes import exit_code
from fencepost.core.errors import FencepostError
from fencepost.store import Store, open_store

T = TypeVar("T")

DatabaseOpt = Annotated[str, typer.Option(
    "--database", "-d", envvar="FENCEPOST_DATABASE", show_envvar=True,
    help="Control database URL: sqlite:///path.db (add ?journal_mode=delete for DELETE journal) or "
         "postgresql://user@host/db.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of text.")]


def fail(error: FencepostError) -> NoReturn:
    """Print one clear line on stderr and exit with the error's code (``cli.exit_codes``)."""
    typer.echo(f"fencepost: {error}", err=True)
    raise typer.Exit(exit_code(type(error)))


@contextmanager
def handled() -> Iterator[None]:
    """Turn fencepost errors into one line and an exit code (never a stack trace)."""
    try:
        yield
    except FencepostError as error:
        fail(error)


@contextmanager
def opened(database: str, *, require_schema: bool = True, create: bool | None = None) -> Iterator[Store]:
    """Open the store for a command; refuse an unmigrated schema unless told otherwise.

    ``create`` (SQLite): whether a missing file may be created; defaults to ``not require_schema``.
    """
    with handled():
        store = open_store(database, create=(not require_schema) if create is None else create)
        try:
            if require_schema:
                store.require_schema()
            yield store
        finally:
            store.close()


def emit(as_json: bool, data: Any, text: Callable[[], None]) -> None:
    """Print ``data`` as JSON, or call ``text()`` to print the human form."""
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        text()
