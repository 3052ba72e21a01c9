"""Issue 11 items 10 to 12 in real headless Chromium against real ``fencepost serve`` processes, including a
390 px wide phone viewport; screenshots go to the artifacts folder each test prints (``conftest.ARTIFACTS``).

Item 10: the comparison card drawn by a live refresh lists the differing paths (not ``[object ...]``); nothing
is wider than 390 px and hashes stay inside their cards with the full value on hover; a "Creating…" notice does
not stay under a later error; an abort reason can be typed (and survives the live redraws). Item 11: rows carry
latest Attempt, Attempt count and gate verdict; lease history and scenario durations; live workers; polls
answered 304; an access log line per request without the token.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from browser.conftest import ROOT, Deployment, artifact
from browser.test_operator_page import assert_not_reloaded, mark_no_reload, use_token

EXAMPLE = ROOT / "examples" / "inventory"
DRIFTING_PATH = "$[2].evidence.result.tables.t.content_sha256"
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=PHONE)
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    try:
        yield opened
    finally:
        context.close()


def drifting_package(root: Path) -> Path:
    """A package whose second migration stores random() (two Attempts differ at one evidence path)."""
    (root / "migrations").mkdir(parents=True)
    (root / "fencepost-package.toml").write_text('[package]\nname = "drift"\nversion = "1.0.0"\n')
    files = {"0001_stable.up.sql": "CREATE TABLE stable (id INTEGER PRIMARY KEY);\n",
             "0001_stable.down.sql": "DROP TABLE stable;\n",
             "0002_random.up.sql": "CREATE TABLE t AS SELECT random() AS r;\n",
             "0002_random.down.sql": "DROP TABLE t;\n"}
    for name, text in files.items():
        (root / "migrations" / name).write_text(text)
    return root


def assert_fits(page: Page, width: int = PHONE["width"]) -> None:
    """Nothing scrolls the page sideways, and every hash ends inside the card (or table box) around it."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    outside = page.evaluate("""() => [...document.querySelectorAll('code.fp')].filter((el) => {
        const box = el.closest('.card, .attempt, .scroll, .run-head, td');
        if (!box || el.offsetParent === null) return false;
        const a = el.getBoundingClientRect(), b = box.getBoundingClientRect();
        return a.right > b.right + 1 || a.left < b.left - 1;
      }).map((el) => el.textContent)""")
    assert outside == []
    # and no text runs out of its box in a card (a hash is cut with an ellipsis on purpose; wide tables scroll
    # inside their own box instead)
    spilled = page.evaluate("""() => [...document.querySelectorAll('.card *, .attempt *')].filter((el) => {
        if (el.matches('.fp, .scroll') || el.closest('table, details:not([open])')) return false;
        if (el.offsetParent === null) return false;
        const box = el.closest('.card, .attempt').getBoundingClientRect();
        return el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > box.right + 1;
      }).map((el) => el.tagName + ' ' + (el.textContent || '').slice(0, 40))""")
    assert spilled == []


def test_live_comparison_lists_paths_and_the_page_fits_390px(phone: Page, deployment: Deployment,
                                                            tmp_path: Path) -> None:
    deployment.serve()
    package = drifting_package(tmp_path / "drift")
    phone.goto(deployment.url + "/")
    use_token(phone, deployment.token)

    # a notice of what is under way never stays under the error that ended it
    phone.fill("#package-path", str(tmp_path / "absent"))
    phone.click("#create-path button[type=submit]")
    expect(phone.locator("#alert")).not_to_be_empty()
    phone.wait_for_timeout(200)  # past the notice's 30 ms announcement delay
    expect(phone.locator("#notice")).to_be_empty()
    artifact(phone, "i11-01-error-without-stale-notice-390")

    phone.fill("#package-path", str(package))
    phone.click("#create-path button[type=submit]")
    phone.wait_for_url("**/rehearsals/run_*")
    mark_no_reload(phone)
    expect(phone.locator("#rw-summary")).to_contain_text("Live:")
    for seq in (1, 2):
        phone.get_by_role("button", name="Start attempt").click()
        expect(phone.locator("#attempts > li")).to_have_count(seq)
        expect(phone.locator("#attempts > li").first).to_have_attribute("data-status", "SUCCEEDED", timeout=30_000)

    body = phone.locator("#comparison-body")
    expect(body).to_contain_text("DIFFERENT")
    expect(body.locator("ul.paths li")).to_have_text([DRIFTING_PATH])
    expect(body).not_to_contain_text("[object")
    assert_not_reloaded(phone)  # drawn by the live refresh, not by the server
    semantic = body.locator("code.fp").nth(1)
    assert semantic.get_attribute("title") == semantic.text_content()  # the full value, on hover and when copied
    assert len(semantic.text_content() or "") > 16

    latest = phone.locator("#attempts > li").first
    expect(latest.locator("[data-field=duration]")).to_have_count(6)
    for cell in latest.locator("[data-field=duration]").all():
        assert re.fullmatch(r"\d+\.\d\d s", cell.text_content() or ""), cell.text_content()
    # a scenario that did not apply (no earlier version to upgrade from) says why, also when drawn live
    expect(latest.locator("[data-field=not-applicable]").first).to_be_visible()
    expect(latest.locator("[data-field=not-applicable]").first).not_to_be_empty()
    latest.locator("details.lease-history summary").click()
    expect(latest.locator(".timeline li")).to_have_count(1)
    expect(latest.locator(".timeline li")).to_contain_text("#1 claim")
    expect(latest.locator(".timeline li")).to_have_attribute("data-ended", "delivered")
    phone.wait_for_timeout(1500)  # a live refresh keeps the lease history open
    expect(latest.locator(".timeline li")).to_be_visible()
    assert_fits(phone)
    artifact(phone, "i11-02-rehearsal-drift-390")

    phone.goto(deployment.url + "/")
    row = phone.locator("#runs tr[data-run]").first
    expect(row.locator("[data-field=latest]")).to_have_text("#2 SUCCEEDED")
    expect(row.locator("[data-field=attempt-count]")).to_have_text("2")
    expect(row.locator("[data-field=gate]")).to_have_text("BLOCKED")
    assert_fits(phone)
    artifact(phone, "i11-03-list-rows-390")


def test_typed_abort_reason_survives_redraws_and_polls_are_304(page: Page, deployment: Deployment) -> None:
    deployment.serve("--no-worker")
    page.goto(deployment.url + "/")
    use_token(page, deployment.token)
    page.fill("#package-path", str(EXAMPLE))
    page.click("#create-path button[type=submit]")
    page.wait_for_url("**/rehearsals/run_*")
    expect(page.locator("#rw-summary")).to_contain_text("No live worker")
    page.get_by_role("button", name="Start attempt").click()
    attempt = page.locator("#attempts > li").first
    expect(attempt).to_have_attribute("data-status", "PENDING")
    expect(attempt.locator("[data-field=lease-history]")).to_contain_text("Not claimed yet")

    reason = attempt.get_by_label("Reason")
    reason.click()
    page.keyboard.type("wrong package ")
    pending = attempt.locator("[data-field=pending-for]").text_content()
    expect(attempt.locator("[data-field=pending-for]")).not_to_have_text(pending or "", timeout=5_000)  # redrawn
    page.keyboard.type("version")
    expect(attempt.get_by_label("Reason")).to_have_value("wrong package version")
    artifact(page, "i11-04-abort-reason-typed")

    page.once("dialog", lambda dialog: dialog.accept())
    attempt.get_by_role("button", name="Abort attempt").click()
    expect(attempt).to_have_attribute("data-status", "ABORTED")
    expect(attempt.locator(".attempt-error")).to_contain_text("wrong package version")
    artifact(page, "i11-05-aborted-with-the-typed-reason")

    # the access log (text format here): a line per request; the gate, unchanged while the Attempt waited,
    # was answered 304 with no body
    log = (deployment.tmp / "serve.log").read_text()
    assert re.search(r"GET /delivery-rehearsals/run_\w+/release-gate 304 .*bytes=0 ", log), log[-2000:]
    assert "POST /delivery-rehearsals 201 " in log
    assert re.search(r"POST /delivery-rehearsals/run_\w+/attempts/att_\w+/abort 200 ", log)
    assert deployment.token not in log
