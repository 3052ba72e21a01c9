"""Small pure parts of issue 11: a scenario's duration as the server-rendered page shows it, the access log's
query redaction, and the cursor of a page."""

from __future__ import annotations

import pytest

from fencepost.api.access_log import loggable_query
from fencepost.api.paging import decode_cursor, encode_cursor, etag_of, page_after
from fencepost.core.errors import InvalidInput
from fencepost.ui.pages import duration


def test_duration_of_a_scenario() -> None:
    assert duration("2026-01-01T12:00:05.100000Z", "2026-01-01T12:00:05.520000Z") == "0.42 s"
    assert duration("2026-01-01T12:00:00.000000Z", "2026-01-01T12:01:05.000000Z") == "1 min 05 s"
    assert duration("2026-01-01T12:00:00.000000Z", None) == "—" and duration(None, None) == "—"


def test_secret_named_query_values_are_redacted() -> None:
    assert loggable_query("") == ""
    assert loggable_query("limit=5&order=newest") == "limit=5&order=newest"
    assert loggable_query("api_token=abc&X-Signature=s&limit=1&passwordHint=p") == (
        "api_token=[redacted]&X-Signature=[redacted]&limit=1&passwordHint=[redacted]")


def test_pages_walk_every_row_once_and_refuse_a_foreign_cursor() -> None:
    rows = [str(i) for i in range(7)]
    seen, cursor = [], None
    while True:
        page, cursor = page_after(rows, lambda r: r, cursor, 3)
        seen += page
        if cursor is None:
            break
    assert seen == rows
    assert decode_cursor(encode_cursor("2026|run_x")) == "2026|run_x"
    with pytest.raises(InvalidInput):
        page_after(rows, lambda r: r, encode_cursor("99"), 3)
    with pytest.raises(InvalidInput):
        decode_cursor("%%%")


def test_the_etag_ignores_the_clock_only() -> None:
    assert etag_of({"now": "a", "items": [1]}) == etag_of({"now": "b", "items": [1]})
    assert etag_of({"now": "a", "items": [1]}) != etag_of({"now": "a", "items": [2]})
