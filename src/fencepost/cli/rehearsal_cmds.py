"""``fencepost rehearsal ...``: each step of a delivery rehearsal on its own."""

from __future__ import annotations

from typing import Annotated

import typer

from fencepost.cli import render
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.outbox.registry import read_census
from fencepost.rehearsal import views
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.url import DEFAULT_URL

app = typer.Typer(help="Each step of a delivery rehearsal on its own (create, list, attempt, status, compare, gate, "
                       "reconcile, abort).", no_args_is_help=True)

RunArg = Annotated[str, typer.Argument(help="Rehearsal (Run) id, as printed by `fencepost rehearsal create`.")]
AttemptArg = Annotated[str, typer.Argument(help="Attempt id, as printed by `fencepost rehearsal attempt`.")]


@app.command()
def create(package_dir: Annotated[str, typer.Argument(help="Plugin package directory.")],
           database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Validate a package and freeze it as a READY rehearsal (Run)."""
    with opened(database) as store, handled():
        view = views.run_view(RehearsalService(store).create_run(package_dir))
    emit(json, view, lambda: render.run(view))


@app.command("list")
def list_(database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """List rehearsals, newest first."""
    with opened(database) as store, handled():
        items = [views.run_view(r) for r in RehearsalService(store).list_runs()]

    def text() -> None:
        for item in items:
            render.run(item)
        if not items:
            render.console.print("no rehearsals yet: `fencepost rehearsal create PACKAGE_DIR`")

    emit(json, items, text)


@app.command()
def attempt(run_id: RunArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Enqueue an Attempt and return at once (a worker runs it)."""
    with opened(database) as store, handled():
        view = views.attempt_view(RehearsalService(store).enqueue_attempt(run_id))
    emit(json, view, lambda: render.attempt(view))


@app.command()
def status(run_id: RunArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
           evidence: Annotated[bool, typer.Option(help="Include each Receipt's evidence.")] = False) -> None:
    """Show a rehearsal with every Attempt, its outbox lease and its Receipts.

    By the control store's clock: a lease whose deadline has passed is shown EXPIRED (its owner stopped
    renewing it), a PENDING Attempt shows how long it has waited, and an Attempt waiting for a worker says so
    when no live worker serves its kind (`fencepost workers`).
    """
    with opened(database) as store, handled():
        service = RehearsalService(store)
        run = views.run_view(service.get_run(run_id))
        found = service.attempts(run_id)
        census = read_census(store)  # the registry and the store clock that judges leases, as the API does
        attempts = [views.attempt_view(a, service.receipts(a.id), evidence=evidence, census=census) for a in found]
    data = {"rehearsal": run, "attempts": attempts}

    def text() -> None:
        render.run(run)
        for item in attempts:
            render.attempt(item)

    emit(json, data, text)


@app.command()
def compare(run_id: RunArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Compare the two latest successful Attempts by semantic fingerprint."""
    with opened(database) as store, handled():
        view = views.comparison_view(RehearsalService(store).compare(run_id))
    emit(json, view, lambda: render.comparison(view))


@app.command()
def gate(run_id: RunArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Evaluate the release gate; exit 1 when it is blocked."""
    with opened(database) as store, handled():
        view = views.gate_view(RehearsalService(store).gate(run_id))
    emit(json, view, lambda: render.gate(view))
    if not view["passed"]:
        raise typer.Exit(1)


@app.command()
def reconcile(attempt_id: AttemptArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Return an Attempt whose lease EXPIRED to PENDING (an active lease is refused with its expiry)."""
    with opened(database) as store, handled():
        view = views.attempt_view(RehearsalService(store).reconcile(attempt_id))
    emit(json, view, lambda: render.attempt(view))


@app.command()
def abort(attempt_id: AttemptArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
          reason: Annotated[str, typer.Option(help="Why (kept with the Attempt).")] = "aborted by operator") -> None:
    """Abort a PENDING or RUNNING Attempt; fences the worker running it."""
    with opened(database) as store, handled():
        view = views.attempt_view(RehearsalService(store).abort(attempt_id, reason))
    emit(json, view, lambda: render.attempt(view))
