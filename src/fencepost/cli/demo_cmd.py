"""``fencepost demo payments``: the action host's self-verifying demo (``fencepost.demo.runner``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
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
    """Charge a real local payment provider through the action host, crash workers, and check every verdict.

    Starts SimPay (a payment provider on 127.0.0.1 that keeps a ledger of the charges it really made), real
    `fencepost worker` subprocesses, and one invocation per scenario: a success, a decline, a flaky provider, a
    provider that charges and then times out or answers garbage, a worker SIGKILLed right after the provider
    charged (for an action that is not idempotent and for one that is), an idempotency key reused with another
    amount, a handler that kills every worker that runs it, and (inline, through a store wrapper that injects the
    fault) a charge whose checkpoint write the store refuses, which ends `reconciliation_required` with an
    evidence gap that audit reports. Each row is checked against SimPay's ledger, and the demo's store is
    audited: the one gap of that row is the only finding allowed. Takes about 30 seconds. Exits 0 only when
    every row holds, 1 otherwise. Rows are numbered as in the specification's table of payment scenarios, with
    row 13 (the refused checkpoint) added after it; rows 8-10 (payouts completed later by webhook) come with
    external completions.
    """
    with handled():
        progress = None if json else (lambda line: render.console.print(line, markup=False))
        report = PaymentsDemo(directory, progress=progress).run()
    emit(json, report.as_json(), lambda: _print(report))
    if not report.holds:
        raise typer.Exit(1)


def _print(report: Report) -> None:
    table = Table(title="payments demo: fencepost's verdicts against SimPay's ledger")
    table.add_column("#", justify="right")
    table.add_column("scenario")
    table.add_column("charges", justify="right")
    table.add_column("calls", justify="right")
    table.add_column("verdict", no_wrap=True)
    table.add_column("evidence")
    table.add_column("holds", no_wrap=True)
    for row in report.rows:
        table.add_row(str(row.scenario.number), row.scenario.title, str(row.charges), str(row.calls),
                      render.styled(row.status), _evidence(row),
                      "[green]yes[/green]" if row.holds else "[red]no: " + "; ".join(row.problems) + "[/red]")
    render.console.print(table)
    unknown = [r for r in report.rows if r.status == "reconciliation_required" and r.adapter_invocation_id]
    if unknown:
        ledger = report.directory / "simpay-ledger.db"
        render.console.print("what an operator does next: read the verdict's evidence, then look the step's key up "
                             "at the provider before deciding", markup=False)
        for row in unknown:
            render.console.print(f"  {row.scenario.number:>2}. fencepost host show {row.invocation_id} --database "
                                 f"{report.database}\n      provider key {row.adapter_invocation_id}", markup=False)
        render.console.print(f"  SimPay's ledger stays in {ledger}: `python -m fencepost.demo.simpay --ledger "
                             f"{ledger}` serves it again, and GET /v1/charges?key=KEY answers what it charged",
                             markup=False)
    if report.stray_findings:
        render.console.print("audit findings that no row explains:", markup=False)
        for finding in report.stray_findings:
            render.console.print(f"  {finding}", markup=False)
    verdict = "every row holds" if report.holds else "SOME ROWS DO NOT HOLD"
    render.console.print(f"{verdict} ({report.seconds:.0f} s); files in {report.directory}", markup=False)
    sys.stdout.flush()


def _evidence(row: Row) -> str:
    """The evidence cell: the verdict's reason (or the last step event), the attempt; for a verdict-first
    fallback, what survived (the charge id in the event and the verdict, the record) and the gap audit reports."""
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
