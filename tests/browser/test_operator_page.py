"""The operator page in real headless Chromium against real ``fencepost serve`` and ``fencepost worker``
processes: create, start, watch it succeed without reloading; kill a worker mid-scenario, watch the lease
expire, reconcile from the page, and see a new worker redeliver it."""

from __future__ import annotations

import signal
import zipfile
from pathlib import Path

from playwright.sync_api import Page, expect

from browser.conftest import ROOT, Deployment, shot

EXAMPLE = ROOT / "examples" / "inventory"


def use_token(page: Page, token: str) -> None:
    page.fill("#api-token", token)
    page.click("#token-form button[type=submit]")
    expect(page.locator("#token-state")).to_have_text("token set for this tab")


def mark_no_reload(page: Page) -> None:
    page.evaluate("window.__fencepostSamePage = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__fencepostSamePage === true"), "the page was reloaded"


def slow_package(root: Path) -> Path:
    """A package whose seed walks a recursive CTE over six million rows (a few seconds in the sandbox)."""
    (root / "migrations").mkdir(parents=True)
    (root / "seed").mkdir()
    (root / "fencepost-package.toml").write_text(
        '[package]\nname = "slow-ledger"\nversion = "1.0.0"\nmigrations_dir = "migrations"\n'
        'seed = ["seed/bulk.sql"]\n')
    (root / "migrations" / "0001_ledger.up.sql").write_text(
        "CREATE TABLE ledger (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL);\n")
    (root / "migrations" / "0001_ledger.down.sql").write_text("DROP TABLE ledger;\n")
    (root / "seed" / "bulk.sql").write_text(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000000)\n"
        "INSERT INTO ledger (id, amount) SELECT i % 10, sum(i % 97) FROM n GROUP BY i % 10;\n")
    return root


def zip_dir(source: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, f"{source.name}/{path.relative_to(source)}")
    return target


def test_create_start_and_watch_the_gate_pass_without_reloading(page: Page, deployment: Deployment) -> None:
    server = deployment.serve()
    page.goto(deployment.url + "/")
    expect(page.get_by_role("heading", name="Delivery rehearsals")).to_be_visible()
    expect(page.locator("#runs")).to_contain_text("No rehearsals yet")
    # without the token an action explains what to do and changes nothing
    page.fill("#package-path", str(EXAMPLE))
    page.click("#create-path button[type=submit]")
    expect(page.locator("#alert")).to_contain_text("API token")
    expect(page.locator("#notice")).to_be_empty()
    shot(page, "01-list-empty-needs-token")

    use_token(page, deployment.token)
    page.click("#create-path button[type=submit]")
    page.wait_for_url("**/rehearsals/run_*")
    expect(page.locator("#run-title")).to_have_text("inventory 1.2.0")
    expect(page.locator("#gate [data-field=gate-verdict]")).to_have_text("BLOCKED")
    mark_no_reload(page)

    page.get_by_role("button", name="Start attempt").click()
    first = page.locator("#attempts > li").first
    expect(first).to_have_attribute("data-status", "SUCCEEDED", timeout=30_000)
    expect(first.locator("[data-field=outbox-status]")).to_have_text("DELIVERED")
    expect(first.locator("[data-field=delivery-count]")).to_have_text("1")
    expect(first.locator("tbody tr")).to_have_count(6)
    expect(first.locator("tbody tr .ok")).to_have_count(6)
    expect(page.locator("#gate [data-field=gate-verdict]")).to_have_text("PASS")
    expect(page.locator("#gate-checks li.pass")).to_have_count(5)
    expect(first.locator("button")).to_have_count(0)
    shot(page, "02-first-attempt-succeeded-gate-pass")

    page.get_by_role("button", name="Start attempt").click()
    expect(page.locator("#attempts > li")).to_have_count(2)
    expect(page.locator("#attempts > li").first).to_have_attribute("data-status", "SUCCEEDED", timeout=30_000)
    expect(page.locator("#comparison-body")).to_contain_text("MATCH")
    expect(page.locator("#comparison-body")).to_contain_text("semantics match")
    expect(page.locator("#gate [data-field=gate-verdict]")).to_have_text("PASS")
    # the gate's checks come before the evidence history
    gate_y = page.locator("#gate").bounding_box()
    history_y = page.locator("#history").bounding_box()
    assert gate_y is not None and history_y is not None and gate_y["y"] < history_y["y"]
    assert_not_reloaded(page)
    expect(page.locator("#freshness")).not_to_contain_text("Stale")
    shot(page, "03-two-attempts-semantics-match")

    # an honest view: with the server gone the page says it is stale
    server.stop()
    expect(page.locator("#freshness")).to_contain_text("Stale", timeout=15_000)
    shot(page, "04-server-gone-view-stale")


