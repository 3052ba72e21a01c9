"""The workflow-run routes (issue 18; ADR 0072) through the real app in process: start a Run (201 new, 200 the
existing one for the same plan id), read it and the list (ETag, 304), cancel it (the not-started steps at once),
and the problem+json answers for bad input, unknown ids and a missing token. The Run is driven by the real
worker (``exec_kit``) on a real SQLite control file and target."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from delivery.kit import release
from fencepost.api import create_app
from fencepost.store import open_store
from workflows.exec_kit import Installed, Steps, install, log_task, write_workflow_package

TOKEN = "workflow-routes-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FLOW = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",))}, tasks={"ta": log_task("a"), "tb": log_task("b")})


@dataclass
class World:
    kit: Installed
    client: TestClient


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("wfapi")
    store = open_store(f"sqlite:///{root / 'control.db'}", create=True)
    store.migrate()
    kit = install(store, root, FLOW, name="shop")
    lone = root / "lone"
    lone.mkdir()
    release(store, write_workflow_package(lone, "lone", FLOW), root / "work")  # installed, delivered nowhere
    with TestClient(create_app(store, api_token=TOKEN, ui=False), raise_server_exceptions=False) as client:
        yield World(kit, client)
    store.close()


def start(world: World, plan_id: str, **extra: object) -> dict[str, object]:
    response = world.client.post("/v1/workflow-runs", headers=AUTH,
                                 json={"package": "shop", "workflow": "flow", "plan_id": plan_id, **extra})
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def test_start_replay_read_list_and_settle(world: World) -> None:
    client = world.client
    assert client.post("/v1/workflow-runs", json={"package": "shop", "workflow": "flow"}).status_code == 401
    created = start(world, "p1", target="t1", inputs={"day": "2026-12-01"})
    run = created["run"]
    assert isinstance(run, dict) and created["outcome"] == "created"
    assert (run["status"], run["package"], run["target"]["name"]) == ("running", "shop", "t1")
    assert [(s["key"], s["status"]) for s in run["steps"]] == [("a", "ready"), ("b", "waiting")]
    again = client.post("/v1/workflow-runs", headers=AUTH, json={"package": "shop", "workflow": "flow",
                                                                 "plan_id": "p1", "target": "t1",
                                                                 "inputs": {"day": "2026-12-01"}})
    assert again.status_code == 200 and again.json()["outcome"] == "existing", again.text
    assert again.json()["run_id"] == created["run_id"]
    run_id = str(created["run_id"])

    shown = client.get(f"/v1/workflow-runs/{run_id}")
    assert shown.status_code == 200 and shown.json() == run
    assert client.get(f"/v1/workflow-runs/{run_id}", headers={"If-None-Match": shown.headers["ETag"]}
                      ).status_code == 304
    listed = client.get("/v1/workflow-runs", params={"status": "running"}).json()["items"]
    assert [r["run_id"] for r in listed] == [run_id] and "steps" not in listed[0]

    world.kit.drain(run_id)
    settled = client.get(f"/v1/workflow-runs/{run_id}", headers={"If-None-Match": shown.headers["ETag"]})
    assert settled.status_code == 200 and settled.json()["status"] == "succeeded"  # changed: a new ETag
    assert [s["status"] for s in settled.json()["steps"]] == ["succeeded", "succeeded"]
    assert [r["run_id"] for r in client.get("/v1/workflow-runs?status=succeeded").json()["items"]] == [run_id]
    assert client.get("/v1/workflow-runs?status=running").json()["items"] == []
    assert world.kit.log() == ["a", "b"]


def test_cancel_finalizes_the_not_started_steps_at_once(world: World) -> None:
    client = world.client
    run_id = start(world, "p-cancel")["run_id"]
    assert client.post(f"/v1/workflow-runs/{run_id}/cancel", json={"reason": "x"}).status_code == 401
    blank = client.post(f"/v1/workflow-runs/{run_id}/cancel", headers=AUTH, json={"reason": "   "})
    assert blank.status_code == 422 and "a cancel reason is 1 to 1000 characters" in blank.text, blank.text
    nul = client.post(f"/v1/workflow-runs/{run_id}/cancel", headers=AUTH, json={"reason": "r\u0000x"})
    assert nul.status_code == 422 and "reason holds a NUL character" in nul.text, nul.text  # SQLite stored it
    forged = client.post(f"/v1/workflow-runs/{run_id}/cancel", headers=AUTH,
                         json={"reason": "\u001b[2J\u001b[Hrun x succeeded\nall good"})
    assert forged.status_code == 422 and "a cancel reason is one line of plain text" in forged.text, forged.text
    tabbed = client.post(f"/v1/workflow-runs/{run_id}/cancel", headers=AUTH, json={"reason": "x", "actor": "a\tb"})
    assert tabbed.status_code == 422 and "an actor is one line of plain text" in tabbed.text, tabbed.text
    done = client.post(f"/v1/workflow-runs/{run_id}/cancel", headers=AUTH, json={"reason": "maintenance"})
    assert done.status_code == 200, done.text
    body = done.json()
    # no worker ran it: a was ready, b waiting; both are cancelled by this request and the Run settles now
    assert (body["outcome"], body["cancelled_now"], body["still_running"]) == ("requested", ["a", "b"], [])
    assert body["run"]["status"] == "cancelled" and body["run"]["cancel"]["reason"] == "maintenance"
    late = client.post(f"/v1/workflow-runs/{run_id}/cancel", headers=AUTH, json={"reason": "again"})
    assert late.status_code == 200 and late.json()["outcome"] == "settled" and late.json()["cancelled_now"] == []


@pytest.mark.parametrize(("method", "url", "body", "status", "needle"), [
    ("get", "/v1/workflow-runs/wfr_nope", None, 404, "no workflow run or plan id wfr_nope"),
    ("post", "/v1/workflow-runs/wfr_nope/cancel", {"reason": "x"}, 404, "no workflow run or plan id wfr_nope"),
    ("post", "/v1/workflow-runs/wfr_nope/cancel", {}, 422, "reason"),
    ("get", "/v1/workflow-runs?status=bogus", None, 422, "status"),
    ("get", "/v1/workflow-runs?limit=0", None, 422, "limit"),
    ("post", "/v1/workflow-runs", {"package": "nopkg", "workflow": "flow"}, 404, "nopkg is not installed"),
    ("post", "/v1/workflow-runs", {"package": "shop", "workflow": "nope"}, 404, "no workflow 'nope'"),
    ("post", "/v1/workflow-runs", {"package": "shop", "workflow": "flow", "target": "nobody"}, 404,
     "no live delivery target nobody"),
    ("post", "/v1/workflow-runs", {"package": "shop", "workflow": "flow", "inputs": [1]}, 422, "inputs"),
    ("post", "/v1/workflow-runs", {"package": "shop", "workflow": "flow", "extra": 1}, 422, "extra"),
    ("post", "/v1/workflow-runs", {"package": "lone", "workflow": "flow"}, 422, "names no target"),
])
def test_bad_requests_are_problems(world: World, method: str, url: str, body: object, status: int,
                                   needle: str) -> None:
    response = world.client.request(method.upper(), url, headers=AUTH, json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    assert needle in response.text, response.text
