"""The ``file:`` URI that opens a SQLite database file with a fixed mode.

A path written into a URI as it is loses its meaning at the first ``#`` (the rest is a fragment SQLite
ignores, ``?mode=...`` included) or ``?`` (the rest is a query), and a ``%`` starts an escape: SQLite then
opens, and without the mode creates, another file. Percent-encoding the path keeps it the file it names.
"""

from __future__ import annotations

from urllib.parse import quote


def file_uri(path: str, mode: str) -> str:
    """``file:<percent-encoded path>?mode=<mode>``, for ``sqlite3.connect(..., uri=True)``.

    Args:
        path: a database file path, relative or absolute, any characters.
        mode: SQLite's ``mode`` parameter: ``ro``, ``rw`` or ``rwc``.
    Returns:
        The URI; every character of ``path`` but letters, digits, ``/`` and ``_.-~`` is percent-encoded.
    """
    return f"file:{quote(path, safe='/')}?mode={mode}"