def test_killed_worker_lease_expires_reconcile_then_redelivery(page: Page, deployment: Deployment,
                                                               tmp_path: Path) -> None:
    deployment.serve("--no-worker")
    archive = zip_dir(slow_package(tmp_path / "slow-ledger"), tmp_path / "slow-ledger.zip")
    page.goto(deployment.url + "/")
    use_token(page, deployment.token)
    page.set_input_files("#package-archive", str(archive))
    page.click("#create-upload button[type=submit]")
    page.wait_for_url("**/rehearsals/run_*")
    expect(page.locator("#run-title")).to_have_text("slow-ledger 1.0.0")
    mark_no_reload(page)

    page.get_by_role("button", name="Start attempt").click()
    attempt = page.locator("#attempts > li").first
    expect(attempt).to_have_attribute("data-status", "PENDING")
    expect(attempt.locator("[data-field=outbox-status]")).to_have_text("PENDING")
    expect(attempt.get_by_role("button", name="Abort attempt")).to_be_visible()
    expect(attempt.get_by_role("button", name="Reconcile expired lease")).to_have_count(0)

    worker = deployment.worker("--lease-seconds", "2", "--worker-id", "doomed-worker", log="worker-1")
    seed = attempt.locator("tr[data-scenario=seed_and_verify] .badge")
    expect(seed).to_have_text("RUNNING", timeout=30_000)
    expect(attempt.locator("[data-field=outbox-status]")).to_have_text("PROCESSING")
    expect(attempt.locator("[data-field=lease-owner]")).to_have_text("doomed-worker")
    expect(attempt.locator(".lease-note")).to_have_text("active")
    expect(attempt.get_by_role("button", name="Reconcile expired lease")).to_have_count(0)
    shot(page, "05-scenario-running-lease-active")

    worker.popen.send_signal(signal.SIGKILL)
    worker.popen.wait(10)
    expect(attempt.locator(".lease-note.expired")).to_be_visible(timeout=15_000)
    reconcile = attempt.get_by_role("button", name="Reconcile expired lease")
    expect(reconcile).to_be_visible()
    expect(attempt.locator("[data-field=outbox-status]")).to_have_text("PROCESSING")
    expect(seed).to_have_text("RUNNING")
    shot(page, "06-worker-killed-lease-expired")

    reconcile.focus()
    page.keyboard.press("Enter")  # keyboard works as well as a click
    expect(attempt.locator("[data-field=outbox-status]")).to_have_text("PENDING")
    expect(attempt).to_have_attribute("data-outbox", "PENDING")
    expect(attempt.locator("[data-field=lease-owner]")).to_have_text("—")
    expect(reconcile).to_have_count(0)
    expect(page.locator("#notice")).to_contain_text("outbox PENDING")
    expect(seed).to_have_text("INTERRUPTED")  # nothing runs it now: not shown RUNNING
    expect(attempt.locator("[data-field=interrupted]")).to_contain_text("Interrupted, will be replayed")
    shot(page, "07-reconciled-back-to-pending")

    deployment.worker("--worker-id", "rescue-worker", log="worker-2")
    expect(attempt).to_have_attribute("data-status", "SUCCEEDED", timeout=60_000)
    expect(attempt.locator("[data-field=delivery-count]")).to_have_text("2")
    expect(attempt.locator("[data-field=outbox-status]")).to_have_text("DELIVERED")
    expect(attempt.locator("tbody tr td:nth-child(4)")).to_have_text(["2"] * 6)
    expect(page.locator("#gate [data-field=gate-verdict]")).to_have_text("PASS")
    assert_not_reloaded(page)
    shot(page, "08-redelivered-succeeded-delivery-2")


def test_workers_block_names_a_killed_worker_once_it_stops_renewing(page: Page, deployment: Deployment) -> None:
    """The index page's workers block, as its 5 s poll redraws it: a live worker's row, then, after SIGKILL and one
    lease, its id under "Stopped renewing" (the redraw once showed ``[object HTMLElement]`` there)."""
    deployment.serve("--no-worker")
    worker = deployment.worker("--lease-seconds", "2", "--worker-id", "page-worker", log="page-worker")
    page.goto(deployment.url + "/")
    expect(page.locator('#workers tr[data-worker="page-worker"]')).to_be_visible(timeout=15_000)
    worker.popen.send_signal(signal.SIGKILL)
    worker.popen.wait(10)
    expired = page.locator("#workers-expired")
    expect(expired).to_contain_text("Stopped renewing (expired): page-worker last seen", timeout=20_000)
    expect(page.locator('#workers tr[data-worker="page-worker"]')).to_have_count(0)
    assert "[object" not in expired.inner_text()
    shot(page, "07-workers-killed-worker-expired")
