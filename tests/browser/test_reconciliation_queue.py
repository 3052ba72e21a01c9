"""The reconciliation queue in real headless Chromium against a real ``fencepost serve --app`` whose in-process
worker charges a real SimPay on loopback (host-spec §2.7, §1.Y-13; ADRs 0048, 0049): a charge whose reply is
lost after SimPay charged it (an ambiguous reply) appears in the queue without a reload; the operator, having
found the charge in SimPay's ledger, resolves it from the page; the invocation's page shows both verdicts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from browser.conftest import Deployment, shot
from browser.test_operator_page import assert_not_reloaded, mark_no_reload, use_token
from fencepost.demo.payments import SIMPAY_URL_ENV
from fencepost.demo.simpay import SimPay


def serve_demo(deployment: Deployment, simpay: SimPay) -> None:
    """``fencepost serve`` with the payments demo's host (its in-process worker calls ``simpay``)."""
    deployment.env[SIMPAY_URL_ENV] = simpay.url
    deployment.env["BROWSER_SIMPAY_SECRET"] = "browser-test-webhook-secret-0123"
    deployment.serve("--app", "fencepost.demo.payments:demo_host", "--completion-secret",
                     "simpay=BROWSER_SIMPAY_SECRET")


@pytest.fixture
def simpay(tmp_path: Path) -> Iterator[SimPay]:
    with SimPay(tmp_path / "simpay-ledger.db") as provider:
        yield provider


def test_an_ambiguous_charge_is_queued_live_and_resolved_from_the_page(page: Page, deployment: Deployment,
                                                                      simpay: SimPay, tmp_path: Path) -> None:
    serve_demo(deployment, simpay)
    page.goto(deployment.url + "/reconciliation-queue")
    expect(page.get_by_role("navigation", name="Operator views")).to_contain_text("Reconciliation queue")
    expect(page.locator("#queue-empty")).to_be_visible()
    expect(page.locator("#freshness")).to_contain_text("Live: updating every")
    use_token(page, deployment.token)
    mark_no_reload(page)

    submitted = httpx.post(deployment.url + "/v1/host/invocations", json={
        "action_id": "demo.charge", "actor": "user:42",
        "params": {"order_id": "o-77", "amount": 1299, "mode": "reset-after-charge"}},
        headers={"Authorization": f"Bearer {deployment.token}", "Idempotency-Key": "o-77/charge"}, timeout=10)
    assert submitted.status_code == 202, submitted.text
    invocation_id = submitted.json()["id"]

    item = page.locator(f"#queue-{invocation_id}")
    expect(item).to_be_visible(timeout=20_000)  # a poll, not a reload
    assert_not_reloaded(page)
    expect(item).to_contain_text("adapter_outcome_ambiguous")
    expect(item.locator(".lookups")).to_contain_text("Look up at simpay")
    expect(page.locator("#notice")).to_contain_text(f"New in the reconciliation queue: {invocation_id}")
    shot(page, "reconciliation-queue-ambiguous-charge")

    # The operator looks the charge up at SimPay by the provider key the page shows.
    key = item.locator(".lookups code").first.inner_text()
    charge = next(c for c in simpay.ledger.charges() if c["idempotency_key"] == key)

    form = f"#resolve-{invocation_id}"
    # Nothing is preselected, and the form is not sent until the operator chooses an outcome.
    assert page.locator(f"{form}-outcome").input_value() == ""
    page.fill(f"{form}-operator", "ops:alice")
    page.fill(f"{form}-note", "looked it up")
    page.click(f"{form}-submit")
    expect(item).to_be_visible()
    expect(page.locator("#notice")).not_to_contain_text("Resolved")
    # The server judges: a note of spaces is refused and the page says why.
    page.select_option(f"{form}-outcome", "succeeded")
    page.fill(f"{form}-operator", "ops:alice")
    page.fill(f"{form}-note", "   ")
    page.fill(f"{form}-evidence", json.dumps({"charge_id": charge["id"]}))
    page.click(f"{form}-submit")
    expect(page.locator(f"{form}-error")).to_contain_text("note")
    expect(item).to_be_visible()  # still queued: nothing was resolved
    page.fill(f"{form}-evidence", "not json")
    page.click(f"{form}-submit")
    expect(page.locator(f"{form}-error")).to_have_text("Evidence is not valid JSON.")
    page.fill(f"{form}-evidence", json.dumps({"charge_id": charge["id"]}))
    page.fill(f"{form}-note", f"charge {charge['id']} found at SimPay")
    page.click(f"{form}-submit")
    expect(page.locator("#notice")).to_have_text(f"Resolved {invocation_id} as succeeded")
    expect(page.locator("#queue-empty")).to_be_visible()
    assert_not_reloaded(page)
    shot(page, "reconciliation-queue-resolved")

    page.goto(deployment.url + f"/invocations/{invocation_id}")
    history = page.locator("#verdict-history li")
    expect(history).to_have_count(2)
    expect(history.nth(0)).to_have_attribute("data-type", "ActionInvocationReconciliationRequired")
    expect(history.nth(1)).to_have_attribute("data-type", "InvocationResolved")
    expect(history.nth(1)).to_contain_text("ops:alice")
    expect(page.locator("#inv-status")).to_have_text("succeeded")
    expect(page.locator("#resolution")).to_contain_text(charge["id"])
    expect(page.locator("#inv-steps")).to_contain_text(key)
    expect(page.locator("#inv-steps")).to_contain_text("ambiguous")  # the step row keeps what the host saw
    expect(page.locator("#inv-leases")).to_contain_text("delivered")
    expect(page.locator("#inv-recon")).to_contain_text("adapter_outcome_ambiguous")
    shot(page, "invocation-both-verdicts")

    # Resolving again from another tab's stale form is refused by the server, and the page shows its reason.
    again = httpx.post(deployment.url + f"/v1/host/invocations/{invocation_id}/resolve", json={
        "outcome": "failed", "operator": "ops:bob", "note": "late"},
        headers={"Authorization": f"Bearer {deployment.token}"}, timeout=10)
    assert again.status_code == 409 and "already resolved succeeded by ops:alice" in again.json()["detail"]


def test_the_invocations_list_and_a_refused_resolution(page: Page, deployment: Deployment, simpay: SimPay) -> None:
    serve_demo(deployment, simpay)
    headers = {"Authorization": f"Bearer {deployment.token}"}
    ok = httpx.post(deployment.url + "/v1/host/invocations", json={
        "action_id": "demo.charge", "actor": "user:1", "params": {"order_id": "o-1", "amount": 500}},
        headers={**headers, "Idempotency-Key": "o-1"}, timeout=10).json()
    page.goto(deployment.url + "/invocations")
    row = page.locator(f"#invocations tr[data-invocation='{ok['id']}']")
    expect(row).to_contain_text("succeeded", timeout=20_000)
    expect(row).to_contain_text("demo.charge v1")
    shot(page, "invocations-list")
    page.select_option("#filter-status", "failed")
    page.click("#invocation-filters button[type=submit]")
    expect(page.locator("#invocations")).to_contain_text("No invocation matches.")
