"""An online backup of a SQLite control database (issue 11 item 9; ADR 0066).

A plain copy of a WAL database file misses every commit still in its ``-wal`` file, and a copy taken while a
process writes can be torn. SQLite's online backup API copies the database page by page as one consistent
snapshot, WAL content included, while other processes go on reading and writing.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fencepost.core.errors import InvalidInput, StoreUnavailable
from fencepost.store.sqlite.file_uri import file_uri

#: Pages copied per step (with 4 KiB pages, 16 MiB): between steps other connections may write.
PAGES_PER_STEP = 4096


@dataclass(frozen=True)
class BackupResult:
    """What was written: ``dest``, its size in bytes, its page count and its ``PRAGMA integrity_check``."""

    dest: Path
    bytes: int
    pages: int
    integrity: str


def backup_sqlite(source: str, dest: Path, *, progress: Callable[[int, int], None] | None = None,
                  pages_per_step: int = PAGES_PER_STEP) -> BackupResult:
    """Copy the SQLite database at ``source`` into the new file ``dest`` with ``sqlite3.Connection.backup``.

    The copy is written beside ``dest`` under a temporary name, synced to disk, checked with
    ``PRAGMA integrity_check`` and only then renamed to ``dest``: an interrupted backup leaves no file that
    looks complete. The result is a database in DELETE journal mode (one self-contained file); fencepost
    switches it back to WAL when it opens it.

    Args:
        source: the database file path (it must exist; it is opened read-only).
        dest: the backup file to create; refused when it exists.
        progress: called after each step with ``(pages_copied, pages_total)``.
        pages_per_step: pages copied between two chances for other connections to write.
    Raises:
        InvalidInput: ``dest`` exists, or its directory is missing; ``source`` does not exist.
        StoreUnavailable: SQLite could not read the source or write the copy (the message says which).
    """
    if not os.path.isfile(source):
        raise InvalidInput("the control database file does not exist: nothing to back up")
    if dest.exists():
        raise InvalidInput(f"{str(dest)!r} exists already: give a new file name (a backup never overwrites)")
    if not dest.parent.is_dir():
        raise InvalidInput(f"the directory of {str(dest)!r} does not exist")
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        src = sqlite3.connect(file_uri(source, "ro"), uri=True)
    except sqlite3.Error as error:
        raise StoreUnavailable(f"the control database cannot be opened for the backup: {error}") from None
    try:
        out = sqlite3.connect(partial)
        try:
            src.backup(out, pages=pages_per_step,
                       progress=(lambda status, remaining, total: progress(total - remaining, total))
                       if progress is not None else None)
            out.execute("PRAGMA journal_mode = DELETE")
            integrity = str(out.execute("PRAGMA integrity_check").fetchone()[0])
            pages = int(out.execute("PRAGMA page_count").fetchone()[0])
        finally:
            out.close()
        if integrity != "ok":
            raise StoreUnavailable(f"the backup copy fails SQLite's integrity check ({integrity}); the source "
                                   "may be damaged: run `fencepost audit`")
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        os.link(partial, dest)  # never over a file that appeared meanwhile
        _sync_directory(dest.parent)
    except sqlite3.Error as error:
        raise StoreUnavailable(f"the backup failed: {error}") from None
    except FileExistsError:
        raise InvalidInput(f"{str(dest)!r} exists already: give a new file name (a backup never overwrites)") from None
    except OSError as error:
        raise StoreUnavailable(f"the backup could not be written: {error.strerror or error}") from None
    finally:
        src.close()
        for leftover in (partial, partial.with_name(partial.name + "-journal")):
            if leftover.exists():
                leftover.unlink()
    return BackupResult(dest=dest, bytes=dest.stat().st_size, pages=pages, integrity=integrity)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
