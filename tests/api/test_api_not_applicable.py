"""A scenario that did not apply is NOT_APPLICABLE with its reason in the API and on the page, and the gate
says how many of the six scenarios were exercised (issue 11 item 5) and whether semantics were compared
(item 6)."""

from __future__ import annotations

from pathlib import Path

from api.conftest import AUTH, Api


def _package(tmp_path: Path) -> Path:
    root = tmp_path / "plain"
    (root / "migrations").mkdir(parents=True)
    (root / "fencepost-package.toml").write_text('[package]\nname = "plain"\nversion = "1.0.0"\n', encoding="utf-8")
    (root / "migrations" / "0001_a.up.sql").write_text("CREATE TABLE a (x);\n", encoding="utf-8")
    return root


def test_not_applicable_in_the_api_the_gate_and_the_page(api: Api, tmp_path: Path) -> None:
    run_id = api.create_run(_package(tmp_path))
    attempt = api.enqueue(run_id)
    api.run_worker()
    body = api.client.get(f"/delivery-rehearsals/{run_id}/attempts/{attempt['id']}", headers=AUTH).json()
    by_scenario = {r["scenario"]: r for r in body["receipts"]}
    upgrade = by_scenario["upgrade_from_previous"]
    assert (upgrade["status"], upgrade["state"]) == ("SUCCEEDED", "NOT_APPLICABLE")
    assert upgrade["not_applicable_reason"] == "the manifest declares no previous version"
    assert by_scenario["uninstall_to_empty"]["state"] == "NOT_APPLICABLE"
    assert by_scenario["reapply_is_noop"]["state"] == "SUCCEEDED"
    gate = api.client.get(f"/delivery-rehearsals/{run_id}/release-gate", headers=AUTH).json()
    assert gate["passed"] is True and gate["semantics_compared"] is False
    assert (gate["scenarios"]["count"], gate["scenarios"]["of"]) == (4, 6)
    assert [n["scenario"] for n in gate["scenarios"]["not_exercised"]] == ["upgrade_from_previous",
                                                                          "uninstall_to_empty"]
    page = api.client.get(f"/rehearsals/{run_id}", headers=AUTH)
    assert page.status_code == 200
    assert page.text.count(">NOT_APPLICABLE</span>") == 2
    assert "the manifest declares no previous version" in page.text
