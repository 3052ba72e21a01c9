"""What a SQL backend provides: an ``Executor`` that runs one named ``Query`` inside an open transaction.

The executor binds ``:name`` parameters (instants arrive as aware datetimes; the SQLite executor writes them
as fixed-width UTC text, ADR 0001), returns rows as dicts with the query's declared instants as aware UTC
datetimes and bytes as ``bytes``, and translates driver errors into ``fencepost.core.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from fencepost.core.canonical import parse_json
from fencepost.core.errors import IntegrityViolation
from fencepost.store.records import Lease
from fencepost.store.sql.queries import Query


@dataclass(frozen=True)
class Result:
    """Rows of one statement (column name -> value) and its rowcount (rows changed, or rows returned)."""

    rows: list[dict[str, Any]]
    rowcount: int


class Executor(Protocol):
    """One open transaction of a SQL backend."""

    backend: str

    @property
    def single_statement(self) -> bool:
        """True while the unit runs without a transaction block, so that its one statement commits by itself and
        takes the server's own instant (PostgreSQL's ``SINGLE_STATEMENT_UNITS``, ADR 0090); ``now()`` is then
        unknown here and a query receives ``now=None``. Always False on SQLite."""
        ...

    def begin_block(self) -> None:
        """Open the transaction block now, before the first statement, when the unit will run more than one
        (a no-op where the block is always open).

        Raises:
            RuntimeError: a statement already ran on its own.
        """
        ...

    def run(self, query: Query, params: Mapping[str, Any]) -> Result:
        """Execute ``query`` with ``params``.

        Raises:
            Conflict, StoreBusy, StoreUnavailable: the translated driver error.
        """
        ...

    def now(self) -> datetime:
        """The store's clock, read once per transaction: the lease authority."""
        ...

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Ad-hoc SQL for tests and benchmarks only (the driver's own placeholders); never on an application path."""
        ...

    def savepoint(self, name: str) -> None:
        """``SAVEPOINT name``: the start of a nested unit (``SqlUnitOfWork.savepoint``)."""
        ...

    def release(self, name: str) -> None:
        """``RELEASE SAVEPOINT name``: the nested unit's writes stay part of the transaction."""
        ...

    def rollback_to(self, name: str) -> None:
        """``ROLLBACK TO SAVEPOINT name`` and release it: the nested unit's writes are undone, the transaction
        goes on as it was before ``savepoint``.

        Raises:
            TransactionAborted: the rollback failed (the database ended the whole transaction).
        """
        ...


class Statements(Protocol):
    """What a port implementation needs from its unit of work: run a named query, read the clock."""

    #: The lease a fence on which ends this unit (``Store.fenced``), or None outside a fenced unit.
    fenced_by: Lease | None

    @property
    def single_statement(self) -> bool:
        """``Executor.single_statement``: the unit's one statement commits by itself, with its own instant."""
        ...

    def begin_block(self) -> None:
        """``Executor.begin_block``: the unit is about to run more than one statement."""
        ...

    def run(self, name: str, params: Mapping[str, Any]) -> Result:
        """Execute the dialect's query ``name`` with ``params``."""
        ...

    def now(self) -> datetime:
        """The store's clock, read once per unit."""
        ...


def json_object(raw: Any, what: str = "value") -> dict[str, Any]:
    """A stored JSON object column (text, or UTF-8 bytes, on SQLite; text or already decoded on PostgreSQL) as a
    dict.

    Raises:
        ValueError: it is not a JSON object (``what`` names it in the message).
    """
    value = parse_json(raw) if isinstance(raw, str | bytes) else raw
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value


def stored_json(raw: Any, what: str) -> Any:
    """A stored JSON column parsed: text, or UTF-8 bytes (a SQLite column read as a BLOB, so that text that is
    not UTF-8 is this column's problem and not a failed fetch); a value already decoded is returned as is.

    Raises:
        IntegrityViolation: the stored text cannot be read back (written past the port: nesting or a number beyond
            the parser's limits), naming ``what`` (e.g. "params of inv_..."), instead of a bare ``ValueError`` out
            of every read that meets the row (ADR 0100). Fail closed (exit 5).
    """
    if not isinstance(raw, str | bytes):
        return raw
    try:
        return parse_json(raw)
    except (ValueError, RecursionError) as error:
        raise IntegrityViolation(f"the stored {what} cannot be read back: "
                                 f"{type(error).__name__}: {str(error)[:200]}") from None
