"""``fencepost workflow plan | admit | show``: atomic admission of workflow runs (ADR-0224).

Exit codes: 2 invalid plan, 3 conflict, 5 unavailable (store error or corrupt evidence), 6 not allowed
(a start guard is false; the message names it).
"""

from __future__ import annotations

import json as jsonlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.core.canonical import parse_json
from fencepost.core.errors import InvalidPlan
from fencepost.rehearsal.views import iso
from fencepost.store.url import DEFAULT_URL
from fencepost.workflows.service import WorkflowService

app = typer.Typer(help="Plan and atomically admit workflow runs of installed packages.", no_args_is_help=True)


@app.command()
def plan(package: Annotated[str, typer.Argument(help="Installed package name.")],
         workflow: Annotated[str, typer.Argument(help="Workflow id from the package manifest.")],
         database: DatabaseOpt = DEFAULT_URL,
         plan_id: Annotated[str | None, typer.Option(help="Idempotency key of this run (default: random).")] = None,
         inputs: Annotated[str, typer.Option("--inputs", help="Run inputs as a JSON object.")] = "{}",
         output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the plan here.")] = None) -> None:
    """Build a normalized plan (with its digest) for one run; prints JSON (or writes --output)."""
    with handled():
        try:
            parsed = parse_json(inputs)
        except ValueError as error:
            raise InvalidPlan(f"--inputs is not valid JSON: {error}") from None
        if not isinstance(parsed, dict):
            raise InvalidPlan("--inputs must be a JSON object")
    with opened(database) as store, handled():
        data = WorkflowService(store).plan(package, workflow, plan_id=plan_id, inputs=parsed)
    text = jsonlib.dumps(data, indent=2, sort_keys=True) + "\n"
    if output is not None:
        output.write_text(text, encoding="utf-8")
        typer.echo(f"plan {data['plan_id']} ({len(data['steps'])} steps, digest {data['digest']}) -> {output}",
                   err=True)
    else:
        sys.stdout.write(text)


@app.command()
def admit(plan_file: Annotated[str, typer.Argument(help="Plan JSON file, or - for standard input.")],
          database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Admit a plan in one transaction: prints created (new Run) or existing (the original receipt)."""
    with handled():
        try:
            raw = sys.stdin.read() if plan_file == "-" else Path(plan_file).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidPlan(f"cannot read the plan: {error.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidPlan("the plan is not UTF-8 text") from None
        try:
            data = parse_json(raw)
        except ValueError as error:
            raise InvalidPlan(f"the plan is not valid JSON: {error}") from None
    with opened(database) as store, handled():
        result = WorkflowService(store).admit(data)
    view = {"outcome": result.outcome, "run_id": result.run_id, "receipt": result.receipt}
    emit(json, view, lambda: typer.echo(f"{result.outcome}: run {result.run_id} "
                                        f"({len(result.receipt['step_runs'])} steps, receipt "
                                        f"{result.receipt['receipt_id']})"))


def _rows_view(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def clean(row: dict[str, Any]) -> dict[str, Any]:
        return {k: (iso(v) if hasattr(v, "isoformat") else v) for k, v in row.items()}

    return {table: [clean(r) for r in items] for table, items in rows.items()}


@app.command()
def show(ident: Annotated[str, typer.Argument(help="Plan id or workflow run id.")],
         database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Show an admission: Run, StepRuns, events, mutations and receipt."""
    with opened(database) as store, handled():
        found = WorkflowService(store).show(ident)
    admission = found["admission"]
    rows = _rows_view(found["rows"])
    view = {"plan_id": admission.plan_id, "plan_digest": admission.plan_digest, "run_id": admission.run_id,
            "package": admission.package_name, "workflow_id": admission.workflow_id,
            "admitted_at": iso(admission.admitted_at), **rows}

    def text() -> None:
        typer.echo(f"run {admission.run_id} of {admission.package_name}/{admission.workflow_id} "
                   f"(plan {admission.plan_id}, admitted {iso(admission.admitted_at)})")
        for step in rows["workflow_step_runs"]:
            needs = ", ".join(parse_json(step["needs"])) or "-"
            typer.echo(f"  {step['step_key']:<20} {step['status']:<8} task {step['task_id']:<20} needs {needs}")

    emit(json, view, text)
