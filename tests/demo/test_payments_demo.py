"""``fencepost demo payments`` end to end, as a new user runs it: a real SimPay, real worker subprocesses, real
SIGKILLs; every row's verdict checked against SimPay's own ledger (host-spec §2.10, issue 12), row 13's
verdict-first fallback with the evidence that survived and the one gap audit reports (issue 13, ADR 0031), and
rows 8-10: payouts completed by SimPay's signed webhooks through a real ``fencepost serve`` (issue 14, host-spec
N, ADR 0036)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fencepost.core.statuses import InvocationStatus
from fencepost.demo.ledger import Ledger
from fencepost.demo.runner import MARKER, SCENARIOS, PaymentsDemo, Report, Row, prepare
from fencepost.demo.simpay import SimPay
from fencepost.store import open_store
from fencepost.store.audit import audit_store
from helpers.processes import run_cli

EXPECTED = {1: ("succeeded", 1, 1), 2: ("failed", 0, 1), 3: ("succeeded", 1, 3),
            4: ("reconciliation_required", 1, 1), 5: ("reconciliation_required", 1, 1),
            6: ("reconciliation_required", 1, 1), 7: ("succeeded", 1, 2), 8: ("succeeded", 0, 1),
            9: ("reconciliation_required", 0, 1), 10: ("succeeded", 0, 1), 11: ("refused", 0, 0),
            12: ("reconciliation_required", 0, 0), 13: ("reconciliation_required", 1, 1)}


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
    shown = run_cli(["host", "show", rows[12]["invocation_id"], "--database", report["database"]], cwd=tmp_path)
    assert "(the budget allows 5 claims, the first included; claim 6 settled it without running the handler " \
           "again)" in shown.stdout, shown.describe()
    # The provider's ground truth, read here from its ledger file: one charge per charged scenario, and the
    # idempotent recovery re-sent its charge under the same key.
    ledger = Ledger(directory / "simpay-ledger.db")
    assert len(ledger.charges()) == sum(charges for _, charges, _ in EXPECTED.values())
    keys = [call["idempotency_key"] for call in ledger.calls() if call["idempotency_key"]]
    assert keys.count(rows[7]["adapter_invocation_id"]) == 2
    assert keys.count(rows[6]["adapter_invocation_id"]) == 1
    # Row 13: SimPay's one charge under the step's key is the one the surviving evidence names.
    gap = rows[13]
    [charge] = [c for c in ledger.charges() if c["idempotency_key"] == gap["adapter_invocation_id"]]
    assert gap["settled_by"] == "verdict-first-fallback" and gap["reconciliations"] == ["applied_effect"]
    assert gap["event_charge_id"] == gap["verdict_charge_id"] == charge["id"]
    assert "AdapterInvocationSucceeded" in gap["events"]
    # ``fencepost audit`` on the demo's database, run here: the one finding is row 13's missing checkpoint.
    audit = run_cli(["audit", "--database", report["database"], "--json"], cwd=tmp_path)
    assert audit.returncode == 1, audit.describe()
    [finding] = json.loads(audit.stdout)["findings"]
    assert finding["subject"] == gap["invocation_id"] and gap["adapter_invocation_id"] in finding["detail"]
    assert "is still running" in finding["detail"] and gap["audit_findings"] == [finding["detail"]]
    assert report["stray_audit_findings"] == []
    # Rows 8-10, from SimPay's ledger file: one payout each, under the step's key, and the webhooks it sent with
    # the answers fencepost gave (any early one answered "later", then taken).
    for number, taken, status in [(8, [("payout.paid", "settled"), ("payout.paid", "absorbed")], "paid"),
                                  (9, [("payout.paid", "settled"), ("payout.failed", "contradicted")], "failed"),
                                  (10, [("payout.paid", "settled")], "paid")]:
        row = rows[number]
        [payout] = [p for p in ledger.payouts() if p["idempotency_key"] == row["adapter_invocation_id"]]
        assert payout["status"] == status and row["external_reference"] == payout["id"]
        sent = ledger.webhooks(payout["id"])
        assert [(w["type"], w["answer"]) for w in sent if w["answer_status"] == 200] == taken
        assert {w["answer"] for w in sent if w["answer_status"] != 200} <= {"unknown-reference", "still-executing"}
        assert row["parked_at"] is not None and row["completion_outcome"] == "completed"
    assert len(ledger.payouts()) == 3
    assert rows[8]["overdue_at"] is None and rows[9]["overdue_at"] is None
    assert rows[9]["contradiction"] == ["completed", "failed"] and "contradicts the first" in rows[9]["reason"]
    assert "ExternalOperationContradicted" in rows[9]["events"]
    late = rows[10]
    assert late["status_before_late_webhook"] == "reconciliation_required" and late["overdue_at"] is not None
    assert all(w["sent_at"] > late["overdue_at"] for w in late["simpay_webhooks"])
    assert "ExternalOperationCompleted" in late["events"]


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


# ── row 13: the provider charges, then the store refuses the checkpoint write (issue 13) ──

def test_the_store_fault_row_runs_inline_against_simpay_and_holds(tmp_path: Path) -> None:
    """Row 13 alone, as the demo runs it: a real SimPay and the demo's real SQLite store, wrapped so that the
    checkpoint write fails; SimPay charged once, the fallback's verdict and event carry that charge, and audit
    reports exactly the missing checkpoint."""
    demo = PaymentsDemo(tmp_path / "demo")
    prepare(demo.directory)
    store = open_store(demo.database, create=True)
    store.migrate()
    simpay = SimPay(demo.directory / "simpay-ledger.db").start()
    row = Row(next(s for s in SCENARIOS if s.number == 13))
    try:
        demo._store_fault(store, simpay, row)
        demo._measure(store, simpay, row)
        findings = audit_store(store)
        row.findings = [f.detail for f in findings if f.subject == row.invocation_id]
        row.check()
        [charge] = simpay.ledger.charges()
    finally:
        simpay.stop()
        store.close()
    assert row.holds, row.problems
    assert [f.subject for f in findings] == [row.invocation_id]
    assert row.status == "reconciliation_required" and row.settled_by == "verdict-first-fallback"
    assert row.event_charge_id == row.verdict_charge_id == charge["id"]
    assert charge["idempotency_key"] == row.adapter_invocation_id


def gap_row(**changes: Any) -> Row:
    """Row 13 as it holds (the measurements a good run records), with ``changes`` doctored in."""
    scenario = next(s for s in SCENARIOS if s.number == 13)
    good = Row(scenario, invocation_id="inv_1", status="reconciliation_required",
               reason="step charge succeeded at the provider but its checkpoint could not be recorded "
                      "(StoreUnavailable: injected fault); an operator decides",
               adapter_invocation_id="ai_1", charges=1, calls=1, provider_charge_id="ch_1", event_charge_id="ch_1",
               verdict_charge_id="ch_1", settled_by="verdict-first-fallback", reconciliations=["applied_effect"],
               findings=["evidence gap: adapter invocation ai_1 (step charge) is still running under a "
                         "reconciliation_required verdict"])
    return dataclasses.replace(good, **changes)


def test_the_store_fault_row_holds_on_its_evidence() -> None:
    row = gap_row()
    row.check()
    assert row.holds, row.problems


@pytest.mark.parametrize(("changes", "problem"), [
    ({"charges": 2}, "2 charge(s) at SimPay, expected 1"),
    ({"status": "succeeded"}, "verdict succeeded, expected reconciliation_required"),
    ({"settled_by": None}, "settled by the atomic unit, expected verdict-first-fallback"),
    ({"event_charge_id": None}, "no AdapterInvocationSucceeded event with SimPay's charge ch_1"),
    ({"event_charge_id": "ch_other"}, "no AdapterInvocationSucceeded event with SimPay's charge ch_1"),
    ({"verdict_charge_id": None}, "the verdict does not carry SimPay's charge ch_1"),
    ({"provider_charge_id": None}, "no charge at SimPay to find in the evidence"),
    ({"reconciliations": []}, "no applied_effect reconciliation record"),
    ({"findings": []}, "audit reports nothing, expected exactly the missing checkpoint of ai_1"),
    ({"findings": ["evidence gap: adapter invocation ai_2 (step charge) is still running under a "
                   "reconciliation_required verdict"]}, "expected exactly the missing checkpoint of ai_1"),
    ({"findings": ["evidence gap: adapter invocation ai_1 (step charge) is still running under a "
                   "reconciliation_required verdict", "reconciliation_required invocation has 0 verdict event(s)"]},
     "expected exactly the missing checkpoint of ai_1"),
], ids=["two-charges", "verdict", "not-fallback", "no-event", "other-charge", "verdict-without-charge",
        "no-provider-charge", "no-record", "no-gap", "another-gap", "a-second-finding"])
def test_a_doctored_store_fault_row_does_not_hold(changes: dict[str, Any], problem: str) -> None:
    row = gap_row(**changes)
    row.check()
    assert not row.holds
    assert any(problem in p for p in row.problems), row.problems


def test_any_other_audit_finding_fails_the_demo() -> None:
    """Only row 13 may have a finding: one on another row fails that row, one naming no row fails the report."""
    scenario = next(s for s in SCENARIOS if s.number == 1)
    clean = Row(scenario, invocation_id="inv_2", status="succeeded", charges=1, calls=1)
    clean.check()
    assert clean.holds
    dirty = Row(scenario, invocation_id="inv_2", status="succeeded", charges=1, calls=1,
                findings=["succeeded invocation has 0 verdict event(s)"])
    dirty.check()
    assert dirty.problems == ["audit reports succeeded invocation has 0 verdict event(s)"]
    held = gap_row()
    held.check()
    report = Report(Path("."), "sqlite:///x.db", "http://127.0.0.1:1", [clean, held], 1.0)
    assert report.holds
    stray = dataclasses.replace(report, stray_findings=["integrity sqlite: page 3 is corrupt"])
    assert not stray.holds and stray.as_json()["stray_audit_findings"] == ["integrity sqlite: page 3 is corrupt"]


# ── rows 8-10: asynchronous payouts completed by SimPay's webhooks (issue 14) ──

GOOD_PAYOUTS: dict[int, dict[str, Any]] = {
    8: {"status": "succeeded", "payout_status": "paid",
        "webhooks": [("payout.paid", 404, "unknown-reference"), ("payout.paid", 200, "settled"),
                     ("payout.paid", 200, "absorbed")]},
    9: {"status": "reconciliation_required", "payout_status": "failed",
        "reason": "a second external completion (failed) contradicts the first (completed); the first is kept, "
                  "an operator decides", "contradiction": ("completed", "failed"),
        "webhooks": [("payout.paid", 409, "still-executing"), ("payout.paid", 200, "settled"),
                     ("payout.failed", 200, "contradicted")]},
    10: {"status": "succeeded", "payout_status": "paid", "overdue_at": "2026-01-01T00:00:05.000000Z",
         "status_before_late_webhook": "reconciliation_required",
         "webhooks": [("payout.paid", 200, "settled")]},
}


def payout_row(number: int, **changes: Any) -> Row:
    """Payout row ``number`` as a good run measures it, with ``changes`` doctored in."""
    scenario = next(s for s in SCENARIOS if s.number == number)
    good = dict(GOOD_PAYOUTS[number])
    sent = webhooks(*good.pop("webhooks"))
    row = Row(scenario, invocation_id=f"inv_{number}", adapter_invocation_id=f"ai_{number}", charges=0, calls=1,
              payouts=1, provider_payout_id=f"po_{number}", external_reference=f"po_{number}", webhooks=sent,
              parked_at="2026-01-01T00:00:00.500000Z", completion_outcome="completed",
              completion_reference=f"po_{number}", **good)
    return dataclasses.replace(row, **changes)


@pytest.mark.parametrize("number", [8, 9, 10])
def test_a_payout_row_holds_on_its_evidence(number: int) -> None:
    row = payout_row(number)
    row.check()
    assert row.holds, row.problems


def webhooks(*sent: tuple[str, int | None, str]) -> list[dict[str, Any]]:
    return [{"type": kind, "attempt": 1, "answer_status": code, "answer": answer,
             "sent_at": f"2026-01-01T00:00:0{6 + i}.000000Z"} for i, (kind, code, answer) in enumerate(sent)]


@pytest.mark.parametrize(("number", "changes", "problem"), [
    (8, {"payouts": 2}, "2 payout(s) at SimPay, expected 1"),
    (8, {"payouts": 0, "provider_payout_id": None}, "0 payout(s) at SimPay, expected 1"),
    (8, {"external_reference": "po_other"}, "the handoff's reference po_other is not SimPay's payout po_8"),
    (8, {"charges": 1}, "1 charge(s) at SimPay, expected 0"),
    (8, {"calls": 2}, "2 provider call(s), expected 1"),
    (8, {"status": "reconciliation_required"}, "verdict reconciliation_required, expected succeeded"),
    (8, {"webhooks": webhooks(("payout.paid", 200, "settled"))},
     "fencepost took the webhooks payout.paid -> settled, expected payout.paid -> settled, payout.paid -> absorbed"),
    (8, {"webhooks": webhooks(("payout.paid", 200, "settled"), ("payout.paid", 200, "contradicted"))},
     "expected payout.paid -> settled, payout.paid -> absorbed"),
    (8, {"webhooks": webhooks(("payout.paid", 401, "invalid-signature"), ("payout.paid", 200, "settled"),
                              ("payout.paid", 200, "absorbed"))},
     "a payout.paid webhook was answered 401 invalid-signature, not taken nor deferred"),
    (8, {"webhooks": webhooks(("payout.paid", None, "no answer: refused"), ("payout.paid", 200, "settled"),
                              ("payout.paid", 200, "absorbed"))}, "answered None no answer"),
    (8, {"parked_at": None}, "the invocation never parked (no parked_at)"),
    (8, {"completion_outcome": None}, "the recorded completion is None of po_8"),
    (8, {"completion_reference": "po_x"}, "the recorded completion is completed of po_x"),
    (8, {"overdue_at": "2026-01-01T00:00:05.000000Z"}, "the sweep set overdue_at"),
    (8, {"contradiction": ("completed", "completed")}, "an unexpected ExternalOperationContradicted event"),
    (8, {"payout_status": "pending"}, "SimPay's payout is pending, expected paid"),
    (9, {"contradiction": None}, "no ExternalOperationContradicted event"),
    (9, {"contradiction": ("failed", "completed")}, "no ExternalOperationContradicted event"),
    (9, {"completion_outcome": "failed"}, "the recorded completion is failed of po_9"),
    (9, {"status": "succeeded"}, "verdict succeeded, expected reconciliation_required"),
    (9, {"reason": "step payout: accepted"}, "the reason does not say 'contradicts the first'"),
    (9, {"payout_status": "paid"}, "SimPay's payout is paid, expected failed"),
    (10, {"overdue_at": None}, "the sweep did not set overdue_at"),
    (10, {"status_before_late_webhook": "running"}, "before the late webhook it was running"),
    (10, {"status_before_late_webhook": None}, "before the late webhook it was None"),
    (10, {"webhooks": [{"type": "payout.paid", "attempt": 1, "answer_status": 200, "answer": "settled",
                        "sent_at": "2026-01-01T00:00:04.000000Z"}]}, "before the sweep"),
    (10, {"status": "reconciliation_required"}, "verdict reconciliation_required, expected succeeded"),
    (10, {"webhooks": []}, "fencepost took the webhooks none, expected payout.paid -> settled"),
    (10, {"parked_at": None}, "the invocation never parked"),
], ids=["two-payouts", "no-payout", "other-reference", "a-charge", "two-calls", "verdict", "no-repeat",
        "repeat-contradicted", "refused-signature", "no-answer", "not-parked", "no-completion", "other-completion",
        "swept", "contradiction-event", "simpay-pending", "9-no-event", "9-flipped-event", "9-second-kept",
        "9-verdict", "9-reason", "9-simpay-paid", "10-not-swept", "10-not-seen-swept", "10-nothing-seen",
        "10-early-webhook", "10-not-settled", "10-no-webhook", "10-not-parked"])
def test_a_doctored_payout_row_does_not_hold(number: int, changes: dict[str, Any], problem: str) -> None:
    row = payout_row(number, **changes)
    row.check()
    assert not row.holds
    assert any(problem in p for p in row.problems), row.problems


def test_a_payout_row_shows_its_webhooks_and_verdicts() -> None:
    """The table's cells for rows 9 and 10: each webhook with fencepost's answer; the swept verdict before the
    late one."""
    from fencepost.cli.demo_cmd import _evidence, _ledger, _verdict

    contradicted = payout_row(9)
    assert _ledger(contradicted) == "1 payout"
    assert _evidence(contradicted) == (
        "handoff po_9, parked; payout.paid -> 409 still-executing; payout.paid -> 200 settled; "
        "payout.failed -> 200 contradicted; ExternalOperationContradicted; the first outcome (completed) kept")
    late = payout_row(10)
    assert "reconciliation_required" in _verdict(late) and "succeeded" in _verdict(late)
    assert _evidence(late) == ("handoff po_10, parked; no webhook by the deadline: the sweep set overdue_at; then a "
                               "late one; payout.paid -> 200 settled")


def test_the_summary_keeps_every_cell_whole_in_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """At 80 columns the seven-column table folded each cell to three letters ("rec…"); blocks keep them whole."""
    import io

    from rich.console import Console
    from rich.text import Text

    from fencepost.cli import demo_cmd, render
    from fencepost.cli.demo_cmd import _evidence, _verdict

    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=80, highlight=False, soft_wrap=True))
    rows = [payout_row(9), payout_row(10)]
    demo_cmd._print(Report(tmp_path, "sqlite:///demo.db", "http://127.0.0.1:1", rows, 1.0))
    text = out.getvalue()
    for row in rows:
        verdict = Text.from_markup(_verdict(row)).plain  # styled as in the table, never printed as tags
        assert f"verdict {verdict}; SimPay ledger 1 payout, 1 call(s)" in text, text
        assert f"evidence: {_evidence(row)}" in text and f"{row.scenario.number:>3}. {row.scenario.title}" in text
    assert "…" not in text and "[/" not in text and "every row holds" in text, text


def test_the_next_steps_name_every_open_row_and_quote_the_database(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """Row 12 (poison) never called the provider, so it has no key to look up; it still needs an operator, and
    the printed commands must survive a database path with a space when pasted into a shell."""
    import io
    import shlex

    from rich.console import Console

    from fencepost.cli import demo_cmd, render

    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=300, highlight=False, soft_wrap=True))
    by_number = {s.number: s for s in SCENARIOS}
    timed_out = Row(by_number[4], invocation_id="inv_4", status="reconciliation_required",
                    adapter_invocation_id="ai_4")
    poison = Row(by_number[12], invocation_id="inv_12", status="reconciliation_required")
    fine = Row(by_number[1], invocation_id="inv_1", status="succeeded", adapter_invocation_id="ai_1")
    directory = tmp_path / "my demo"
    database = f"sqlite:///{directory}/fencepost-demo.db"
    demo_cmd._print_next_steps(Report(directory, database, "http://127.0.0.1:1", [fine, timed_out, poison], 1.0))
    lines = [line.strip() for line in out.getvalue().splitlines()]
    commands = [shlex.split(line[line.index("fencepost "):]) for line in lines if "fencepost host" in line]
    assert ["fencepost", "host", "show", "inv_4", "--database", database] in commands
    assert ["fencepost", "host", "show", "inv_12", "--database", database] in commands
    resolve = [c for c in commands if c[:3] == ["fencepost", "host", "resolve"]]
    assert resolve == [["fencepost", "host", "resolve", "inv_12", "--failed", "--as", "ops:you", "--note",
                        "no provider call; the handler killed its worker", "--database", database]]
    assert not any(c[3] == "inv_1" for c in commands)
    assert "provider key ai_4" in out.getvalue() and "provider key ai_12" not in out.getvalue()
    [serve_ledger] = [line for line in lines if "python -m fencepost.demo.simpay --ledger" in line]
    pasted = shlex.split(serve_ledger[serve_ledger.index("`") + 1:serve_ledger.rindex("`")])
    assert pasted == ["python", "-m", "fencepost.demo.simpay", "--ledger", str(directory / "simpay-ledger.db")]


@pytest.mark.parametrize("amount", [True, "10", 10.0])
def test_the_demo_charges_only_an_integer_amount(amount: Any) -> None:
    """A break-it trial: `"amount": true` was charged as 1 cent (pydantic's lax mode). Money is a JSON integer."""
    from pydantic import ValidationError

    from fencepost.demo.payments import ChargeParams

    assert ChargeParams.model_validate({"order_id": "o-1", "amount": 10}).amount == 10
    with pytest.raises(ValidationError):
        ChargeParams.model_validate({"order_id": "o-1", "amount": amount})
