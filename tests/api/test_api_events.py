"""The relay's read endpoints (issue 15): ``GET /v1/events/outbox/summary`` and ``GET /v1/events/outbox``, over
publication rows put in every state through the store's real ports, on the API's SQLite store (its
``ManualClock`` makes every instant exact) and once on each selected backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.conftest import AUTH, TOKEN, Api, assert_problem, build_api
from fencepost.api import create_app
from fencepost.store import Store
from fencepost.store.host_records import EventLease
from helpers.relay_rows import append_event, claim_all, dead_letter, fail, one_dead_letter, publish


def at(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"2026-01-01T00:{minutes:02d}:{rest:02d}.000000Z"


def every_state(api: Api) -> dict[str, EventLease]:
    """ev-1 dead-lettered, ev-2 published, ev-3 retry_pending, ev-4 processing, ev-5 pending; now is t=100 s.

    The oldest row (ev-1) and the next (ev-2) are out of the backlog, so the backlog's oldest is ev-3 (t=20 s).
    """
    append_event(api.store, "ev-1", event_type="InvocationFailed")
    for event_id in ("ev-2", "ev-3", "ev-4"):
        api.clock.advance(10)
        append_event(api.store, event_id)
    api.clock.advance(5)  # t=35: one relay claims the four
    leases = claim_all(api.store, owner="relay-a", lease_seconds=600)
    assert sorted(leases) == ["ev-1", "ev-2", "ev-3", "ev-4"]
    dead_letter(api.store, leases["ev-1"], "HTTP 500 from the receiver (attempt 1 of 1)")
    publish(api.store, leases["ev-2"])
    fail(api.store, leases["ev-3"], "connection refused", retry_in_seconds=30)
    api.clock.advance(5)  # t=40
    append_event(api.store, "ev-5")
    api.clock.advance(60)  # t=100
    return leases


def row(event_id: str, status: str, *, created: int, updated: int | None, attempts: int = 1,
        event_type: str = "StateTransitioned", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": event_id, "tenant_id": "acme", "space_id": "shop", "type": event_type, "destination": "host",
        "headers": {}, "status": status, "attempts": attempts, "lease_owner": None, "lease_until": None,
        "available_at": at(created), "published_at": None, "last_error": None, "created_at": at(created),
        "updated_at": None if updated is None else at(updated)}
    base.update(fields)
    return base


EXPECTED_ROWS = [
    row("ev-1", "dead_lettered", created=0, updated=35, event_type="InvocationFailed",
        last_error="HTTP 500 from the receiver (attempt 1 of 1)"),
    row("ev-2", "published", created=10, updated=35, published_at=at(35)),
    row("ev-3", "retry_pending", created=20, updated=35, available_at=at(65), last_error="connection refused"),
    row("ev-4", "processing", created=30, updated=35, lease_owner="relay-a",
        lease_until=at(635)),
    row("ev-5", "pending", created=40, updated=40, attempts=0),
]


def test_summary_of_an_empty_store_says_nothing_waits(api: Api) -> None:
    response = api.client.get("/v1/events/outbox/summary")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "now": at(0), "counts": {"pending": 0, "processing": 0, "published": 0, "retry_pending": 0,
                                 "dead_lettered": 0},
        "backlog": 0, "oldest_unpublished_at": None, "oldest_unpublished_age_seconds": None}
    listed = api.client.get("/v1/events/outbox", params={"status": "dead_lettered"})
    assert listed.status_code == 200, listed.text
    assert listed.json() == {"now": at(0), "items": []}


def test_summary_counts_every_status_and_ages_the_oldest_backlog_row(api: Api) -> None:
    every_state(api)
    response = api.client.get("/v1/events/outbox/summary")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "now": at(100), "counts": {"pending": 1, "processing": 1, "published": 1, "retry_pending": 1,
                                   "dead_lettered": 1},
        # pending + retry_pending + processing; the older dead letter and published row are not waiting
        "backlog": 3, "oldest_unpublished_at": at(20), "oldest_unpublished_age_seconds": 80.0}


def test_dead_letters_list_with_type_attempts_last_error_and_when(api: Api) -> None:
    every_state(api)
    response = api.client.get("/v1/events/outbox", params={"status": "dead_lettered"})
    assert response.status_code == 200, response.text
    assert response.json() == {"now": at(100), "items": [EXPECTED_ROWS[0]]}


def test_every_row_oldest_first_with_every_field_and_the_limit(api: Api) -> None:
    every_state(api)
    whole = api.client.get("/v1/events/outbox")
    assert whole.status_code == 200, whole.text
    assert whole.json() == {"now": at(100), "items": EXPECTED_ROWS}
    for status, expected in (("pending", "ev-5"), ("processing", "ev-4"), ("retry_pending", "ev-3"),
                             ("published", "ev-2")):
        only = api.client.get("/v1/events/outbox", params={"status": status}).json()["items"]
        assert [r["event_id"] for r in only] == [expected], status
    first_two = api.client.get("/v1/events/outbox", params={"limit": 2}).json()["items"]
    assert [r["event_id"] for r in first_two] == ["ev-1", "ev-2"]


def test_no_lease_token_in_the_relay_endpoints(api: Api) -> None:
    leases = every_state(api)
    token = leases["ev-4"].token  # ev-4 is still processing under it
    assert len(token) >= 16
    for url in ("/v1/events/outbox", "/v1/events/outbox?status=processing", "/v1/events/outbox/summary", "/"):
        response = api.client.get(url)
        assert response.status_code == 200, (url, response.text)
        assert token not in response.text, url


@pytest.mark.parametrize("query", ["status=nope", "status=DEAD_LETTERED", "limit=0", "limit=1001", "limit=x"])
def test_bad_queries_are_validation_problems(api: Api, query: str) -> None:
    assert_problem(api.client.get(f"/v1/events/outbox?{query}"), 422, "validation-error")


def test_unmigrated_store_is_schema_not_ready(unmigrated_api: Api) -> None:
    for url in ("/v1/events/outbox/summary", "/v1/events/outbox"):
        assert_problem(unmigrated_api.client.get(url), 503, "schema-not-ready")


@pytest.fixture
def closed_api(tmp_path: Path) -> Iterator[Api]:
    yield from build_api(tmp_path, open_reads=False)


def test_closed_reads_need_the_token(closed_api: Api) -> None:
    for url in ("/v1/events/outbox/summary", "/v1/events/outbox"):
        assert_problem(closed_api.client.get(url), 401, "unauthorized")
        assert closed_api.client.get(url, headers=AUTH).status_code == 200
    one_dead_letter(closed_api.store, "ev-secret", "HTTP 500")
    page = closed_api.client.get("/")  # drawn empty: app.js loads the panel with the token
    assert page.status_code == 200 and 'id="relay-section"' in page.text
    assert "ev-secret" not in page.text and "No events waiting" not in page.text


def test_the_page_renders_the_relay_panel_from_the_same_views(api: Api) -> None:
    empty = api.client.get("/")
    assert empty.status_code == 200
    assert "No events waiting" in empty.text
    every_state(api)
    page = api.client.get("/").text
    assert "No events waiting" not in page
    assert 'data-event="ev-1"' in page and "HTTP 500 from the receiver (attempt 1 of 1)" in page
    assert "InvocationFailed" in page
    assert 'data-event="ev-3"' not in page  # a retry is backlog, not a dead letter
    assert "1 min 20 s" in page and "2026-01-01 00:00:20 UTC" in page  # oldest pending: age and absolute time


# ── on each selected backend (PostgreSQL's clock is its server's: instants are compared, never fixed) ──
def test_summary_and_dead_letters_on_each_backend(store: Store) -> None:
    one_dead_letter(store, "ev-dead", "HTTP 410 Gone")
    append_event(store, "ev-waiting")
    with TestClient(create_app(store, api_token=TOKEN, ui=False)) as client:
        summary = client.get("/v1/events/outbox/summary").json()
        rows = client.get("/v1/events/outbox").json()["items"]
        dead = client.get("/v1/events/outbox", params={"status": "dead_lettered"}).json()["items"]
    assert summary["counts"] == {"pending": 1, "processing": 0, "published": 0, "retry_pending": 0,
                                 "dead_lettered": 1}
    assert summary["backlog"] == 1
    waiting = next(r for r in rows if r["event_id"] == "ev-waiting")
    assert summary["oldest_unpublished_at"] == waiting["created_at"]
    assert summary["oldest_unpublished_age_seconds"] >= 0
    assert [(r["event_id"], r["attempts"], r["last_error"]) for r in dead] == [("ev-dead", 1, "HTTP 410 Gone")]
    assert dead[0]["updated_at"] is not None and dead[0]["updated_at"] >= dead[0]["created_at"]
