"""``GET /workers`` and the worker census in Attempt views and on the operator pages (ADR 0019).

The app's store runs on a ManualClock, so liveness is moved by ``api.clock.advance``: a registration with a
heartbeat of 10 s is live for 30 s after its last beat.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.conftest import AUTH, Api, build_api
from fencepost.outbox.registry import WorkerRegistration
from fencepost.rehearsal.handler import KIND

HEARTBEAT = 10.0


def register(api: Api, worker_id: str, kinds: list[str] | None = None, **extra: Any) -> WorkerRegistration:
    registration = WorkerRegistration(api.store, worker_id, kinds or [KIND], heartbeat_seconds=HEARTBEAT,
                                      host="host-a", pid=4242, **extra)
    assert registration.start()
    return registration


def workers(api: Api) -> dict[str, Any]:
    response = api.client.get("/workers")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [w["id"] for w in items]


def outbox_of(api: Api, run_id: str, attempt_id: str) -> dict[str, Any]:
    response = api.client.get(f"/delivery-rehearsals/{run_id}/attempts/{attempt_id}")
    assert response.status_code == 200, response.text
    outbox: dict[str, Any] = response.json()["outbox"]
    return outbox


def test_workers_lists_live_registrations_then_expired_ones_apart(api: Api) -> None:
    assert workers(api) | {"now": None} == {"now": None, "live": [], "expired": []}
    beating = register(api, "host-a:1:aaaa", concurrency=2)
    register(api, "host-a:2:bbbb", kinds=["other.kind"])
    api.clock.advance(4)
    beating.beat(in_flight=1)
    body = workers(api)
    assert ids(body["live"]) == ["host-a:1:aaaa", "host-a:2:bbbb"] and body["expired"] == []
    first = body["live"][0]
    assert first | {"started_at": None, "last_seen_at": None, "live_until": None, "version": None} == {
        "id": "host-a:1:aaaa", "host": "host-a", "pid": 4242, "kinds": [KIND], "concurrency": 2, "in_flight": 1,
        "heartbeat_seconds": HEARTBEAT, "started_at": None, "last_seen_at": None, "last_seen_seconds": 0.0,
        "live_until": None, "live": True, "version": None}
    assert body["live"][1]["last_seen_seconds"] == 4.0
    api.clock.advance(3 * HEARTBEAT - 4)  # the second one was last seen three intervals ago: expired
    body = workers(api)
    assert ids(body["live"]) == ["host-a:1:aaaa"]
    assert ids(body["expired"]) == ["host-a:2:bbbb"] and body["expired"][0]["live"] is False
    beating.stop()
    body = workers(api)
    assert body["live"] == [] and ids(body["expired"]) == ["host-a:2:bbbb"]


def test_an_attempt_says_when_no_live_worker_serves_its_kind(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    assert attempt["outbox"]["no_live_worker"] is True and attempt["outbox"]["live_workers"] == 0
    api.clock.advance(5)
    outbox = outbox_of(api, run_id, attempt["id"])
    assert (outbox["pending_seconds"], outbox["no_live_worker"], outbox["kind"]) == (5.0, True, KIND)
    other = register(api, "serves-another-kind", kinds=["other.kind"])
    assert outbox_of(api, run_id, attempt["id"])["no_live_worker"] is True
    serving = register(api, "serves-it")
    outbox = outbox_of(api, run_id, attempt["id"])
    assert (outbox["no_live_worker"], outbox["live_workers"]) == (False, 1)
    listed = api.client.get(f"/delivery-rehearsals/{run_id}/attempts").json()["items"][0]["outbox"]
    assert listed["no_live_worker"] is False
    api.clock.advance(3 * HEARTBEAT)  # neither beats: both registrations expire
    assert outbox_of(api, run_id, attempt["id"])["no_live_worker"] is True
    serving.beat(in_flight=0)
    assert outbox_of(api, run_id, attempt["id"])["no_live_worker"] is False
    serving.stop()
    other.stop()
    assert outbox_of(api, run_id, attempt["id"])["no_live_worker"] is True


def test_an_expired_lease_waits_for_a_worker_too_and_a_live_one_is_not_waiting(api: Api) -> None:
    run_id = api.create_run()
    attempt = api.enqueue(run_id)
    api.store.transact(lambda tx: tx.outbox.claim(owner="gone", kinds=[KIND], limit=1, lease_seconds=30))
    outbox = outbox_of(api, run_id, attempt["id"])
    # held by a live lease: nothing waits, whether or not a worker is registered
    assert (outbox["status"], outbox["lease_expired"], outbox["pending_seconds"], outbox["no_live_worker"]) == (
        "PROCESSING", False, None, False)
    api.clock.advance(31)
    outbox = outbox_of(api, run_id, attempt["id"])
    assert (outbox["lease_expired"], outbox["no_live_worker"]) == (True, True)
    register(api, "taker")
    assert outbox_of(api, run_id, attempt["id"])["no_live_worker"] is False


@pytest.fixture
def closed_reads(tmp_path: Path) -> Iterator[Api]:
    yield from build_api(tmp_path, open_reads=False)


def test_workers_needs_the_token_when_reads_are_closed(closed_reads: Api) -> None:
    assert closed_reads.client.get("/workers").status_code == 401
    assert closed_reads.client.get("/workers", headers=AUTH).json()["live"] == []


def test_the_index_page_shows_live_workers_and_expired_ones(api: Api) -> None:
    page = api.client.get("/").text
    assert "No live worker: nothing claims commands." in page
    beating = register(api, "host-a:1:aaaa")
    register(api, "host-a:2:dead")
    api.clock.advance(3 * HEARTBEAT - 1)
    beating.beat(in_flight=0)
    api.clock.advance(1)
    page = api.client.get("/").text
    assert '<tr data-worker="host-a:1:aaaa">' in page and "No live worker" not in page
    assert '<tr data-worker="host-a:2:dead">' not in page
    assert "Stopped renewing (expired): <code>host-a:2:dead</code> last seen 30 s ago" in page


def test_the_rehearsal_page_shows_the_wait_and_the_missing_worker(api: Api) -> None:
    run_id = api.create_run()
    api.enqueue(run_id)
    api.clock.advance(65)
    page = api.client.get(f"/rehearsals/{run_id}").text
    assert '<dd data-field="pending-for">1 min 05 s</dd>' in page
    assert "No live worker serves this kind</strong> (rehearsal.attempt)" in page
    register(api, "serves-it")
    page = api.client.get(f"/rehearsals/{run_id}").text
    assert "No live worker serves this kind" not in page
    assert '<dd data-field="pending-for">1 min 05 s</dd>' in page
