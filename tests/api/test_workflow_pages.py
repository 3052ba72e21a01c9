"""The workflow Run pages over real HTTP semantics (TestClient on the real app, a real SQLite store and target, Runs
driven by the real in-process worker): the list and its filter, the Run page's DAG and steps table (escaped),
the page JSON's ETag, closed reads, unknown Runs and bad filters; and the pure DAG layout (issue 18)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.conftest import AUTH, TOKEN, assert_problem
from fencepost.api import create_app
from fencepost.store import Store, open_store
from fencepost.ui.dag import GAP_LAYER, NODE_H, WRAP, layers, layout
from workflows.exec_kit import Installed, Steps, fan, install, log_task

DIAMOND_SHAPE = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",)), "c": ("tc", ("a",)), "d": ("td", ("b", "c"))},
                      tasks={f"t{k}": log_task(k) for k in "abcd"})


@dataclass
class Site:
    store: Store
    kit: Installed
    client: TestClient
    closed: TestClient


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    store = open_store(f"sqlite:///{tmp_path / 'control.db'}")
    store.migrate()
    kit = install(store, tmp_path, DIAMOND_SHAPE)
    with TestClient(create_app(store, api_token=TOKEN), raise_server_exceptions=False) as client, \
            TestClient(create_app(store, api_token=TOKEN, open_reads=False), raise_server_exceptions=False) as closed:
        yield Site(store, kit, client, closed)
    store.close()


def test_the_list_and_the_run_page_before_and_after_the_run(site: Site) -> None:
    run_id = site.kit.admit("diamond-1")
    listed = site.client.get("/workflows")
    assert listed.status_code == 200
    assert f'href="/workflows/{run_id}"' in listed.text
    assert "4: 3 waiting, 1 ready" in listed.text
    assert '<a href="/workflows">Workflow runs</a>' in site.client.get("/").text  # in the nav

    page = site.client.get(f"/workflows/{run_id}")
    assert page.status_code == 200
    assert len(re.findall(r'class="node s-', page.text)) == 4
    assert 'data-step="a" data-status="ready"' in page.text
    assert page.text.count("<line ") == 4  # a->b, a->c, b->d, c->d
    assert 'data-terminal="false"' in page.text

    site.kit.drain(run_id)
    body = site.client.get(f"/workflows/{run_id}.json")
    assert body.status_code == 200
    assert (body.json()["status"], body.json()["counts"]["succeeded"]) == ("succeeded", 4)
    again = site.client.get(f"/workflows/{run_id}.json", headers={"If-None-Match": body.headers["ETag"]})
    assert (again.status_code, again.content) == (304, b"")
    with_dag = site.client.get(f"/workflows/{run_id}.json", params={"dag": "true"}).json()["dag"]
    assert with_dag["layers"] == [["a"], ["b", "c"], ["d"]]

    done = site.client.get(f"/workflows/{run_id}")
    assert 'data-terminal="true"' in done.text
    assert len(re.findall(r'class="node s-succeeded"', done.text)) == 4
    invocation = body.json()["steps"][0]["invocation_id"]
    assert f'href="/invocations/{invocation}"' in done.text

    assert run_id in site.client.get("/workflows", params={"status": "succeeded"}).text
    assert run_id not in site.client.get("/workflows", params={"status": "running"}).text
    items = site.client.get("/workflows.json", params={"status": "succeeded"}).json()["items"]
    assert [(r["run_id"], r["steps"], r["counts"]) for r in items] == [(run_id, 4, {"succeeded": 4})]


def test_a_failure_reason_is_escaped_and_dependents_show_skipped(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'control.db'}")
    store.migrate()
    shape = fan(2, task='SELECT * FROM "<script>alert(1)</script>";\n')
    kit = install(store, tmp_path, shape)
    run_id = kit.admit("bad-1")
    kit.drain(run_id)
    with TestClient(create_app(store, api_token=TOKEN), raise_server_exceptions=False) as client:
        page = client.get(f"/workflows/{run_id}").text
    store.close()
    assert "<script>alert" not in page
    assert "no such table: &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'data-step="root" data-status="failed"' in page
    assert 'data-step="join" data-status="skipped"' in page
    join_row = page.split('<tr id="step-join"', 1)[1].split("</tr>", 1)[0]
    assert "dependency_not_succeeded: " in join_row and "skipped" in join_row.split("dependency_not_succeeded: ")[1], \
        join_row


def test_unknown_runs_bad_filters_and_closed_reads(site: Site) -> None:
    missing = site.client.get("/workflows/wfr_nope")
    assert missing.status_code == 404 and "no workflow run or plan id wfr_nope" in missing.text
    assert_problem(site.client.get("/workflows/wfr_nope.json"), 404, "not-found")
    bad = site.client.get("/workflows", params={"status": "sleeping"})
    assert bad.status_code == 422 and "status must be one of running, succeeded" in bad.text
    assert_problem(site.client.get("/workflows.json", params={"limit": "0"}), 422, "invalid-input")

    run_id = site.kit.admit("diamond-2")
    assert_problem(site.closed.get(f"/workflows/{run_id}.json"), 401, "unauthorized")
    assert_problem(site.closed.get("/workflows.json"), 401, "unauthorized")
    assert site.closed.get(f"/workflows/{run_id}.json", headers=AUTH).json()["run_id"] == run_id
    shell = site.closed.get(f"/workflows/{run_id}")  # served without data: app.js draws it with the token
    assert shell.status_code == 200 and 'class="node' not in shell.text and 'id="dag-box"' in shell.text


def test_layers_are_longest_paths_and_wide_layers_fold_into_rows() -> None:
    steps = [{"key": "a", "needs": []}, {"key": "b", "needs": ["a"]}, {"key": "c", "needs": ["a", "b"]},
             {"key": "z", "needs": []}]
    assert layers(steps) == {"a": 0, "b": 1, "c": 2, "z": 0}
    chain = [{"key": f"s{i:03d}", "needs": [f"s{i - 1:03d}"] if i else []} for i in range(128)]
    assert max(layers(chain).values()) == 127  # no recursion limit on a 128-step chain
    drawn = layout([{"key": k, "needs": list(n)} for k, (_, n) in fan(126).steps.items()])
    assert [len(layer) for layer in drawn.layers] == [1, 126, 1]
    by_key = {n.key: n for n in drawn.nodes}
    rows = sorted({n.y for n in drawn.nodes if n.layer == 1})
    assert len(rows) == -(-126 // WRAP)  # folded into rows of at most WRAP
    assert by_key["join"].y >= rows[-1] + NODE_H + GAP_LAYER - 1
    assert all(e.y2 > e.y1 for e in drawn.edges) and len(drawn.edges) == 252
    assert max(n.x for n in drawn.nodes) + drawn.node_w <= drawn.width
    with pytest.raises(ValueError, match="cycle"):
        layers([{"key": "a", "needs": ["b"]}, {"key": "b", "needs": ["a"]}])
    with pytest.raises(ValueError, match="names no step"):
        layers([{"key": "a", "needs": ["ghost"]}])
