"""``fencepost demo payments``: the action host's self-verifying demo (``fencepost.demo.runner``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from fencepost.cli import render
from fencepost.cli.common import JsonOpt, emit, handled
from fencepost.demo.runner import PaymentsDemo, Report, Row

app = typer.Typer(help="Self-verifying demonstrations on embedded SQLite and loopback.", no_args_is_help=True)


@app.command()
def payments(
    directory: Annotated[Path, typer.Option(
        "--dir", help="The demo's own directory: its database, SimPay's ledger, the workers' logs. Cleared at "
                      "the start of each run; a non-empty directory that is not the demo's is refused.")]
        = Path("fencepost-demo"),
    json: JsonOpt = False,
) -> None:
    """Charge and pay out through a real local payment provider, crash workers, and check every verdict.

    Starts SimPay (a payment provider on 127.0.0.1 that keeps a ledger of the charges and payouts it really
    made and of every webhook it sent), real `fencepost worker` subprocesses, a real `fencepost serve
    --no-worker` as the completion endpoint for SimPay's signed webhooks, and one invocation per scenario: a
    success, a decline, a flaky provider, a provider that charges and then times out or answers garbage, a
    worker SIGKILLed right after the provider charged (for an action that is not idempotent and for one that
    is), asynchronous payouts completed by webhook, an idempotency key reused with another amount, a handler
    that kills every worker that runs it, and (inline, through a store wrapper that injects the fault) a charge
    whose checkpoint write the store refuses, which ends `reconciliation_required` with an evidence gap that
    audit reports. Each row is checked against SimPay's ledger, and the demo's store is audited: the one gap
    of that row is the only finding allowed. Takes about a minute. Exits 0 only when every row holds, 1
    otherwise.

    Rows are numbered as in the host specification's table of payment scenarios (its section 2.10), with row 13
    (the refused checkpoint) added after it. The five webhook behaviours share its three payout rows: row 8 is a
    webhook on time, then the same webhook again (absorbed); row 9 is on time, then a contradictory one
    (paid, then failed); row 10 is a webhook that never arrives, so the workers' sweep settles the payout
    `reconciliation_required` after its 5 s completion deadline, and then arrives late and settles it.
    """
    with handled():
        progress = None if json else (lambda line: render.console.print(line, markup=False))
        report = PaymentsDemo(directory, progress=progress).run()
    emit(json, report.as_json(), lambda: _print(report))
    if not report.holds:
        raise typer.Exit(1)


#: Below this many columns the seven-column table folds every cell to a few letters: one block per row instead.
TABLE_MIN_WIDTH = 140


def _print(report: Report) -> None:
    if render.console.width < TABLE_MIN_WIDTH:
        _print_blocks(report)
    else:
        _print_table(report)
    _print_next_steps(report)


def _holds(row: Row) -> str:
    return "[green]yes[/green]" if row.holds else "[red]no: " + escape("; ".join(row.problems)) + "[/red]"


def _print_blocks(report: Report) -> None:
    """The table's cells as one block per row, for a terminal narrower than ``TABLE_MIN_WIDTH``."""
    render.console.print("payments demo: fencepost's verdicts against SimPay's ledger")
    for row in report.rows:
        render.console.print(f"{row.scenario.number:>3}. {escape(row.scenario.title)}: holds {_holds(row)}")
        # _verdict's cell is styled markup, as in the table
        render.console.print(f"     verdict {_verdict(row)}; SimPay ledger {_ledger(row)}, {row.calls} call(s)")
        render.console.print(f"     evidence: {_evidence(row)}", markup=False)


def _print_table(report: Report) -> None:
    table = Table(title="payments demo: fencepost's verdicts against SimPay's ledger")
    table.add_column("#", justify="right")
    table.add_column("scenario")
    table.add_column("SimPay ledger", justify="right")
    table.add_column("calls", justify="right")
    table.add_column("verdict", no_wrap=True)
    table.add_column("evidence")
    table.add_column("holds", no_wrap=True)
    for row in report.rows:
        table.add_row(str(row.scenario.number), row.scenario.title, _ledger(row), str(row.calls), _verdict(row),
                      _evidence(row), _holds(row))
    render.console.print(table)


