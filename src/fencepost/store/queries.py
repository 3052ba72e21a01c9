"""Named SQL blocks loaded once from a dialect's ``queries.sql`` (procrastinate habit, STYLE.md).

File format: a block starts with ``-- name: <query_name>``; the comment lines after it say what the
query is for; the SQL runs to the next ``-- name:``. Parameters are written ``:name`` in both
dialects; the PostgreSQL store converts them to psycopg's ``%(name)s`` when loading.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    """Parse a named-block SQL file shipped inside ``package``.

    Returns:
        ``{query_name: sql_text}`` with comments before the SQL kept (they are harmless).
    Raises:
        ValueError: on a duplicate name or text before the first ``-- name:``.
    """
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    queries: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        match = _NAME.match(line.strip())
        if match:
            if current is not None:
                queries[current] = "\n".join(lines).strip()
            current = match.group(1)
            if current in queries:
                raise ValueError(f"duplicate query name {current!r} in {package}/{filename}")
            lines = []
        elif current is None:
            if line.strip() and not line.strip().startswith("--"):
                raise ValueError(f"SQL before the first '-- name:' in {package}/{filename}")
        else:
            lines.append(line)
    if current is not None:
        queries[current] = "\n".join(lines).strip()
    return queries


def to_pyformat(sql: str) -> str:
    """Rewrite ``:name`` parameters as psycopg ``%(name)s`` (and escape literal ``%``).

    ``::type`` casts are left alone (the lookbehind refuses a preceding colon).
    """
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


DIALECT_FILES = ("queries.sql", "audit.sql", "workflows.sql")


def load_dialect(package: str) -> dict[str, str]:
    """Every named query of a backend: the union of ``DIALECT_FILES`` in ``package``.

    Raises:
        ValueError: a name defined in two files.
    """
    merged: dict[str, str] = {}
    for filename in DIALECT_FILES:
        for name, sql in load_queries(package, filename).items():
            if name in merged:
                raise ValueError(f"query {name!r} is defined twice in {package}")
            merged[name] = sql
    return merged
