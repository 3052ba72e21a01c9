"""``fencepost package ...``: publish, withdraw, install (and deliver to targets, ADR 0055), deliveries,
disable/enable, quarantine, show."""

from __future__ import annotations

import contextlib
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from fencepost.catalog.lifecycle import CatalogService, PackageState
from fencepost.cli import render
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import SUBMIT_CONCURRENCY, DeliveryService, Progress, Submitted
from fencepost.delivery.targets import parse_labels
from fencepost.host import InvocationView, kind_of
from fencepost.rehearsal.service import release_gate
from fencepost.rehearsal.views import iso
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.url import DEFAULT_URL
from fencepost.store.workflow_records import InstallationRecord, PublicationRecord

app = typer.Typer(help="Publish package versions and manage their installation (lifecycle, quarantine).",
                  no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="Package name (from its manifest).")]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why (kept with the record).")]


def publication_view(p: PublicationRecord) -> dict[str, Any]:
    return {"id": p.id, "package": p.package_name, "version": p.version, "content_digest": p.content_digest,
            "definition_digest": p.definition_digest, "status": p.status, "gate": p.gate, "gate_run_id": p.gate_run_id,
            "previous_publication_id": p.previous_publication_id, "published_at": iso(p.published_at),
            "withdrawn_at": iso(p.withdrawn_at), "workflows": sorted(p.definition.get("workflows", {})),
            "tasks": sorted(p.definition.get("tasks", {}))}


def installation_view(i: InstallationRecord) -> dict[str, Any]:
    return {"id": i.id, "package": i.package_name, "publication_id": i.publication_id, "lock": i.lock_digest,
            "status": i.status, "generation": i.generation, "installed_at": iso(i.installed_at),
            "updated_at": iso(i.updated_at)}


def state_view(s: PackageState) -> dict[str, Any]:
    return {"head": {"publication_id": s.head.publication_id, "revision": s.head.revision} if s.head else None,
            "publications": [publication_view(p) for p in s.publications],
            "installation": installation_view(s.installation) if s.installation else None,
            "disposition": s.disposition.disposition if s.disposition else "active",
            "quarantine": {"reason": s.quarantine.reason, "since": iso(s.quarantine.quarantined_at)}
            if s.quarantine else None}


@app.command()
def publish(package_dir: Annotated[str, typer.Argument(help="Package directory.")],
            database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
            allow_ungated: Annotated[bool, typer.Option(help="Publish even without a passing rehearsal gate "
                                                             "(recorded as waived).")] = False,
            allow_single_attempt: Annotated[bool, typer.Option(
                help="Publish on a passing gate whose semantics were not compared (a single successful Attempt; "
                     "recorded as waived).")] = False,
            expect_revision: Annotated[int | None, typer.Option(help="Compare-and-set: the head revision you "
                                                                     "expect (0 = no head yet).")] = None) -> None:
    """Publish a package version (immutable) and move the package head to it.

    Refused unless the newest rehearsal of exactly this content passes its release gate with its semantics
    compared (two successful Attempts)."""
    with opened(database) as store, handled():
        result = CatalogService(store, release_gate=release_gate).publish(
            package_dir, allow_ungated=allow_ungated, allow_single_attempt=allow_single_attempt,
            expected_revision=expect_revision)
    view = {"outcome": result.outcome, "publication": publication_view(result.publication)}
    emit(json, view, lambda: typer.echo(
        f"{result.outcome}: {result.publication.package_name} {result.publication.version} as "
        f"{result.publication.id} (gate {result.publication.gate})"))


