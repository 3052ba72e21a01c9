"""The workflow Run pages (issue 18: "a page that draws the DAG with each step's live state") in real headless
Chromium against a real ``fencepost serve --no-worker`` and four real ``fencepost worker`` processes running a
fan-out/fan-in DAG (``root`` -> N parallel steps -> ``join``) against a real SQLite target:

- the Runs list shows the admitted Run with its step counts and links to it;
- the Run page draws every step as a box that says its state in words, and while the workers run the page
  changes in place (no reload): at least one observation has some steps succeeded and others not yet;
- then every step and the Run show ``succeeded``, the page says it settled and stops polling;
- every task ran exactly once on the target (its ``fencepost_workflow_tasks`` ledger and the tasks' own log);
- the page's JSON answers 304 to its ETag.

The default variant has 20 steps (18-way fan-out). The issue's 128-step proof (126-way fan-out, four workers) is
``@pytest.mark.soak``: on the shared two-core machine it took 55-60 s for the run alone, over the default budget
(``pytest tests/browser/test_workflow_pages.py -m soak``). Screenshots (whole page, and the DAG alone) go to the
test's tmp dir and the artifacts folder (``conftest.ARTIFACTS``).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, Request, expect

from browser.conftest import ARTIFACTS, Deployment, artifact
from browser.test_operator_page import assert_not_reloaded, mark_no_reload
from browser.test_operator_page_issue11 import PHONE, assert_fits
from fencepost.store import open_store
from helpers.processes import Process, kill_all, start, worker_args
from workflows.exec_kit import fan, install, log_task

#: A little work per parallel step (a recursive CTE of 20,000 rows, a few ms), so the fan-out is visibly under way.
WORK = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 20000) SELECT count(*) FROM n;\n"
#: The join's work: about 2 s alone, so that the page (polling each second) sees the run part-way however fast
#: the fan steps finish (on a loaded machine the whole fan fit between two polls and the page jumped from one
#: step running to all succeeded).
JOIN_WORK = ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 10000000) "
             "SELECT count(*) FROM n;\n")


def _workers(deployment: Deployment, count: int) -> list[Process]:
    started = []
    for number in range(1, count + 1):
        name = f"w{number}"
        args = worker_args(deployment.database, deployment.tmp / f"{name}-work", lease_seconds=15,
                           poll_interval=0.05, worker_id=name)
        started.append(start(args, name=name, stdout_path=deployment.tmp / f"{name}.log", cwd=deployment.tmp,
                             env=deployment.env))
    return started


def _states(page: Page) -> dict[str, int]:
    """How many DAG boxes show each state (read from what the page drew: the box's class and its words)."""
    counted: dict[str, int] = page.evaluate("""() => {
        const out = {};
        for (const n of document.querySelectorAll('#dag .node')) {
          const said = n.querySelector('.node-status').textContent;
          if (!n.classList.contains('s-' + said)) return {mismatch: 1};
          out[said] = (out[said] || 0) + 1;
        }
        return out;
    }""")
    return counted


def _save(page: Page, tmp: Path, name: str) -> None:
    """The whole page, and the DAG alone (readable at 128 steps), in ``tmp`` and the artifacts folder."""
    page.screenshot(path=str(tmp / f"{name}.png"), full_page=True)
    page.locator("#dag-box").screenshot(path=str(tmp / f"{name}-dag.png"))
    artifact(page, name)
    dag = ARTIFACTS / "screenshots" / f"{name}-dag.png"
    page.locator("#dag-box").screenshot(path=str(dag))
    print(f"screenshot saved: {dag}")


def run_fan_live(page: Page, browser: Browser, deployment: Deployment, width: int, *, budget: float) -> None:
    total = width + 2
    tmp = deployment.tmp
    store = open_store(deployment.database)
    shape = fan(width, task=WORK)
    shape = replace(shape, tasks={**shape.tasks, "t_join": log_task("join") + JOIN_WORK})
    kit = install(store, tmp, shape)
    run_id = kit.admit("wide-1")
    deployment.serve("--no-worker")

    page.goto(deployment.url + "/workflows")
    row = page.locator(f"#workflow-runs tr[data-run='{run_id}']")
    expect(row).to_contain_text(f"{total}: {total - 1} waiting, 1 ready")
    expect(row).to_contain_text("running")
    expect(page.get_by_role("navigation", name="Operator views")).to_contain_text("Workflow runs")
    row.locator("a").click()
    expect(page).to_have_url(f"{deployment.url}/workflows/{run_id}")
    expect(page.locator("#dag .node")).to_have_count(total)
    expect(page.locator("#wf-steps tr[data-step]")).to_have_count(total)
    expect(page.locator("#freshness")).to_contain_text("Live: updating every")
    assert _states(page) == {"ready": 1, "waiting": total - 1}
    mark_no_reload(page)

    workers = _workers(deployment, 4)
    try:
        observed: list[dict[str, int]] = []
        mid_saved = False
        deadline = time.monotonic() + budget
        while time.monotonic() < deadline:
            now = _states(page)
            assert "mismatch" not in now, "a box's colour and its words disagree"
            if not observed or observed[-1] != now:
                observed.append(now)
            done = now.get("succeeded", 0)
            if 0 < done < total and not mid_saved:
                _save(page, tmp, f"workflow-run-{total}-mid")
                mid_saved = True
            if done == total:
                break
            time.sleep(0.05)
        partial = [o for o in observed if 0 < o.get("succeeded", 0) < total]
        assert partial, f"the page never showed the run part-way: {observed}"
        assert observed[-1] == {"succeeded": total}, observed
        expect(page.locator("#wf-summary [data-field='status']")).to_have_text("succeeded")
        expect(page.locator("#wf-summary [data-field='verdict']")).to_contain_text("succeeded at")
        expect(page.locator("#freshness")).to_have_text("Settled: the run is succeeded; no longer updating")
        expect(page.locator("#wf-steps tr[data-status='succeeded']")).to_have_count(total)
        assert_not_reloaded(page)
        join = page.locator("#wf-steps tr[data-step='join']")
        expect(join.locator("[data-field='attempts']")).to_have_text("1")
        link = join.locator("[data-field='invocation'] a")
        expect(link).to_have_attribute("href", "/invocations/" + (link.text_content() or "?"))
        _save(page, tmp, f"workflow-run-{total}-final")

        # Settled: the page stops polling its JSON.
        polls: list[str] = []

        def seen(request: Request) -> None:
            if request.url.endswith(".json"):
                polls.append(request.url)

        page.on("request", seen)
        time.sleep(2.5)
        assert polls == [], polls

        # Each task ran exactly once on the target: the ledger keyed by the step's provider key, and the log.
        with sqlite3.connect(kit.target_path) as conn:
            ledger = conn.execute("SELECT count(*), count(DISTINCT adapter_invocation_id) "
                                  "FROM fencepost_workflow_tasks").fetchone()
        assert ledger == (total, total)
        ran = kit.log()
        assert sorted(ran) == sorted(["root", "join", *[f"p{i:03d}" for i in range(1, width + 1)]])
        assert ran[0] == "root" and ran[-1] == "join"

        # The page's JSON is conditional (ADR 0067): the same Run again is a 304 with no body.
        url = f"{deployment.url}/workflows/{run_id}.json"
        first = httpx.get(url, timeout=10)
        again = httpx.get(url, headers={"If-None-Match": first.headers["ETag"]}, timeout=10)
        assert (first.status_code, first.json()["status"], again.status_code, again.content) == (
            200, "succeeded", 304, b"")

        page.goto(deployment.url + "/workflows?status=succeeded")
        expect(page.locator(f"#workflow-runs tr[data-run='{run_id}']")).to_contain_text(f"{total}: {total} succeeded")
        page.goto(deployment.url + "/workflows?status=failed")
        expect(page.locator("#workflow-runs")).to_contain_text("No workflow run is failed")

        phone = browser.new_context(viewport=PHONE).new_page()
        try:
            for path, name in ((f"/workflows/{run_id}", f"phone-workflow-run-{total}"),
                               ("/workflows", f"phone-workflows-{total}")):
                phone.goto(deployment.url + path)
                expect(phone.locator("#freshness")).not_to_have_text("Loaded")  # app.js ran
                assert_fits(phone)
                artifact(phone, name)
        finally:
            phone.context.close()
    finally:
        kill_all(workers)


def test_a_20_step_fan_out_and_fan_in_runs_live_on_the_page(page: Page, browser: Browser,
                                                            deployment: Deployment) -> None:
    run_fan_live(page, browser, deployment, 18, budget=40)


@pytest.mark.soak
def test_the_128_step_dag_runs_live_on_the_page_with_four_workers(page: Page, browser: Browser,
                                                                 deployment: Deployment) -> None:
    run_fan_live(page, browser, deployment, 126, budget=120)
