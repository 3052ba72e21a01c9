"""Store backends for the contract suite: ``sqlite-wal``, ``sqlite-delete`` and ``postgres``.

A ``StoreBackend`` is also a ``fencepost.testing.ContractBackend``: ``tests/store/test_contract_suite.py`` runs
the shipped contract classes on each selected backend through it.

Environment:
    FENCEPOST_TEST_BACKENDS: comma-separated subset of the backends to run (default: all three). When it
        includes ``postgres`` and the server cannot be reached, postgres tests FAIL rather than skip.
    FENCEPOST_TEST_POSTGRES_URL: the PostgreSQL test server (default
        ``postgresql://postgres@127.0.0.1:5432/test``). Each test gets its own fresh PostgreSQL schema,
        dropped afterwards, so tests are isolated without a database per test.

Expiry: on SQLite the lease clock is a ``ManualClock`` that ``advance`` moves; PostgreSQL's clock is the
server's, so ``advance`` sleeps there and ``short_lease`` is tiny (0.3 s) to keep that cheap.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import psycopg
from psycopg import sql

from fencepost.core.clock import ManualClock
from fencepost.store import Store, UnitOfWork, open_store

ALL_BACKENDS = ("sqlite-wal", "sqlite-delete", "postgres")
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


class BackendUnreachable(RuntimeError):
    """The PostgreSQL test server cannot be reached."""


def selected_backends() -> list[str]:
    """The backends named by ``FENCEPOST_TEST_BACKENDS`` (all when unset), in canonical order.

    Raises:
        ValueError: an unknown backend name.
    """
    raw = os.environ.get("FENCEPOST_TEST_BACKENDS", "").strip()
    if not raw:
        return list(ALL_BACKENDS)
    names = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = names - set(ALL_BACKENDS)
    if unknown:
        raise ValueError(f"FENCEPOST_TEST_BACKENDS names unknown backends {sorted(unknown)}; "
                         f"known: {', '.join(ALL_BACKENDS)}")
    return [name for name in ALL_BACKENDS if name in names]


def postgres_url() -> str:
    return os.environ.get("FENCEPOST_TEST_POSTGRES_URL", "").strip() or DEFAULT_POSTGRES_URL


def schema_url(schema: str) -> str:
    """The test server's URL restricted to ``schema`` (``?options=-csearch_path=<schema>``): what a fencepost
    subprocess gets as ``--database`` to work in one test's schema."""
    base = postgres_url()
    return f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={schema}', safe='')}"


def admin_connect() -> psycopg.Connection[Any]:
    """An autocommit connection to the test server (for schema setup and raw checks).

    Raises:
        BackendUnreachable: with a hint on how to start the server or deselect postgres.
    """
    try:
        return psycopg.connect(postgres_url(), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise BackendUnreachable(
            f"PostgreSQL test server unreachable ({first}). Start it "
            "(pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start), set "
            "FENCEPOST_TEST_POSTGRES_URL, or exclude it: FENCEPOST_TEST_BACKENDS=sqlite-wal,sqlite-delete"
        ) from None


def new_schema_name(tag: str = "t") -> str:
    return f"fp_{tag}_{secrets.token_hex(6)}"


def create_schema(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))


def drop_schema(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@dataclass
class StoreBackend:
    """One backend under test, bound to one fresh database (SQLite file or PostgreSQL schema).

    Attributes:
        name: ``sqlite-wal``, ``sqlite-delete`` or ``postgres``.
        url: what ``open_store`` takes (never printed by fencepost itself).
        options: extra ``open_store`` keyword arguments (``clock`` on SQLite, ``schema`` on PostgreSQL).
        clock: the ``ManualClock`` of SQLite backends, None on PostgreSQL.
        short_lease: a lease duration (seconds) that ``expire()`` outlives.
        long_lease: a lease duration (seconds) no test outlives.
        schema: the PostgreSQL schema of this test, None on SQLite.
    """

    name: str
    url: str
    options: dict[str, Any]
    clock: ManualClock | None
    short_lease: float
    long_lease: float = 600.0
    schema: str | None = None
    _stores: list[Store] = field(default_factory=list)

    @property
    def is_postgres(self) -> bool:
        return self.name == "postgres"

    @property
    def location(self) -> str:
        """The database's URL, which no store message may show (``ContractBackend.location``)."""
        return self.url

    def inspect(self, tx: UnitOfWork, sql: str) -> list[tuple[Any, ...]]:
        """Parameterless SQL in ``tx`` through the SQL unit's ``execute_raw`` (``ContractBackend.inspect``)."""
        return cast(list[tuple[Any, ...]], cast(Any, tx).execute_raw(sql))

    def open(self, **extra: Any) -> Store:
        """Open another store on this backend's database (closed at teardown)."""
        store = open_store(self.url, **{**self.options, **extra})
        self._stores.append(store)
        return store

    def migrated(self, **extra: Any) -> Store:
        store = self.open(**extra)
        store.migrate()
        return store

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass on the lease clock (SQLite: move the ManualClock; PostgreSQL: sleep)."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def expire(self) -> None:
        """Move past ``short_lease`` so every short lease taken before now has expired."""
        self.advance(self.short_lease + (0.05 if self.clock is None else 1.0))

    def close(self) -> None:
        for store in self._stores:
            store.close()
        self._stores.clear()


@contextmanager
def store_backend(name: str, tmp_path: Path) -> Iterator[StoreBackend]:
    """A fresh, empty database of backend ``name``; removed afterwards.

    Raises:
        BackendUnreachable: ``postgres`` requested and the server cannot be reached.
        ValueError: unknown backend.
    """
    if name.startswith("sqlite-"):
        mode = name.removeprefix("sqlite-")
        clock = ManualClock()
        backend = StoreBackend(name=name, url=f"sqlite:///{tmp_path / 'fencepost.db'}?journal_mode={mode}",
                               options={"clock": clock}, clock=clock, short_lease=30.0)
        try:
            yield backend
        finally:
            backend.close()
        return
    if name != "postgres":
        raise ValueError(f"unknown backend {name!r}")
    schema = new_schema_name()
    create_schema(schema)
    backend = StoreBackend(name=name, url=postgres_url(), options={"schema": schema}, clock=None,
                           short_lease=0.3, schema=schema)
    try:
        yield backend
    finally:
        backend.close()
        drop_schema(schema)
