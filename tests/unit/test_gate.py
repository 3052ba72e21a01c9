"""The release gate (fencepost.evidence.gate) on records built directly: each check failing on its own.

Some checks are coupled by definition: a latest Attempt that is not SUCCEEDED cannot be compared, so
``semantic_match`` fails with it. Each test asserts the exact set of failing checks.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus, RunStatus
from fencepost.evidence.gate import GateReport, evaluate_gate
from fencepost.evidence.receipts import seal, verify_receipt
from fencepost.store.records import AttemptRecord, ReceiptRecord
from unit.builders import attempt_record, evidence_for, receipt_record, receipts_for, run_record, tamper

ALL_CHECKS = {"run_ready", "latest_attempt_succeeded", "outbox_delivered", "evidence_integrity", "semantic_match"}


def _failing(report: GateReport) -> set[str]:
    return {c.name for c in report.blocking}


def _reason(report: GateReport, name: str) -> str:
    return next(c.reason for c in report.checks if c.name == name)


def _two_good() -> tuple[list[AttemptRecord], dict[str, list[ReceiptRecord]]]:
    attempts = [attempt_record(1), attempt_record(2)]
    return attempts, {"att_1": receipts_for("att_1"), "att_2": receipts_for("att_2")}


def test_two_matching_successful_attempts_pass() -> None:
    attempts, receipts = _two_good()
    report = evaluate_gate(run_record(), attempts, receipts)
    assert report.passed, report.blocking
    assert [c.name for c in report.checks] == ["run_ready", "latest_attempt_succeeded", "outbox_delivered",
                                               "evidence_integrity", "semantic_match"]
    assert report.latest_attempt_id == "att_2" and report.baseline_attempt_id == "att_1"
    assert report.comparison is not None and report.comparison.equal


def test_first_successful_attempt_establishes_the_baseline() -> None:
    report = evaluate_gate(run_record(), [attempt_record(1)], {"att_1": receipts_for("att_1")})
    assert report.passed
    assert "establishes the baseline" in _reason(report, "semantic_match")
    assert report.baseline_attempt_id is None


def test_attempt_order_comes_from_seq_not_list_order() -> None:
    attempts, receipts = _two_good()
    report = evaluate_gate(run_record(), list(reversed(attempts)), receipts)
    assert report.passed and report.latest_attempt_id == "att_2"


def test_retired_run_fails_run_ready_alone() -> None:
    attempts, receipts = _two_good()
    report = evaluate_gate(run_record(RunStatus.RETIRED), attempts, receipts)
    assert _failing(report) == {"run_ready"}
    assert _reason(report, "run_ready") == "Run is RETIRED"


def test_no_attempt_fails_every_attempt_check() -> None:
    report = evaluate_gate(run_record(), [], {})
    assert _failing(report) == ALL_CHECKS - {"run_ready"}
    assert all(_reason(report, n) == "no Attempt exists yet" for n in ALL_CHECKS - {"run_ready"})
    assert report.latest_attempt_id is None


@pytest.mark.parametrize("status", [AttemptStatus.FAILED, AttemptStatus.RUNNING, AttemptStatus.ABORTED,
                                    AttemptStatus.PENDING])
def test_latest_attempt_not_succeeded(status: AttemptStatus) -> None:
    attempts, receipts = _two_good()
    attempts[1] = attempt_record(2, status=status)  # command DELIVERED and receipts intact: isolate the status
    report = evaluate_gate(run_record(), attempts, receipts)
    assert _failing(report) == {"latest_attempt_succeeded", "semantic_match"}
    assert _reason(report, "latest_attempt_succeeded") == f"Attempt #2 is {status}"
    assert "not a successful Attempt to compare" in _reason(report, "semantic_match")


def test_a_newer_failed_attempt_blocks_even_after_earlier_success() -> None:
    attempts = [attempt_record(1), attempt_record(2, AttemptStatus.FAILED, CommandStatus.FAILED)]
    receipts = {"att_1": receipts_for("att_1"), "att_2": receipts_for("att_2")}
    assert not evaluate_gate(run_record(), attempts, receipts).passed


@pytest.mark.parametrize("command_status", [CommandStatus.PENDING, CommandStatus.PROCESSING, CommandStatus.FAILED,
                                            CommandStatus.ABORTED])
def test_command_not_delivered_fails_outbox_delivered_alone(command_status: CommandStatus) -> None:
    attempts, receipts = _two_good()
    attempts[1] = attempt_record(2, command_status=command_status)
    report = evaluate_gate(run_record(), attempts, receipts)
    assert _failing(report) == {"outbox_delivered"}
    assert _reason(report, "outbox_delivered") == f"Attempt #2 command is {command_status}"


def test_tampered_receipt_fails_evidence_integrity_alone() -> None:
    attempts, receipts = _two_good()
    original = receipts["att_2"][3]
    edited = json.loads(original.evidence or "")
    edited["result"]["forged"] = True
    receipts["att_2"][3] = tamper(original, json.dumps(edited, sort_keys=True, separators=(",", ":")))
    report = evaluate_gate(run_record(), attempts, receipts)
    assert "evidence_integrity" in _failing(report)
    reason = _reason(report, "evidence_integrity")
    assert "receipt 4 (reapply_is_noop) tampered: evidence fingerprint does not match the stored evidence" in reason
    assert [i.status for i in report.integrity] == ["ok", "ok", "ok", "tampered", "ok", "ok"]
    # The forged field also changes the semantics, so the comparison notices it too; integrity names the cause.
    assert _failing(report) <= {"evidence_integrity", "semantic_match"}


def test_tampering_that_keeps_semantics_still_fails_integrity_alone() -> None:
    attempts, receipts = _two_good()
    original = receipts["att_2"][1]
    edited = json.loads(original.evidence or "")
    edited["execution"]["worker"] = "someone-else"  # volatile: invisible to the semantic comparison
    receipts["att_2"][1] = tamper(original, json.dumps(edited, sort_keys=True, separators=(",", ":"),
                                                       ensure_ascii=False))
    report = evaluate_gate(run_record(), attempts, receipts)
    assert _failing(report) == {"evidence_integrity"}


def test_five_receipts_fail_evidence_integrity_alone() -> None:
    attempts, receipts = _two_good()
    receipts["att_2"] = receipts["att_2"][:5]
    report = evaluate_gate(run_record(), attempts, receipts)
    assert "evidence_integrity" in _failing(report)
    assert "expected 6 Receipts, found 5" in _reason(report, "evidence_integrity")


def test_a_receipt_that_is_not_succeeded_fails_evidence_integrity() -> None:
    attempts, receipts = _two_good()
    evidence = evidence_for(6, "att_2")
    evidence["status"] = "ABORTED"
    receipts["att_2"][5] = receipt_record("att_2", 6, evidence, status=ReceiptStatus.ABORTED)
    report = evaluate_gate(run_record(), attempts, receipts)
    assert "evidence_integrity" in _failing(report)
    assert "receipt 6 (uninstall_to_empty) is ABORTED" in _reason(report, "evidence_integrity")


def test_drift_from_the_baseline_fails_semantic_match_alone() -> None:
    attempts = [attempt_record(1), attempt_record(2)]
    receipts = {"att_1": receipts_for("att_1"), "att_2": receipts_for("att_2", {3: {"tables": {"t": {"rows": 7}}}})}
    report = evaluate_gate(run_record(), attempts, receipts)
    assert _failing(report) == {"semantic_match"}
    reason = _reason(report, "semantic_match")
    assert "drifts from baseline Attempt #1 at: $[2].evidence.result.tables.t.rows" in reason


def test_tampered_baseline_fails_semantic_match_alone() -> None:
    attempts, receipts = _two_good()
    receipts["att_1"][0] = tamper(receipts["att_1"][0], '{"forged":true}')
    report = evaluate_gate(run_record(), attempts, receipts)
    assert _failing(report) == {"semantic_match"}
    assert "baseline Attempt #1 fails integrity" in _reason(report, "semantic_match")


def test_baseline_is_the_latest_earlier_delivered_success() -> None:
    attempts = [attempt_record(1), attempt_record(2, AttemptStatus.FAILED, CommandStatus.FAILED),
                attempt_record(3, AttemptStatus.SUCCEEDED, CommandStatus.FAILED), attempt_record(4)]
    receipts = {a.id: receipts_for(a.id) for a in attempts}
    report = evaluate_gate(run_record(), attempts, receipts)
    assert report.passed
    assert report.baseline_attempt_id == "att_1"


class TestVerifyReceipt:
    def test_sealed_evidence_verifies(self) -> None:
        assert verify_receipt(receipt_record("att_1", 2)).status == "ok"

    @pytest.mark.parametrize(("text", "reason"), [
        ("not json", "not valid JSON"),
        ('{"x": NaN}', "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"forged": true}', "fingerprint does not match"),
    ])
    def test_tampered_forms(self, text: str, reason: str) -> None:
        result = verify_receipt(tamper(receipt_record("att_1", 2), text))
        assert result.status == "tampered" and reason in result.reason

    def test_non_canonical_text_with_matching_fingerprint_is_tampered(self) -> None:
        receipt = receipt_record("att_1", 2)
        pretty = json.dumps(json.loads(receipt.evidence or ""), indent=2)
        result = verify_receipt(tamper(receipt, pretty))
        assert result.status == "tampered" and "not in canonical form" in result.reason

    def test_missing_evidence(self) -> None:
        receipt = receipt_record("att_1", 2)
        assert verify_receipt(replace(receipt, evidence=None, evidence_fingerprint=None)).status == "missing"

    def test_seal_is_canonical_text_and_fingerprint(self) -> None:
        text, fp = seal({"b": 1, "a": 2})
        assert text.startswith('{"a":2,"b":1,"seal":{"alg":"hmac-sha256","key_id":') and fp.startswith("sha256:")


def test_evidence_copied_from_another_attempt_fails_integrity_though_its_fingerprint_verifies() -> None:
    attempts, receipts = _two_good()
    # Sealed evidence of Attempt 1's third Receipt, planted on Attempt 2's: text and digest agree.
    foreign = receipts["att_1"][2]
    receipts["att_2"][2] = replace(foreign, id="rcp_att_2_3", attempt_id="att_2")
    report = evaluate_gate(run_record(), attempts, receipts)
    assert _failing(report) == {"evidence_integrity"}
    assert "execution.attempt_id is 'att_1', the receipt's is 'att_2'" in _reason(report, "evidence_integrity")


def test_evidence_of_another_package_fails_integrity() -> None:
    attempts, receipts = _two_good()
    evidence = evidence_for(4, "att_2")
    evidence["package"] = {"name": "other", "version": "9", "content_digest": "sha256:" + "f" * 64}
    receipts["att_2"][3] = receipt_record("att_2", 4, evidence)
    report = evaluate_gate(run_record(), attempts, receipts)
    assert "evidence_integrity" in _failing(report)
    assert "package.content_digest" in _reason(report, "evidence_integrity")


def test_evidence_naming_another_scenario_fails_verification() -> None:
    evidence = evidence_for(2, "att_1")
    record = receipt_record("att_1", 3, evidence)  # position 3's row holding position 2's evidence
    check = verify_receipt(record)
    assert check.status == "tampered" and "scenario" in check.reason
