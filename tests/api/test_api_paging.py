"""Issue 11 item 11 over HTTP: rehearsal rows carry their latest Attempt, Attempt count and gate verdict; lists
come a page at a time by cursor; a poll that sends the last ETag gets 304 with no body until something it shows
changed; every Attempt carries its lease history; the access log writes one line per request without tokens."""

from __future__ import annotations

import logging

import pytest

from api.conftest import AUTH, TOKEN, Api, assert_problem
from api.test_api_attempts import attempt_url, claim


def test_rows_show_latest_attempt_attempt_count_and_gate(api: Api) -> None:
    run_id = api.create_run()
    (row,) = api.client.get("/delivery-rehearsals").json()["items"]
    assert (row["attempt_count"], row["latest_attempt"], row["gate_passed"]) == (0, None, False)
    api.enqueue(run_id)
    api.run_worker()
    second = api.enqueue(run_id)
    (row,) = api.client.get("/delivery-rehearsals").json()["items"]
    assert row["attempt_count"] == 2
    assert row["latest_attempt"] == {"id": second["id"], "seq": 2, "status": "PENDING", "state": "PENDING"}
    assert row["gate_passed"] is False  # the latest Attempt has not succeeded
    api.run_worker()
    (row,) = api.client.get("/delivery-rehearsals").json()["items"]
    assert row["latest_attempt"]["status"] == "SUCCEEDED" and row["gate_passed"] is True


def test_rehearsals_page_by_cursor_newest_first(api: Api) -> None:
    ids = []
    for _ in range(3):
        ids.append(api.create_run())
        api.clock.advance(1)
    first = api.client.get("/delivery-rehearsals?limit=2").json()
    assert [r["id"] for r in first["items"]] == ids[::-1][:2] and first["next_cursor"]
    second = api.client.get(f"/delivery-rehearsals?limit=2&cursor={first['next_cursor']}").json()
    assert [r["id"] for r in second["items"]] == [ids[0]] and second["next_cursor"] is None
    assert_problem(api.client.get("/delivery-rehearsals?cursor=not-ours"), 422, "invalid-input")
    assert_problem(api.client.get("/delivery-rehearsals?limit=0"), 422, "validation-error")


def test_attempts_page_by_cursor_in_either_order(api: Api) -> None:
    run_id = api.create_run()
    for _ in range(3):
        api.enqueue(run_id)
    url = f"/delivery-rehearsals/{run_id}/attempts"
    newest = api.client.get(f"{url}?order=newest&limit=2").json()
    assert [a["seq"] for a in newest["items"]] == [3, 2] and newest["total"] == 3
    older = api.client.get(f"{url}?order=newest&limit=2&cursor={newest['next_cursor']}").json()
    assert [a["seq"] for a in older["items"]] == [1] and older["next_cursor"] is None
    oldest = api.client.get(url).json()
    assert [a["seq"] for a in oldest["items"]] == [1, 2, 3] and oldest["next_cursor"] is None


@pytest.mark.parametrize("tail", ["/attempts?order=newest&limit=5", "/release-gate", "/attempt-comparison"])
def test_a_poll_with_the_last_etag_gets_304_until_something_changed(api: Api, tail: str) -> None:
    run_id = api.create_run()
    api.enqueue(run_id)
    api.run_worker()
    url = f"/delivery-rehearsals/{run_id}{tail}"
    first = api.client.get(url)
    tag = first.headers["etag"]
    api.clock.advance(5)  # the store's clock moving on is not a change
    again = api.client.get(url, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    api.enqueue(run_id)
    api.run_worker()  # a second Attempt: the list, the gate's checks and the comparison all change
    changed = api.client.get(url, headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json() != first.json()


def test_the_rehearsal_list_answers_304_while_unchanged(api: Api) -> None:
    api.create_run()
    tag = api.client.get("/delivery-rehearsals").headers["etag"]
    assert api.client.get("/delivery-rehearsals", headers={"If-None-Match": tag}).status_code == 304
    api.create_run()
    assert api.client.get("/delivery-rehearsals", headers={"If-None-Match": tag}).status_code == 200


def test_lease_history_shows_claim_expiry_reconcile_and_redelivery(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    url = f"/delivery-rehearsals/{run_id}/attempts"
    assert api.client.get(url).json()["items"][0]["lease_history"] == []
    claim(api, lease_seconds=60)
    api.clock.advance(61)
    assert api.client.post(attempt_url(run_id, attempt["id"], "/reconcile"), headers=AUTH).status_code == 200
    api.run_worker()
    history = api.client.get(url).json()["items"][0]["lease_history"]
    assert [(d["delivery"], d["owner"], d["claim"], d["ended"]) for d in history] == [
        (1, "host:1:abcd", "claim", "reconciled"), (2, "api-test-worker", "takeover", "delivered")]
    assert history[1]["heartbeats"] >= 0 and history[1]["ended_at"] is not None


def test_the_access_log_has_a_line_per_request_and_never_the_token(api_with_log: Api,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fencepost.access"):
        run_id = api_with_log.create_run()
        api_with_log.client.get(f"/delivery-rehearsals/{run_id}?api_token={TOKEN}")
        api_with_log.client.get("/delivery-rehearsals/run_nope")
    lines = [r for r in caplog.records if r.name == "fencepost.access"]
    assert [(r.method, r.path.split("?")[0], r.status) for r in lines] == [  # type: ignore[attr-defined]
        ("POST", "/delivery-rehearsals", 201), ("GET", f"/delivery-rehearsals/{run_id}", 200),
        ("GET", "/delivery-rehearsals/run_nope", 404)]
    assert lines[1].path.endswith("?api_token=[redacted]")  # type: ignore[attr-defined]
    assert all(r.bytes > 0 and r.duration_ms >= 0 for r in lines)  # type: ignore[attr-defined]
    assert TOKEN not in caplog.text and not any(TOKEN in str(vars(r)) for r in lines)


def test_a_path_with_control_characters_cannot_write_a_line_into_the_access_log(
        api_with_log: Api, caplog: pytest.LogCaptureFixture) -> None:
    # the server decodes %0a in a path to a newline: written as is, a client forged a whole access log line
    forged = "x%0a22:49:36 info    POST /delivery-rehearsals 201%1b[2K%e2%80%a8"
    with caplog.at_level(logging.INFO, logger="fencepost.access"):
        api_with_log.client.get(f"/delivery-rehearsals/{forged}")
    (line,) = [r for r in caplog.records if r.name == "fencepost.access"]
    assert line.getMessage() == ("GET /delivery-rehearsals/x%0A22:49:36 info    POST /delivery-rehearsals "
                                 "201%1B[2K%E2%80%A8 404")
    assert line.path == line.getMessage()[4:-4]  # type: ignore[attr-defined]
