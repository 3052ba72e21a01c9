"""Named SQL blocks: one common file per concern, per-dialect overrides only where dialects differ.

File format (procrastinate habit, STYLE.md): a block starts with ``-- name: <query>`` (or
``-- fragment: <name>`` for a piece of SQL that queries embed as ``{{name}}``); header comment lines right
after it may say

- ``-- per-dialect``: the common file only declares the block; every dialect must define it;
- ``-- instants: col, col``: the result columns that are instants (aware UTC datetimes in Python; fixed-width
  UTC text on SQLite, ADR 0001; ``timestamptz`` on PostgreSQL).

The other comment lines say what the query is for; the SQL runs to the next block. Parameters are written
``:name`` in every dialect; the PostgreSQL executor converts them to psycopg's ``%(name)s``.

Loading (``load_dialect``) merges the common files with one dialect's ``dialect.sql`` and refuses: a
duplicate name, an override of a block not declared ``per-dialect``, a ``per-dialect`` block the dialect
lacks, instants declared in a dialect file (the common declaration is the contract), an unknown fragment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

COMMON_PACKAGE = "fencepost.store.sql"
#: The concerns, one common SQL file each, in the order they are loaded.
CONCERNS = ("outbox", "rehearsal", "catalog", "admission", "audit", "workers", "host", "events",
            "event_leases", "resolutions", "delivery", "progress")
DIALECT_FILE = "dialect.sql"

_HEAD = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$")
_INSTANTS = re.compile(r"^--\s*instants:\s*(.*)$")
_PER_DIALECT = re.compile(r"^--\s*per-dialect\s*$")
_FRAGMENT_USE = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@dataclass(frozen=True)
class Query:
    """One named statement of a dialect.

    Attributes:
        name: the query's name (unique across concerns).
        sql: the statement, fragments expanded, ``:name`` parameters.
        instants: result columns that are instants.
        concern: the common file that declares it (``outbox``, ``rehearsal``, ...).
        per_dialect: True when each dialect writes its own SQL for it.
    """

    name: str
    sql: str
    instants: frozenset[str]
    concern: str
    per_dialect: bool


@dataclass
class _Block:
    kind: str
    name: str
    lines: list[str]
    instants: frozenset[str] = frozenset()
    per_dialect: bool = False
    in_header: bool = True

    @property
    def body(self) -> str:
        return "\n".join(line for line in self.lines if not line.strip().startswith("--")).strip()


def parse_blocks(text: str, source: str) -> list[_Block]:
    """Split a named-block file into blocks (comments kept out of ``body``).

    Raises:
        ValueError: SQL before the first block, a duplicate name, or a malformed ``instants`` line.
    """
    blocks: list[_Block] = []
    seen: set[tuple[str, str]] = set()
    current: _Block | None = None
    for line in text.splitlines():
        stripped = line.strip()
        head = _HEAD.match(stripped)
        if head:
            key = (head.group(1), head.group(2))
            if key in seen:
                raise ValueError(f"duplicate {key[0]} {key[1]!r} in {source}")
            seen.add(key)
            current = _Block(kind=key[0], name=key[1], lines=[])
            blocks.append(current)
            continue
        if current is None:
            if stripped and not stripped.startswith("--"):
                raise ValueError(f"SQL before the first '-- name:' in {source}")
            continue
        if current.in_header and stripped.startswith("--"):
            instants = _INSTANTS.match(stripped)
            if instants:
                names = [n.strip() for n in instants.group(1).split(",") if n.strip()]
                if not names or not all(re.fullmatch(r"[a-z_][a-z0-9_]*", n) for n in names):
                    raise ValueError(f"malformed instants line of {current.name!r} in {source}")
                current.instants = frozenset(names)
                continue
            if _PER_DIALECT.match(stripped):
                current.per_dialect = True
                continue
        elif stripped:
            current.in_header = False
        current.lines.append(line)
    return blocks


def _read(package: str, filename: str) -> str:
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")


def load_dialect(package: str) -> dict[str, Query]:
    """Every query of the dialect shipped in ``package`` (e.g. ``fencepost.store.sqlite``).

    Returns:
        ``{name: Query}`` over all concerns.
    Raises:
        ValueError: see the module docstring for what loading refuses.
    """
    declared: dict[str, tuple[str, _Block]] = {}
    fragments: dict[str, _Block] = {}
    for concern in CONCERNS:
        source = f"{COMMON_PACKAGE}/{concern}.sql"
        for block in parse_blocks(_read(COMMON_PACKAGE, f"{concern}.sql"), source):
            if block.kind == "fragment":
                if block.name in fragments:
                    raise ValueError(f"fragment {block.name!r} is declared twice")
                fragments[block.name] = block
                continue
            if block.name in declared:
                raise ValueError(f"query {block.name!r} is declared in {declared[block.name][0]} and {concern}")
            if block.per_dialect and block.body:
                raise ValueError(f"per-dialect query {block.name!r} has SQL in {source}; write it in each dialect")
            if not block.per_dialect and not block.body:
                raise ValueError(f"query {block.name!r} of {source} has no SQL")
            declared[block.name] = (concern, block)
    source = f"{package}/{DIALECT_FILE}"
    overrides: dict[str, _Block] = {}
    for block in parse_blocks(_read(package, DIALECT_FILE), source):
        target = fragments.get(block.name) if block.kind == "fragment" else (declared.get(block.name) or ("", None))[1]
        if target is None or not target.per_dialect:
            raise ValueError(f"{source} overrides {block.kind} {block.name!r}, which is not declared per-dialect")
        if block.instants:
            raise ValueError(f"{source} declares instants for {block.name!r}; the common declaration is the contract")
        if not block.body:
            raise ValueError(f"{block.kind} {block.name!r} of {source} has no SQL")
        overrides[f"{block.kind}:{block.name}"] = block
    for kind, blocks in (("fragment", fragments), ("name", {n: b for n, (_, b) in declared.items()})):
        for name, block in blocks.items():
            if block.per_dialect and f"{kind}:{name}" not in overrides:
                raise ValueError(f"{source} lacks the per-dialect {'fragment' if kind == 'fragment' else 'query'} "
                                 f"{name!r}")
    bodies = {name: overrides[f"fragment:{name}"].body if block.per_dialect else block.body
              for name, block in fragments.items()}

    def expand(sql: str, name: str) -> str:
        def one(match: re.Match[str]) -> str:
            if match.group(1) not in bodies:
                raise ValueError(f"query {name!r} uses unknown fragment {match.group(1)!r}")
            return bodies[match.group(1)]
        return _FRAGMENT_USE.sub(one, sql)

    queries: dict[str, Query] = {}
    for name, (concern, block) in declared.items():
        body = overrides[f"name:{name}"].body if block.per_dialect else block.body
        queries[name] = Query(name=name, sql=expand(body, name), instants=block.instants, concern=concern,
                              per_dialect=block.per_dialect)
    return queries


@cache
def dialect_queries(package: str) -> Mapping[str, Query]:
    """``load_dialect(package)``, loaded once per process and read-only (what stores use)."""
    return MappingProxyType(load_dialect(package))


def to_pyformat(sql: str) -> str:
    """Rewrite ``:name`` parameters as psycopg ``%(name)s`` (and escape literal ``%``).

    ``::type`` casts are left alone (the lookbehind refuses a preceding colon).
    """
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
