"""The delivery pages (issue 17, "Operator view") in real headless Chromium against a real ``fencepost serve``
and real ``fencepost worker`` processes delivering a real package to real SQLite target files:

- a delivered target (every step with its ledger row, "matches rehearsal"),
- a drifted target, refused with the named difference and unchanged,
- an unfenced (own-transaction) migration interrupted by SIGKILL, which recovery ends
  ``reconciliation_required``: the page links its reconciliation queue entry,
- the Targets page (removed targets hidden until asked for; newest delivery per package with its verdict), the
  packages list linking each package's deliveries, live refresh without a reload (ETag polls answered 304), and
  the pages fitting a 390 px phone. Screenshots go to the artifacts folder (``conftest.ARTIFACTS``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

import httpx
from playwright.sync_api import Browser, Page, expect

from browser.conftest import Deployment, artifact
from browser.test_operator_page import assert_not_reloaded, mark_no_reload
from browser.test_operator_page_issue11 import PHONE, assert_fits
from delivery.kit import ledger, release, target_file, write_package
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import DeliveryService
from fencepost.delivery.targets import TargetService
from fencepost.store import open_store
from helpers.processes import Process, kill_all, start, worker_args

#: One fenced migration, then a script that manages its own transaction (delivered unfenced: ADR 0057).
BOOKS = {"0001_base": "CREATE TABLE books (id INTEGER);\n",
         "0002_own_tx": "BEGIN;\nCREATE TABLE ledger_entries (id INTEGER PRIMARY KEY);\nCOMMIT;\n"}


def _worker(deployment: Deployment, name: str, *, crash: str | None = None) -> Process:
    args = worker_args(deployment.database, deployment.tmp / f"{name}-work", lease_seconds=1, poll_interval=0.05,
                       batch_size=1, worker_id=name)
    return start(args, name=name, stdout_path=deployment.tmp / f"{name}.log", cwd=deployment.tmp,
                 env=deployment.env, crash=crash)


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_deliveries_and_targets_pages(page: Page, browser: Browser, deployment: Deployment) -> None:
    tmp = deployment.tmp
    store = open_store(deployment.database)
    release(store, write_package(tmp, "books", "1.0.0", BOOKS), tmp / "setup-work")
    targets = TargetService(store)
    for name in ("tenant-a", "tenant-crash", "tenant-drift", "tenant-old"):
        targets.add(name, f"sqlite://{target_file(tmp, name)}", {"env": "prod" if name != "tenant-old" else "old"})
    targets.remove("tenant-old")
    with sqlite3.connect(tmp / "tenant-drift.db") as conn:  # migrated by hand, outside fencepost
        conn.execute("CREATE TABLE books (id INTEGER)")
    drift_before = (tmp / "tenant-drift.db").read_bytes()
    deliveries = DeliveryService(store)

    # The unfenced migration's worker dies right after its intent is on the target (before the script ran).
    (_, crashed), = deliveries.submit("books", target="tenant-crash").deliveries
    workers = [_worker(deployment, "crash", crash="delivery.target:0002_own_tx:after-intent")]
    try:
        workers[0].wait_killed()
        deployment.serve("--no-worker")
        page.goto(deployment.url + "/packages")
        row = page.locator("#packages tr[data-package='books']")
        expect(row).to_contain_text("1.0.0")
        page.click("#packages a[href='/packages/books/deliveries']")
        expect(page).to_have_url(deployment.url + "/packages/books/deliveries")
        crash_item = page.locator("#delivery-tenant-crash")
        expect(crash_item).to_have_attribute("data-status", "running")
        expect(page.locator("#freshness")).to_contain_text("Live: updating every")
        mark_no_reload(page)

        (_, delivered), = deliveries.submit("books", target="tenant-a").deliveries
        (_, refused), = deliveries.submit("books", target="tenant-drift").deliveries
        workers.append(_worker(deployment, "recover"))  # takes over the crashed lease, delivers the others
        _wait(lambda: all(deliveries.host.get(i).status.terminal for i in (crashed.id, delivered.id, refused.id)),
              "the three deliveries to settle")

        good = page.locator("#delivery-tenant-a")
        expect(good).to_have_attribute("data-status", "succeeded")  # drawn by a poll, not a reload
        assert_not_reloaded(page)
        expect(good.locator(".evidence")).to_contain_text("Evidence: matches rehearsal")
        expect(good.locator(".evidence")).to_have_attribute("data-matches", "true")
        first = good.locator("tr[data-step='migrate-001']")
        expect(first).to_contain_text("0001_base")
        expect(first.locator(".ledger")).to_contain_text("0001_base applied (version 1.0.0")
        expect(good.locator("tr[data-step='migrate-002'] .ledger")).to_contain_text("0002_own_tx applied")
        rows = ledger(tmp / "tenant-a.db")
        step_ids = [s.adapter_invocation_id for s in deliveries.host.get(delivered.id).steps
                    if s.name.startswith("migrate-")]
        assert [r[2] for r in rows] == list(BOOKS)
        expect(first).to_contain_text(step_ids[0])  # the step's provider key is the ledger row's

        drift = page.locator("#delivery-tenant-drift")
        expect(drift).to_have_attribute("data-status", "failed")
        expect(drift.locator(".delivery-error")).to_contain_text("tables present without ledger rows: table books")
        expect(drift.locator(".evidence")).to_contain_text("not compared")
        expect(drift.locator("tr[data-step='check']")).to_be_visible()
        expect(drift.locator("tr[data-step='migrate-001']")).to_have_count(0)  # nothing was applied
        assert (tmp / "tenant-drift.db").read_bytes() == drift_before

        assert deliveries.host.get(crashed.id).status is InvocationStatus.RECONCILIATION_REQUIRED
        expect(crash_item).to_have_attribute("data-status", "reconciliation_required")
        expect(crash_item.locator(".delivery-error")).to_contain_text("unfenced migration 0002_own_tx")
        link = crash_item.locator("a.queue-link")
        expect(link).to_have_attribute("href", f"/reconciliation-queue#queue-{crashed.id}")
        expect(page.locator("#notice")).to_contain_text("Delivery ")
        order = page.eval_on_selector_all("#deliveries > li", "(items) => items.map((li) => li.dataset.target)")
        assert order == ["tenant-a", "tenant-crash", "tenant-drift"]  # by target name
        artifact(page, "deliveries-books")

        # The page's polls carry the ETag: an unchanged list answers 304 with no body.
        url = deployment.url + "/v1/packages/books/deliveries"
        first_read = httpx.get(url, timeout=10)
        again = httpx.get(url, headers={"If-None-Match": first_read.headers["ETag"]}, timeout=10)
        assert (first_read.status_code, again.status_code, again.content) == (200, 304, b"")

        link.click()
        queued = page.locator(f"#queue-{crashed.id}")
        expect(queued).to_be_visible()
        expect(queued).to_contain_text("fencepost.deliver")
        expect(queued).to_have_class("attempt s-reconciliation_required targeted")  # the linked entry, outlined
        expect(queued).to_be_in_viewport()
        artifact(page, "reconciliation-queue-delivery")

        page.goto(deployment.url + "/targets")
        expect(page.locator("#targets tr[data-target]")).to_have_count(3)
        expect(page.locator("#targets tr[data-target='tenant-old']")).to_have_count(0)
        a_row = page.locator("#targets tr[data-target='tenant-a']")
        expect(a_row).to_contain_text("env=prod")
        expect(a_row.locator(".last-deliveries li[data-package='books']")).to_contain_text("books 1.0.0 succeeded")
        expect(page.locator("#targets tr[data-target='tenant-drift']")).to_contain_text("failed")
        expect(page.locator("#targets tr[data-target='tenant-crash']")).to_contain_text("reconciliation_required")
        page.check("#show-removed")
        old = page.locator("#targets tr[data-target='tenant-old']")
        expect(old).to_have_attribute("data-removed", "true")
        expect(old).to_contain_text("never delivered")
        expect(page.get_by_role("navigation", name="Operator views")).to_contain_text("Targets")
        artifact(page, "targets-with-removed")

        phone = browser.new_context(viewport=PHONE).new_page()
        try:
            for path, ready in (("/packages/books/deliveries", "#delivery-tenant-a[data-status='succeeded']"),
                                ("/targets", "#targets tr[data-target='tenant-a']")):
                phone.goto(deployment.url + path)
                expect(phone.locator(ready)).to_be_visible()
                assert_fits(phone)
                artifact(phone, "phone-" + path.strip("/").replace("/", "-"))
        finally:
            phone.context.close()
    finally:
        kill_all(workers)
