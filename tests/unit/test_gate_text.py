"""The release gate as `fencepost rehearsal gate` prints it: the single-Attempt note appears only when it is true."""

from __future__ import annotations

from fencepost.cli import render
from fencepost.core.statuses import AttemptStatus, CommandStatus
from fencepost.evidence.gate import evaluate_gate
from fencepost.rehearsal.views import gate_view
from unit.builders import attempt_record, receipts_for, run_record


def _printed(view: dict[str, object]) -> str:
    with render.console.capture() as captured:
        render.gate(view)
    return captured.get()


def test_a_passing_single_attempt_gate_says_its_semantics_were_not_compared() -> None:
    view = gate_view(evaluate_gate(run_record(), [attempt_record(1)], {"att_1": receipts_for("att_1")}))
    text = _printed(view)
    assert view["passed"] and "PASS" in text
    assert "semantics were not compared: only one successful Attempt" in text
    # a check that compared nothing is not shown as passed (a new-user trial read "pass" as compared)
    line = next(ln for ln in text.splitlines() if "semantic_match" in ln)
    assert line.split()[0] == "open", line


def test_a_compared_pair_marks_semantic_match_passed() -> None:
    attempts = [attempt_record(1), attempt_record(2)]
    view = gate_view(evaluate_gate(run_record(), attempts, {a.id: receipts_for(a.id) for a in attempts}))
    line = next(ln for ln in _printed(view).splitlines() if "semantic_match" in ln)
    assert line.split()[0] == "pass", line


def test_a_gate_with_no_successful_attempt_does_not_claim_one() -> None:
    failed = [attempt_record(seq, AttemptStatus.FAILED, CommandStatus.FAILED) for seq in (1, 2)]
    view = gate_view(evaluate_gate(run_record(), failed, {a.id: receipts_for(a.id) for a in failed}))
    text = _printed(view)
    assert not view["passed"] and "BLOCKED" in text
    assert "Attempt #2 is not a successful Attempt to compare" in text
    assert "only one successful Attempt" not in text
