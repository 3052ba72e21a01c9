"""``fencepost demo payments`` end to end, as a new user runs it: a real SimPay, real worker subprocesses, real
SIGKILLs; every row's verdict checked against SimPay's own ledger (host-spec §2.10, issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencepost.core.statuses import InvocationStatus
from fencepost.demo.ledger import Ledger
from fencepost.demo.runner import MARKER, SCENARIOS, Row
from helpers.processes import run_cli

EXPECTED = {1: ("succeeded", 1, 1), 2: ("failed", 0, 1), 3: ("succeeded", 1, 3),
            4: ("reconciliation_required", 1, 1), 5: ("reconciliation_required", 1, 1),
            6: ("reconciliation_required", 1, 1), 7: ("succeeded", 1, 2), 11: ("refused", 0, 0),
            12: ("reconciliation_required", 0, 0)}


@pytest.mark.slow
def test_the_payments_demo_holds_row_by_row_against_the_provider_ledger(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    result = run_cli(["demo", "payments", "--dir", str(directory), "--json"], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.describe()
    report = json.loads(result.stdout)
    assert report["holds"] is True
    measured = {row["scenario"]: (row["status"], row["simpay_charges"], row["simpay_calls"]) for row in report["rows"]}
    assert measured == EXPECTED  # written out here, not read from the demo's own expectations
    rows = {row["scenario"]: row for row in report["rows"]}
    assert rows[6]["attempt_count"] == 2 and "outcome unknown" in rows[6]["reason"]
    assert rows[7]["attempt_count"] == 2
    assert rows[12]["reason"] == "recovery attempts exhausted (6/5)"
    # The provider's ground truth, read here from its ledger file: one charge per charged scenario, and the
    # idempotent recovery re-sent its charge under the same key.
    ledger = Ledger(directory / "simpay-ledger.db")
    assert len(ledger.charges()) == sum(charges for _, charges, _ in EXPECTED.values())
    keys = [call["idempotency_key"] for call in ledger.calls() if call["idempotency_key"]]
    assert keys.count(rows[7]["adapter_invocation_id"]) == 2
    assert keys.count(rows[6]["adapter_invocation_id"]) == 1


def test_the_demo_refuses_a_directory_that_is_not_its_own(tmp_path: Path) -> None:
    directory = tmp_path / "precious"
    directory.mkdir()
    (directory / "notes.txt").write_text("keep me")
    result = run_cli(["demo", "payments", "--dir", str(directory)], cwd=tmp_path)
    assert result.returncode == 2, result.describe()
    assert "not a payments demo directory" in result.stderr
    assert (directory / "notes.txt").read_text() == "keep me"
    assert not (directory / MARKER).exists()


def test_a_row_that_differs_from_its_expectation_says_how() -> None:
    scenario = next(s for s in SCENARIOS if s.number == 6)
    row = Row(scenario, status=str(InvocationStatus.FAILED), reason="step charge failed", charges=1, calls=2)
    row.check()
    assert not row.holds
    assert row.problems == ["verdict failed, expected reconciliation_required",
                            "2 provider call(s), expected 1", "the reason does not say 'outcome unknown'"]
    held = Row(scenario, status="reconciliation_required", reason="running step without handoff: outcome unknown",
               charges=1, calls=1)
    held.check()
    assert held.holds
