"""Database URLs. The backend is chosen from the URL alone.

Accepted forms:
- ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db`` (SQLAlchemy's convention);
- a bare file path (``fencepost.db``) meaning SQLite;
- ``postgresql://user@host:port/dbname`` (also ``postgres://``).
SQLite options as query parameters: ``journal_mode=wal|delete`` (default ``wal``) and
``synchronous=full|normal`` (default ``full``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from fencepost.core.errors import InvalidInput

DEFAULT_URL = "sqlite:///fencepost.db"
_SQLITE_OPTIONS = {"journal_mode": {"wal", "delete"}, "synchronous": {"full", "normal"}}
#: A URL scheme followed by a colon but not by ``//`` (a one-letter one would be a Windows drive).
_SCHEME_WITHOUT_SLASHES = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)")


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed database URL. ``path`` is set for SQLite, ``dsn`` for PostgreSQL."""

    backend: str
    path: str | None = None
    dsn: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def display(self) -> str:
        """A description safe for logs and errors: no path, no password, no host details."""
        if self.backend == "sqlite":
            return f"sqlite ({self.options.get('journal_mode', 'wal')} journal)"
        return "postgresql"


def parse_database_url(raw: str) -> DatabaseURL:
    """Parse ``raw`` into a ``DatabaseURL``.

    Raises:
        InvalidInput: empty URL, unknown scheme, a scheme without ``//`` (``sqlite:x.db``), unknown or invalid
            SQLite option, ``-`` (a bare path otherwise names a file, every character its own), in-memory SQLite.
    """
    text = (raw or "").strip()
    if not text:
        raise InvalidInput("empty database URL; use sqlite:///path.db or postgresql://...")
    if "://" not in text:
        bare = _SCHEME_WITHOUT_SLASHES.match(text)
        if bare:  # ``sqlite:x.db`` would otherwise become a file named "sqlite:x.db" (a new user's trial)
            raise InvalidInput(f"database URL {bare.group(1)}:... lacks '//': write sqlite:///relative.db, "
                               "sqlite:////absolute.db or postgresql://user@host/dbname (a bare path means SQLite)")
        if text == "-":  # a shell's "standard input": a file named "-" would be created instead (./- is one)
            raise InvalidInput("'-' is not a database: name a SQLite file (sqlite:///path.db or ./-) or a "
                               "postgresql:// URL")
        return _sqlite(text, {})  # every character of a bare path is the file's, '?' and '#' included
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - validates the port and bracketed host now, not at connect time
    except ValueError as error:
        raise InvalidInput(f"malformed database URL: {error}") from None
    scheme = parts.scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return DatabaseURL(backend="postgres", dsn=urlunsplit(("postgresql", *parts[1:])))
    if scheme == "sqlite":
        if parts.netloc:
            raise InvalidInput("a sqlite URL has no host: write sqlite:///relative.db or sqlite:////abs.db")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return _sqlite(path, dict(parse_qsl(parts.query, keep_blank_values=True)))
    raise InvalidInput(f"unsupported database URL scheme {scheme!r}; use sqlite:/// or postgresql://")


def _sqlite(path: str, options: dict[str, str]) -> DatabaseURL:
    if not path:
        raise InvalidInput("the sqlite URL names no file: write sqlite:///relative.db or sqlite:////abs.db")
    if path == ":memory:":
        raise InvalidInput("a SQLite file shared by every fencepost process is needed, not an in-memory database")
    for key, value in options.items():
        allowed = _SQLITE_OPTIONS.get(key)
        if allowed is None:
            raise InvalidInput(f"unknown sqlite URL option {key!r} (known: {', '.join(sorted(_SQLITE_OPTIONS))})")
        if value.lower() not in allowed:
            raise InvalidInput(f"sqlite option {key}={value!r} is not one of {', '.join(sorted(allowed))}")
        options[key] = value.lower()
    return DatabaseURL(backend="sqlite", path=path, options=options)
