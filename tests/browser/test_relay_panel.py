"""The index page's Event relay panel in real headless Chromium against a real ``fencepost serve``: a dead letter
and a waiting event made through the store's ports appear by polling, without a reload; a server that stops
answering turns the panel's indicator to Stale."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from browser.conftest import Deployment, shot
from fencepost.store import open_store
from helpers.relay_rows import append_event, one_dead_letter


def test_relay_panel_shows_a_dead_letter_after_it_appears(page: Page, deployment: Deployment) -> None:
    server = deployment.serve("--no-worker")
    page.goto(deployment.url + "/")
    expect(page.locator("#relay-backlog")).to_have_text("No events waiting: nothing is pending, retrying or being "
                                                        "published.")
    expect(page.locator("#dead-letters")).to_contain_text("No dead letters")
    expect(page.locator("#relay-freshness")).to_have_text("Live: updating every 5 s")
    page.evaluate("window.__fencepostSamePage = true")

    store = open_store(deployment.database)
    try:
        one_dead_letter(store, "ev-gone", "HTTP 500 from the receiver", event_type="InvocationFailed")
        append_event(store, "ev-waiting")
    finally:
        store.close()

    row = page.locator("#dead-letters tr[data-event=ev-gone]")
    expect(row).to_be_visible(timeout=15_000)  # the next 5 s poll, not a reload
    expect(row).to_contain_text("InvocationFailed")
    expect(row).to_contain_text("HTTP 500 from the receiver")
    expect(row.locator("td").nth(3)).to_have_text("1")  # attempts
    expect(page.locator("#relay-counts [data-field=count-dead_lettered]")).to_have_text("1")
    expect(page.locator("#relay-backlog [data-field=backlog]")).to_have_text("1")
    expect(page.locator("#relay-backlog time")).to_contain_text(" UTC")
    expect(page.locator("#notice")).to_have_text("New dead letter: ev-gone")
    assert page.evaluate("window.__fencepostSamePage === true"), "the page was reloaded"
    shot(page, "relay-dead-letter")

    server.stop()
    expect(page.locator("#relay-freshness")).to_contain_text("Stale: the last refresh failed", timeout=15_000)
    expect(page.locator("#dead-letters tr[data-event=ev-gone]")).to_be_visible()  # the last good answer stays
