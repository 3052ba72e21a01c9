"""Target URLs: ``sqlite:///abs/path.db`` is the one kind a target can be today (ADR 0055).

A PostgreSQL target is a named follow-up (ADR 0057); any other scheme is refused with its name, so an operator
who types ``postgresql://...`` learns that it is not supported yet rather than that the URL is malformed.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from fencepost.core.errors import InvalidInput

SUPPORTED_SCHEMES = ("sqlite",)


def target_path(url: str) -> str:
    """The absolute file path of a SQLite target URL.

    Args:
        url: ``sqlite:///abs/path.db`` (three slashes: an empty host, then an absolute path).
    Returns:
        ``/abs/path.db`` (percent-escapes decoded).
    Raises:
        InvalidInput: another scheme (named), a host part, a relative or empty path, a query or fragment, a
            control character (a NUL, a newline) in the URL or its decoded path.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SUPPORTED_SCHEMES:
        shown = scheme or "(none)"
        raise InvalidInput(f"target URL scheme {shown!r} is not supported: a target is a SQLite database today, "
                           "written sqlite:///absolute/path.db (PostgreSQL targets are a planned follow-up)")
    if parts.netloc:
        raise InvalidInput(f"a sqlite target URL has no host: write sqlite:///absolute/path.db, not {url!r}")
    if parts.query or parts.fragment:
        raise InvalidInput(f"a sqlite target URL takes no query or fragment: {url!r}")
    path = unquote(parts.path)
    if path.startswith("//"):  # sqlite:////abs/path.db: an absolute path pasted after the three slashes
        path = "/" + path.lstrip("/")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in url + path):
        raise InvalidInput(f"a sqlite target URL may not contain control characters (a newline, a tab): {url!r}")
    if not path.startswith("/") or path == "/":
        raise InvalidInput(f"a sqlite target URL needs an absolute file path (sqlite:///absolute/path.db): {url!r}")
    if any(part == ".." for part in PurePosixPath(path).parts):
        raise InvalidInput(f"a sqlite target path may not contain '..': {url!r}")
    return path
