"""``fencepost backup DEST``: a consistent copy of a SQLite control database, taken while it runs (ADR 0066)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, fail, handled
from fencepost.core.errors import InvalidInput
from fencepost.store.sqlite.backup import backup_sqlite
from fencepost.store.url import DEFAULT_URL, parse_database_url

#: Progress is printed (on stderr) for databases of more than this many pages.
PROGRESS_ABOVE_PAGES = 16384


def backup(dest: Annotated[Path, typer.Argument(metavar="DEST", help="The backup file to create (never "
                                                                       "overwritten).")],
           database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Copy the SQLite control database into DEST with SQLite's online backup API: one consistent snapshot,
    the commits still in its -wal file included, while workers and serve go on. A plain file copy of a WAL
    database misses those commits. Big databases print their progress on stderr. For PostgreSQL, use pg_dump
    (docs/operations.md, Backups); restoring is described there too."""
    with handled():
        parsed = parse_database_url(database)
        if parsed.backend != "sqlite":
            fail(InvalidInput("fencepost backup copies SQLite databases; for PostgreSQL use pg_dump, e.g. "
                              "pg_dump --format=custom --file=DEST 'postgresql://...' (add --schema=NAME when "
                              "fencepost runs in its own schema; docs/operations.md, Backups)"))
        assert parsed.path is not None
        shown = {"last": -1}

        def progress(copied: int, total: int) -> None:
            if total <= PROGRESS_ABOVE_PAGES:
                return
            percent = copied * 100 // max(total, 1)
            if percent // 10 > shown["last"] // 10 or copied == total:
                shown["last"] = percent
                sys.stderr.write(f"backup: {percent}% ({copied}/{total} pages)\n")

        result = backup_sqlite(parsed.path, dest, progress=progress)
    data = {"dest": str(result.dest), "bytes": result.bytes, "pages": result.pages, "integrity": result.integrity}
    emit(json, data, lambda: typer.echo(f"backup: wrote {result.dest} ({result.bytes} bytes, {result.pages} "
                                        f"pages, integrity {result.integrity})"))
