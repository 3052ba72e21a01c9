"""The event log's read endpoints: ``GET /v1/events/spaces`` and ``GET /v1/events`` (paged with ``after``),
on the API's SQLite store (its ``ManualClock`` makes every instant exact)."""

from __future__ import annotations

import pytest

from api.conftest import Api, assert_problem
from helpers.relay_rows import append_event


def test_spaces_then_one_space_in_sequence_order_paged_with_after(api: Api) -> None:
    assert api.client.get("/v1/events/spaces").json() == {"items": [], "next_cursor": None}
    for i in range(3):
        append_event(api.store, f"ev-{i}")
    append_event(api.store, "other-0", space="books", event_type="InvocationFailed")
    spaces = api.client.get("/v1/events/spaces")
    assert spaces.status_code == 200, spaces.text
    assert spaces.json() == {"items": [{"tenant_id": "acme", "space_id": "books", "last_sequence": 1},
                                       {"tenant_id": "acme", "space_id": "shop", "last_sequence": 3}],
                             "next_cursor": None}
    first = api.client.get("/v1/events", params={"tenant": "acme", "space": "shop", "limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert [(e["id"], e["sequence"]) for e in page["items"]] == [("ev-0", 1), ("ev-1", 2)]
    assert page["next_after"] == 2
    assert page["items"][0] == {
        "id": "ev-0", "tenant_id": "acme", "space_id": "shop", "sequence": 1,
        "subject": {"subject_type": "ActionInvocation", "subject_id": "ev-0"}, "type": "StateTransitioned",
        "occurred_at": "2026-01-01T00:00:00.000000Z", "recorded_at": "2026-01-01T00:00:00.000000Z",
        "payload": {"id": "ev-0"}, "actor": None}
    rest = api.client.get("/v1/events", params={"tenant": "acme", "space": "shop", "limit": 2, "after": 2}).json()
    assert [e["id"] for e in rest["items"]] == ["ev-2"] and rest["next_after"] is None
    one = api.client.get("/v1/events", params={"tenant": "acme", "space": "shop", "subject_type": "ActionInvocation",
                                               "subject_id": "ev-1"}).json()
    assert [e["id"] for e in one["items"]] == ["ev-1"]


def test_spaces_are_paged_with_a_cursor_until_none_is_left(api: Api) -> None:
    """More spaces than a page holds (a tenant per customer): every space is reached, each once, in order."""
    names = [f"s{i:02d}" for i in range(7)]
    for name in names:
        append_event(api.store, f"ev-{name}", space=name)
    seen: list[str] = []
    cursors: list[str] = []
    params: dict[str, str | int] = {"limit": 3}
    while True:
        page = api.client.get("/v1/events/spaces", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        seen += [s["space_id"] for s in body["items"]]
        if body["next_cursor"] is None:
            break
        cursors.append(body["next_cursor"])
        params = {"limit": 3, "cursor": body["next_cursor"]}
    assert seen == names and len(cursors) == 2
    full = api.client.get("/v1/events/spaces", params={"limit": 7}).json()
    assert len(full["items"]) == 7 and full["next_cursor"] is None  # an exactly full last page has no cursor


@pytest.mark.parametrize("cursor", ["not a cursor!", "WzFd", "eyJhIjogMX0"])
def test_a_spaces_cursor_the_server_did_not_issue_is_a_validation_problem(api: Api, cursor: str) -> None:
    assert_problem(api.client.get("/v1/events/spaces", params={"cursor": cursor}), 422, "invalid-input")


@pytest.mark.parametrize("query", ["space=shop", "tenant=acme", "tenant=acme&space=shop&after=-1",
                                   "tenant=acme&space=shop&limit=0", "tenant=acme&space=shop&limit=1001",
                                   "tenant=acme&space=shop&subject_type=ActionInvocation",
                                   "tenant=acme&space=shop&after=9223372036854775808"])
def test_bad_queries_are_validation_problems(api: Api, query: str) -> None:
    response = api.client.get(f"/v1/events?{query}")
    assert response.status_code == 422, (query, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")


def test_unmigrated_store_is_schema_not_ready(unmigrated_api: Api) -> None:
    for url in ("/v1/events/spaces", "/v1/events?tenant=acme&space=shop"):
        assert_problem(unmigrated_api.client.get(url), 503, "schema-not-ready")