@app.command()
def withdraw(name: NameArg, version: Annotated[str, typer.Argument(help="Version to withdraw.")],
             database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Withdraw a publication: new workflow admissions against it are refused (replays still answer)."""
    with opened(database) as store, handled():
        pub = CatalogService(store, release_gate=release_gate).withdraw(name, version)
    emit(json, publication_view(pub), lambda: typer.echo(f"withdrawn: {name} {version}"))


TargetOpt = Annotated[list[str] | None, typer.Option(
    "--target", metavar="NAME", help="Deliver the installation to this target (repeatable: to each of them).")]
TargetsOpt = Annotated[list[str] | None, typer.Option(
    "--targets", metavar="KEY=VALUE", help="Deliver to every live target carrying this label (repeatable: all).")]


@app.command()
def install(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
            version: Annotated[str | None, typer.Option(help="Install this version instead of the head.")] = None,
            target: TargetOpt = None, targets: TargetsOpt = None,
            wait: Annotated[bool, typer.Option("--wait", help="Wait for every delivery's verdict (a line per "
                                                              "target and an overall progress bar).")] = False,
            wait_timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 600.0,
            concurrency: Annotated[int, typer.Option(min=1, max=64, help="Deliveries submitted at once (a fleet's "
                                                                         "submission).")] = SUBMIT_CONCURRENCY,
            redeliver: Annotated[bool, typer.Option("--redeliver", help="Deliver again to targets whose newest "
                                                                        "delivery of this version failed (after "
                                                                        "fixing them), or was resolved by an "
                                                                        "operator (to run the steps after the "
                                                                        "resolved one).")] = False) -> None:
    """Install (activate) the head publication, or a given version, of a package.

    With --target NAME (repeatable) or --targets key=value (a fleet by label) the installation is also
    delivered: one fencepost.deliver invocation per target, run by `fencepost worker`; the same command again
    returns the existing invocations; --redeliver starts a new one where the newest failed or was resolved by an
    operator. Exit 0: installed and submitted (with --wait: every delivery succeeded); 1: with --wait, a delivery
    failed, needs reconciliation or had no verdict in time; 2: bad input, no such target; 6: a guard refuses
    (quarantine, disposition, no rehearsal evidence)."""
    with opened(database) as store, handled():
        delivering = bool(target) or bool(targets)
        service = DeliveryService(store)
        selector = parse_labels(targets) if targets else None
        if delivering:  # a typo in a target or label is refused before the installation moves
            service.choose_targets(target=target or None, selector=selector)
        inst = CatalogService(store, release_gate=release_gate).install(name, version)
        if not delivering:
            emit(json, installation_view(inst), lambda: typer.echo(
                f"installed {name}: installation {inst.id} at {inst.publication_id} (lock {inst.lock_digest[:23]}...)"))
            return
        submitted = _submit(service, name, target=target or None, selector=selector, redeliver=redeliver,
                            concurrency=concurrency, quiet=json)
        ids = [(t.name, v.id) for t, v in submitted.deliveries]
        if not json:
            fresh = len(ids) - submitted.existing
            already = (f", {submitted.existing} existing (submitted before; nothing runs twice)"
                       if submitted.existing else "")
            typer.echo(f"installed {name} {submitted.lock.publication.version}: {fresh} deliver"
                       f"{'y' if fresh == 1 else 'ies'} submitted{already}")
        if wait and not json and not any(v.status.terminal for _, v in submitted.deliveries):
            warn_without_worker(store, submitted)
        views = wait_for(service, ids, wait_timeout, quiet=json) if wait else [v for _, v in submitted.deliveries]
    data = {"installation": installation_view(inst), "deliveries": [
        {"target": t, "invocation_id": v.id, "status": str(v.status), "error": v.error}
        for (t, _), v in zip(ids, views, strict=True)]}

    def text() -> None:
        if not wait:
            for (t, _), v in zip(ids, views, strict=True):
                typer.echo(f"  {t:<24} {v.id}  {v.status} (a `fencepost worker` runs it)")

    emit(json, data, text)
    failed = [t for (t, _), v in zip(ids, views, strict=True) if v.status is InvocationStatus.FAILED]
    if failed and not json:  # the same command returns the failed delivery again: say how to run it anew
        typer.echo(f"fencepost: a failed delivery is not run again by the same command: fix the target "
                   f"({', '.join(failed)}), then install again with --redeliver", err=True)
    if wait and any(v.status is not InvocationStatus.SUCCEEDED for v in views):
        raise typer.Exit(1)


def warn_without_worker(store: Store, submitted: Submitted) -> None:
    """Say at once, rather than after ``--wait-timeout``, that no live ``fencepost worker`` in the registry
    serves the delivery action (ADR 0019): the deliveries stay ``pending`` until one is started."""
    kinds = {kind_of(v.action_id, v.action_version) for _, v in submitted.deliveries}
    workers, now = store.read(lambda tx: (tx.workers.list_workers(), tx.now()))
    if not any(w.is_live(now) and any(w.serves(k) for k in kinds) for w in workers):
        render.console.print("  no live `fencepost worker` serves deliveries on this control database yet: they "
                             "stay pending until one has registered (a `fencepost worker` with the same --database "
                             "registers within a second of starting)")


def _submit(service: DeliveryService, name: str, *, target: list[str] | None, selector: dict[str, str] | None,
            redeliver: bool, concurrency: int, quiet: bool) -> Submitted:
    """``DeliveryService.submit`` with a ``submitting`` bar on a terminal (``concurrency`` in flight at once)."""
    if quiet or not render.console.is_terminal:
        return service.submit(name, target=target, selector=selector, redeliver=redeliver, concurrency=concurrency)
    with RichProgress(TextColumn("submitting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=render.console, transient=True) as bar:
        task = bar.add_task("submitting", total=None)

        def seen(_target: TargetRecord, _view: InvocationView) -> None:
            bar.advance(task)

        return service.submit(name, target=target, selector=selector, redeliver=redeliver, concurrency=concurrency,
                              on_submitted=seen)


def _bars(console: Console) -> RichProgress:
    """The live display of ``--wait`` on a terminal: the overall bar first, then one bar per delivery in flight."""
    return RichProgress(TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=console, transient=True)


def _detail(progress: Progress) -> str:
    if progress.step is None:
        return str(progress.status)
    busy = f", attempt {progress.attempts} (target busy, retried)" if progress.attempts > 1 else ""
    return f"{progress.step}{busy}"


def _summary(views: dict[str, InvocationView], total: int) -> str:
    counts: dict[str, int] = {}
    for view in views.values():
        counts[str(view.status)] = counts.get(str(view.status), 0) + 1
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"{len(views)}/{total} settled" + (f": {shown}" if shown else "")


def wait_for(service: DeliveryService, ids: list[tuple[str, str]], timeout: float, *, quiet: bool,
             console: Console | None = None, interval: float = 0.25,
             line_every: float = 5.0) -> list[InvocationView]:
    """Poll the deliveries ``ids`` (target, invocation id) until each has a verdict or ``timeout`` seconds pass.

    Every poll is one control-store read (``DeliveryService.progress``). Unless ``quiet``, a line is printed
    per target as it settles; on a terminal, a live overall bar (settled of all, with the counts running and
    pending) and a bar per delivery in flight (steps done of its steps, the step now running and, for a busy
    target, its attempt) are drawn above those lines. Elsewhere (a pipe, a log file, CI) the output stays
    line-based: the settled lines, plus an overall ``progress: ...`` line at most every ``line_every`` seconds
    while something changed, and a closing summary.

    Args:
        console: where to write (default the CLI's console). interval: seconds between polls.
    Returns:
        the deliveries' views, in the order of ``ids`` (unsettled ones as last read).
    """
    out = console or render.console
    deadline = time.monotonic() + timeout
    by_id = dict((i, t) for t, i in ids)
    views: dict[str, InvocationView] = {}
    live = not quiet and out.is_terminal
    bars = _bars(out)
    overall = bars.add_task("all targets", total=len(ids), detail="")
    rows: dict[str, TaskID] = {}
    last_line, last_text = time.monotonic(), ""
    with bars if live else contextlib.nullcontext():
        while True:
            now = service.progress([i for i in by_id if i not in views])
            for invocation_id, state in now.items():
                target = by_id[invocation_id]
                if state.status.terminal:
                    views[invocation_id] = view = service.host.get(invocation_id)
                    if invocation_id in rows:
                        bars.remove_task(rows.pop(invocation_id))
                    if not quiet:
                        (bars.console if live else out).print(delivery_line(target, view), soft_wrap=True)
                elif state.status is not InvocationStatus.PENDING and live:
                    if invocation_id not in rows:
                        rows[invocation_id] = bars.add_task(target, total=state.steps_total, detail="")
                    bars.update(rows[invocation_id], completed=state.steps_done, detail=_detail(state))
            running = sum(1 for s in now.values() if not s.status.terminal and s.status is not InvocationStatus.PENDING)
            pending = sum(1 for s in now.values() if s.status is InvocationStatus.PENDING)
            text = f"{_summary(views, len(ids))}; {running} running, {pending} pending"
            bars.update(overall, completed=len(views), detail=f"{running} running, {pending} pending")
            if not quiet and not live and text != last_text and time.monotonic() - last_line >= line_every:
                out.print(f"progress: {text}", soft_wrap=True)
                last_line, last_text = time.monotonic(), text
            if len(views) == len(ids) or time.monotonic() > deadline:
                break
            time.sleep(interval)
    if not quiet:
        for target, invocation_id in ids:
            if invocation_id not in views:
                views[invocation_id] = service.host.get(invocation_id)
                out.print(f"  {target:<24} {views[invocation_id].status}: no verdict within {timeout:g} s "
                          "(is a `fencepost worker` running?)", soft_wrap=True)
        out.print(f"deliveries: {_summary({i: v for i, v in views.items() if v.status.terminal}, len(ids))}")
    return [views[i] if i in views else service.host.get(i) for _, i in ids]


def delivery_line(target: str, view: InvocationView) -> str:
    """``  tenant-a  succeeded  matches rehearsal`` (or the error)."""
    detail = view.error or ""
    result = view.result if isinstance(view.result, dict) else {}
    verify = (result.get("steps") or {}).get("verify") if result else None
    if view.status is InvocationStatus.SUCCEEDED and isinstance(verify, dict):
        applied = sum(1 for k, v in (result.get("steps") or {}).items()
                      if k.startswith("migrate-") and isinstance(v, dict) and v.get("applied"))
        detail = f"{applied} migration(s) applied; {verify.get('comparison')}"
    return f"  {target:<24} {view.status}  {escape(' '.join(detail.splitlines()))}"  # one line per target


@app.command()
def deliveries(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Per target: the newest delivery of a package, its version and verdict, its steps with the target's ledger
    rows, the evidence compared with the rehearsal, and the reconciliation queue entry when it needs one."""
    with opened(database) as store, handled():
        view = DeliveryService(store).deliveries(name)

    def text() -> None:
        if not view:
            typer.echo(f"{name}: no delivery")
        for d in view:
            gone = " (target removed)" if d["target_removed"] else ""
            typer.echo(f"{d['target']}{gone}: {name} {d['version']}  {d['status']}  {d['invocation_id']}")
            if d["error"]:
                typer.echo(f"  error: {d['error']}")
            for step in d["steps"]:
                ledger = step["ledger"]
                row = (f"  ledger {ledger['migration']} {ledger['state']} {ledger['checksum'][:19]}... "
                       f"{ledger['applied_at']} by {ledger['adapter_invocation_id']}") if ledger else ""
                what = f" {step['migration']}" if step["migration"] else ""
                applied = "" if step["applied"] is None else (" applied" if step["applied"] else " already there")
                typer.echo(f"  {step['step']:<12}{what} {step['status']}{applied}{row}")
            if d["evidence"]:
                typer.echo(f"  evidence: {d['evidence']['comparison']} ({d['evidence']['scenario']}, "
                           f"from {d['evidence']['start_state']})")
            if d["reconciliation"]:
                typer.echo(f"  reconciliation: {d['reconciliation']['kind']}: {d['reconciliation']['reason']}")

    emit(json, view, text)


@app.command()
def disable(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
            reason: ReasonOpt = "disabled by operator") -> None:
    """Disable an installation (lifecycle disposition): new admissions are refused."""
    with opened(database) as store, handled():
        record = CatalogService(store, release_gate=release_gate).set_disposition(name, "disabled", reason)
    emit(json, {"disposition": record.disposition}, lambda: typer.echo(f"{name}: disabled"))


@app.command()
def enable(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Enable an installation again. Never clears a quarantine."""
    with opened(database) as store, handled():
        record = CatalogService(store, release_gate=release_gate).set_disposition(name, "active", None)
    emit(json, {"disposition": record.disposition}, lambda: typer.echo(f"{name}: enabled"))


@app.command()
def quarantine(name: NameArg, reason: Annotated[str, typer.Option("--reason", help="Why (required).")],
               database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Quarantine the exact current installation and lock of a package."""
    with opened(database) as store, handled():
        record = CatalogService(store, release_gate=release_gate).quarantine(name, reason)
    emit(json, {"installation_id": record.installation_id, "lock": record.lock_digest, "reason": record.reason},
         lambda: typer.echo(f"{name}: quarantined ({record.reason})"))


@app.command("release-quarantine")
def release_quarantine(name: NameArg, reason: Annotated[str, typer.Option("--reason", help="Why (required).")],
                       database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Release the quarantine of the current installation and lock (an explicit, recorded decision)."""
    with opened(database) as store, handled():
        CatalogService(store, release_gate=release_gate).release_quarantine(name, reason)
    emit(json, {"released": True}, lambda: typer.echo(f"{name}: quarantine released"))


@app.command()
def show(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """Show a package's head, publications, installation, disposition and quarantine."""
    with opened(database) as store, handled():
        view = state_view(CatalogService(store, release_gate=release_gate).state(name))

    def text() -> None:
        head = view["head"]
        typer.echo(f"{name}: head {head['publication_id'] if head else 'none'} "
                   f"(revision {head['revision'] if head else 0})")
        for p in view["publications"]:
            typer.echo(f"  {p['version']:<12} {p['id']}  {p['status']:<9} gate {p['gate']}  "
                       f"workflows: {', '.join(p['workflows']) or '-'}")
        inst = view["installation"]
        if inst:
            typer.echo(f"  installation {inst['id']} -> {inst['publication_id']} ({view['disposition']})")
        if view["quarantine"]:
            typer.echo(f"  QUARANTINED since {view['quarantine']['since']}: {view['quarantine']['reason']}")

    emit(json, view, text)
