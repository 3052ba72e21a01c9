"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from fencepost.cli.exit_codes import exit_code
from fencepost.core.errors import FencepostError, InvalidInput
from fencepost.store import Store, open_store

if TYPE_CHECKING:  # the sandbox (and the outbox under it) is imported only by the commands that run one
    from fencepost.rehearsal.sandbox import SandboxLimits

T = TypeVar("T")

DatabaseOpt = Annotated[str, typer.Option(
    "--database", "-d", envvar="FENCEPOST_DATABASE", show_envvar=True,
    help="Control database URL: sqlite:///path.db (add ?journal_mode=delete for DELETE journal) or "
         "postgresql://user@host/db.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of text.")]
SandboxBytesOpt = Annotated[str, typer.Option(
    "--sandbox-max-bytes", envvar="FENCEPOST_SANDBOX_MAX_BYTES", show_envvar=True, metavar="SIZE",
    help="Bytes each sandbox database may hold (1MiB-1TiB, e.g. 1GiB); a write past it fails the scenario "
         "with the cap in its evidence.")]
SandboxMemoryOpt = Annotated[str, typer.Option(
    "--sandbox-max-memory", envvar="FENCEPOST_SANDBOX_MAX_MEMORY", show_envvar=True, metavar="SIZE",
    help="SQLite memory each sandbox is budgeted (16MiB-64GiB, e.g. 256MiB); going past it fails the "
         "scenario with the cap in its evidence.")]
DEFAULT_SANDBOX_MAX_BYTES = "1GiB"
DEFAULT_SANDBOX_MAX_MEMORY = "256MiB"

_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024 ** 2, "mib": 1024 ** 2, "g": 1024 ** 3,
          "gib": 1024 ** 3, "t": 1024 ** 4, "tib": 1024 ** 4}


def parse_size(text: str, what: str) -> int:
    """``"1073741824"``, ``"512MiB"``, ``"1G"`` as bytes (binary units: K/KiB, M/MiB, G/GiB, T/TiB).

    Raises:
        InvalidInput: not a whole number of bytes with one of those units; names ``what``.
    """
    found = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = found.group(2).lower() if found else ""
    if not found or unit not in _UNITS:
        raise InvalidInput(f"{what} takes a size such as 1073741824, 512MiB or 1GiB, not {text!r}")
    return int(found.group(1)) * _UNITS[unit]


def sandbox_limits(max_bytes: str, max_memory: str) -> SandboxLimits:
    """The sandbox caps of ``--sandbox-max-bytes`` and ``--sandbox-max-memory`` (ADR 0021).

    Raises:
        InvalidInput: a size that does not parse or is out of range.
    """
    from fencepost.rehearsal.sandbox import SandboxLimits

    limits = SandboxLimits(max_bytes=parse_size(max_bytes, "--sandbox-max-bytes"),
                           max_memory=parse_size(max_memory, "--sandbox-max-memory"))
    try:
        limits.validate()
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    return limits


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
