"""The approvals view in real headless Chromium against a real ``fencepost serve --app
browser.approval_app:approval_host`` whose in-process worker and approval resume charge a real SimPay on loopback
(host-spec P, §1.Y-5; ADRs 0044, 0052): a refund its policy holds for the ``ops`` authority appears on the page
without a reload; typing survives the polling; another authority is refused by the server and the page says why;
approving from the page resumes it and the invocation succeeds with one charge at SimPay; its page shows the
approval's request and decision."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from browser.conftest import ROOT, Deployment, shot
from browser.test_operator_page import assert_not_reloaded, mark_no_reload, use_token
from fencepost.demo.payments import SIMPAY_URL_ENV
from fencepost.demo.simpay import SimPay


@pytest.fixture
def simpay(tmp_path: Path) -> Iterator[SimPay]:
    with SimPay(tmp_path / "simpay-ledger.db") as provider:
        yield provider


def submit(deployment: Deployment, order: str) -> str:
    response = httpx.post(deployment.url + "/v1/host/invocations", json={
        "action_id": "shop.refund", "actor": "support:bea", "params": {"order_id": order, "amount": 2500}},
        headers={"Authorization": f"Bearer {deployment.token}", "Idempotency-Key": f"{order}/refund"}, timeout=10)
    assert response.status_code == 202, response.text
    invocation_id: str = response.json()["id"]
    return invocation_id


def test_an_approval_required_by_a_policy_is_approved_from_the_page(page: Page, deployment: Deployment,
                                                                     simpay: SimPay) -> None:
    deployment.env[SIMPAY_URL_ENV] = simpay.url
    deployment.env["PYTHONPATH"] = str(ROOT / "tests")
    deployment.serve("--app", "browser.approval_app:approval_host")
    page.goto(deployment.url + "/approvals")
    expect(page.get_by_role("navigation", name="Operator views")).to_contain_text("Approvals")
    expect(page.locator("#approvals-empty")).to_be_visible()
    expect(page.locator("#freshness")).to_contain_text("Live: updating every")
    use_token(page, deployment.token)
    mark_no_reload(page)

    invocation_id = submit(deployment, "o-9")
    item = page.locator(f"#approvals-{invocation_id}")
    expect(item).to_be_visible(timeout=20_000)  # a poll, not a reload
    assert_not_reloaded(page)
    expect(item).to_contain_text("refund-approval")
    expect(item.locator("[data-field=authority]")).to_have_text("ops")
    expect(item).to_contain_text("refunds need an operator's approval")
    expect(page.locator("#notice")).to_contain_text(f"New approval request: {invocation_id}")
    assert simpay.ledger.charges() == []  # nothing reached the provider while it waits

    form = f"#approval-{invocation_id}"
    # Typing survives polling: a second request arrives (redrawing the list) while the form is half filled.
    page.fill(f"{form}-approver", "ops:alice")
    page.fill(f"{form}-authority", "finance")
    page.fill(f"{form}-note", "refund matches the returned parcel")
    second = submit(deployment, "o-10")
    expect(page.locator(f"#approvals-{second}")).to_be_visible(timeout=20_000)
    expect(page.locator(f"{form}-approver")).to_have_value("ops:alice")
    expect(page.locator(f"{form}-note")).to_have_value("refund matches the returned parcel")

    # The server judges: another authority is refused, nothing is recorded, and the page says why.
    page.click(f"{form}-approve")
    expect(page.locator(f"{form}-error")).to_contain_text("requires authority 'ops'")
    expect(item).to_be_visible()
    shot(page, "approvals-refused-authority")
    page.fill(f"{form}-authority", "ops")
    page.click(f"{form}-approve")
    expect(page.locator("#notice")).to_have_text(f"Approved {invocation_id}: now succeeded")
    expect(item).to_have_count(0)
    assert_not_reloaded(page)
    (charge,) = simpay.ledger.charges()
    assert charge["amount"] == 2500

    # The second one is rejected from the page: it ends failed with the approver's note.
    other = f"#approval-{second}"
    page.fill(f"{other}-approver", "ops:alice")
    page.fill(f"{other}-authority", "ops")
    page.fill(f"{other}-note", "duplicate of o-9")
    page.click(f"{other}-reject")
    expect(page.locator("#notice")).to_have_text(f"Rejected {second}: now failed")
    expect(page.locator("#approvals-empty")).to_be_visible()
    shot(page, "approvals-decided")

    page.goto(deployment.url + f"/invocations/{invocation_id}")
    expect(page.locator("#inv-status")).to_have_text("succeeded")
    approvals = page.locator("#approval-history li")
    expect(approvals).to_have_count(2)
    expect(approvals.nth(0)).to_have_attribute("data-type", "ApprovalRequested")
    expect(approvals.nth(0)).to_contain_text("authority ops required")
    expect(approvals.nth(1)).to_have_attribute("data-type", "ApprovalGranted")
    expect(approvals.nth(1)).to_contain_text("by ops:alice (authority ops): refund matches the returned parcel")
    expect(page.locator("#inv-steps")).to_contain_text("succeeded")
    expect(page.locator("#inv-verdicts")).not_to_contain_text("null")  # no resolution drawn as "null"
    shot(page, "invocation-approved")

    page.goto(deployment.url + f"/invocations/{second}")
    expect(page.locator("#inv-status")).to_have_text("failed")
    expect(page.locator("#approval-history li").nth(1)).to_have_attribute("data-type", "ApprovalRejected")
    expect(page.locator("[data-field=error]")).to_contain_text("approval rejected by ops:alice")
    assert len(simpay.ledger.charges()) == 1