def _print_next_steps(report: Report) -> None:
    database = shlex.quote(report.database)
    unknown = [r for r in report.rows if r.status == "reconciliation_required" and r.adapter_invocation_id]
    if unknown:
        ledger = shlex.quote(str(report.directory / "simpay-ledger.db"))
        render.console.print("what an operator does next: read the verdict's evidence, then look the step's key up "
                             "at the provider before deciding", markup=False)
        for row in unknown:
            payout = f", payout {row.external_reference}" if row.external_reference else ""
            render.console.print(f"  {row.scenario.number:>2}. fencepost host show {row.invocation_id} --database "
                                 f"{database}\n      provider key {row.adapter_invocation_id}{payout}",
                                 markup=False)
        render.console.print(f"  SimPay's ledger stays in {ledger}: `python -m fencepost.demo.simpay --ledger "
                             f"{ledger}` serves it again, GET /v1/charges?key=KEY answers what it charged, and "
                             "GET /_ledger lists its payouts and every webhook it sent",
                             markup=False)
    never_called = [r for r in report.rows if r.status == "reconciliation_required" and not r.adapter_invocation_id]
    if never_called:
        render.console.print("no provider was called for these: the handler never got as far as a step, so there is "
                             "nothing to look up; fix what kills the worker, then settle the invocation failed",
                             markup=False)
        for row in never_called:
            render.console.print(f"  {row.scenario.number:>2}. fencepost host show {row.invocation_id} --database "
                                 f"{database}\n      fencepost host resolve {row.invocation_id} --failed "
                                 f"--as ops:you --note 'no provider call; the handler killed its worker' "
                                 f"--database {database}", markup=False)
    if report.stray_findings:
        render.console.print("audit findings that no row explains:", markup=False)
        for finding in report.stray_findings:
            render.console.print(f"  {finding}", markup=False)
    verdict = "every row holds" if report.holds else "SOME ROWS DO NOT HOLD"
    render.console.print(f"{verdict} ({report.seconds:.0f} s); files in {report.directory}", markup=False)
    sys.stdout.flush()


def _ledger(row: Row) -> str:
    """The ledger cell: what SimPay made under the step's key (a payout row counts its payout)."""
    if row.scenario.expect_payout is not None:
        return f"{row.payouts} payout" + ("s" if row.payouts != 1 else "")
    return f"{row.charges} charge" + ("s" if row.charges != 1 else "")


def _verdict(row: Row) -> str:
    """The verdict cell; a verdict a late webhook replaced shows both (row 10)."""
    shown = render.styled(row.status)
    if row.status_before_late_webhook:
        return f"{render.styled(row.status_before_late_webhook)} -> {shown}"
    return shown


def _payout_evidence(row: Row) -> str:
    """The evidence cell of a payout row: parking, the sweep, and each webhook SimPay sent with fencepost's
    answer, in order (an early one answered "later" shows too)."""
    parts = [f"handoff {row.external_reference}, parked" if row.parked_at else "never parked"]
    for webhook in row.webhooks:
        if row.overdue_at and webhook["sent_at"] > row.overdue_at and not any("sweep" in p for p in parts):
            parts.append("no webhook by the deadline: the sweep set overdue_at; then a late one")
        parts.append(f"{webhook['type']} -> {webhook['answer_status']} {webhook['answer']}")
    if row.overdue_at and not any("sweep" in p for p in parts):
        parts.append("the sweep set overdue_at")
    if row.contradiction:
        parts.append(f"ExternalOperationContradicted; the first outcome ({row.completion_outcome}) kept")
    return "; ".join(parts)


def _evidence(row: Row) -> str:
    """The evidence cell: the verdict's reason (or the last step event), the attempt; for a verdict-first
    fallback, what survived (the charge id in the event and the verdict, the record) and the gap audit reports."""
    if row.scenario.expect_payout is not None:
        return _payout_evidence(row)
    reason = (row.reason or "").removeprefix("step charge: ")
    evidence = reason or (row.events[-2] if len(row.events) >= 2 else "")
    if row.attempt_count and row.attempt_count > 1:
        evidence = f"{evidence}; attempt {row.attempt_count}"
    if row.settled_by:
        kept = [f"{kind} record" for kind in row.reconciliations]
        where = [name for name, charge in (("AdapterInvocationSucceeded", row.event_charge_id),
                                           ("the verdict", row.verdict_charge_id)) if charge]
        if where:
            charge = row.event_charge_id or row.verdict_charge_id
            kept.insert(0, f"charge {charge} in {' and '.join(where)}")
        evidence = f"settled by {row.settled_by}; kept: {', '.join(kept) or 'nothing'}"
        for finding in row.findings:
            evidence += f"; audit: {finding}"
    return evidence
