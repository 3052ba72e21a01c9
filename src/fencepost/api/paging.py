"""Cursor pages and conditional reads for the lists the operator page polls (ADR 0067).

A cursor is opaque to clients: ``next_cursor`` of one page is passed back as ``cursor`` for the next. A poll
sends the ``ETag`` it last saw as ``If-None-Match`` and gets ``304 Not Modified`` with no body while nothing it
shows changed; the store's clock (``now``) is left out of the tag, so an idle rehearsal answers 304.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from fencepost.core.errors import InvalidInput

T = TypeVar("T")

#: The page size when a request names none, and the largest one allowed.
DEFAULT_PAGE = 50
MAX_PAGE = 500


def encode_cursor(key: str) -> str:
    """``key`` (the last row's sort key, e.g. ``created_at|id``) as a URL-safe opaque cursor."""
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The sort key inside a cursor from ``encode_cursor``.

    Raises:
        InvalidInput: not a cursor this server issued (422).
    """
    try:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", cursor):
            raise ValueError(cursor)
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput("cursor is not one this server issued: pass back a next_cursor unchanged") from None


def page_after(rows: Sequence[T], key: Callable[[T], str], cursor: str | None, limit: int
               ) -> tuple[list[T], str | None]:
    """The ``limit`` rows that follow ``cursor`` in ``rows`` (already in page order), and the next cursor.

    Args:
        rows: every row, in the order pages walk them.
        key: a row's unique sort key (what the cursor carries).
        cursor: ``next_cursor`` of the previous page, or None for the first page.
        limit: page size, 1.. ``MAX_PAGE``.
    Returns:
        The page, and the cursor of the page after it (None on the last page).
    Raises:
        InvalidInput: a cursor that names no row of ``rows`` (the row it named is gone, or it is not ours).
    """
    start = 0
    if cursor is not None:
        wanted = decode_cursor(cursor)
        keys = [key(r) for r in rows]
        if wanted not in keys:
            raise InvalidInput("cursor names no row of this list: start again without a cursor")
        start = keys.index(wanted) + 1
    page = list(rows[start:start + limit])
    more = start + limit < len(rows)
    return page, (encode_cursor(key(page[-1])) if more and page else None)


def etag_of(body: dict[str, Any], *, ignore: tuple[str, ...] = ("now",)) -> str:
    """A strong ETag over ``body`` without its ``ignore`` keys (the clock of the read is not a change)."""
    kept = {k: v for k, v in body.items() if k not in ignore}
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f'"{digest[:32]}"'


def conditional(request: Request, model: type[BaseModel], body: dict[str, Any]) -> Response:
    """``body`` as JSON with its ``ETag``, or an empty ``304`` when the request's ``If-None-Match`` names it.

    ``body`` goes out as ``model`` serializes it (as ``response_model`` would), so a drifting view still fails.
    """
    body = model.model_validate(body).model_dump(mode="json")
    tag = etag_of(body)
    seen = [t.strip() for t in request.headers.get("if-none-match", "").split(",")]
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if tag in seen or "*" in seen:
        return Response(status_code=304, headers=headers)
    return JSONResponse(body, headers=headers)
