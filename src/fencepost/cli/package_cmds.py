"""``fencepost package ...``: publish, withdraw, install (and deliver to targets, ADR 0055), deliveries,
disable/enable, quarantine, show."""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fencepost.catalog.lifecycle import CatalogService, PackageState
from fencepost.cli import render
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.service import DeliveryService, Submitted
from fencepost.delivery.targets import parse_labels
from fencepost.host import InvocationView, kind_of
from fencepost.rehearsal.service import release_gate
from fencepost.rehearsal.views import iso
from fencepost.store.base import Store
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


TargetOpt = Annotated[str | None, typer.Option("--target", help="Deliver the installation to this target.")]
TargetsOpt = Annotated[list[str] | None, typer.Option(
    "--targets", metavar="KEY=VALUE", help="Deliver to every live target carrying this label (repeatable: all).")]


@app.command()
def install(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
            version: Annotated[str | None, typer.Option(help="Install this version instead of the head.")] = None,
            target: TargetOpt = None, targets: TargetsOpt = None,
            wait: Annotated[bool, typer.Option("--wait", help="Wait for every delivery's verdict (a line per "
                                                              "target and an overall progress bar).")] = False,
            wait_timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 600.0,
            redeliver: Annotated[bool, typer.Option("--redeliver", help="Deliver again to targets whose newest "
                                                                        "delivery of this version failed (after "
                                                                        "fixing them).")] = False) -> None:
    """Install (activate) the head publication, or a given version, of a package.

    With --target NAME (or --targets key=value for a fleet) the installation is also delivered: one
    fencepost.deliver invocation per target, run by `fencepost worker`; the same command again returns the
    existing invocations; --redeliver starts a new one where the newest failed. Exit 0: installed and
    submitted (with --wait: every delivery succeeded); 1: with --wait, a delivery failed, needs reconciliation
    or had no verdict in time; 2: bad input, no such target; 6: a guard refuses (quarantine, disposition, no
    rehearsal evidence)."""
    with opened(database) as store, handled():
        delivering = target is not None or bool(targets)
        service = DeliveryService(store)
        selector = parse_labels(targets) if targets else None
        if delivering:  # a typo in a target or label is refused before the installation moves
            service.choose_targets(target=target, selector=selector)
        inst = CatalogService(store, release_gate=release_gate).install(name, version)
        if not delivering:
            emit(json, installation_view(inst), lambda: typer.echo(
                f"installed {name}: installation {inst.id} at {inst.publication_id} (lock {inst.lock_digest[:23]}...)"))
            return
        submitted = service.submit(name, target=target, selector=selector, redeliver=redeliver)
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
    if wait and any(v.status is not InvocationStatus.SUCCEEDED for v in views):
        raise typer.Exit(1)


def warn_without_worker(store: Store, submitted: Submitted) -> None:
    """Say at once, rather than after ``--wait-timeout``, that no live ``fencepost worker`` in the registry
    serves the delivery action (ADR 0019): the deliveries stay ``pending`` until one is started."""
    kinds = {kind_of(v.action_id, v.action_version) for _, v in submitted.deliveries}
    workers, now = store.read(lambda tx: (tx.workers.list_workers(), tx.now()))
    if not any(w.is_live(now) and any(w.serves(k) for k in kinds) for w in workers):
        render.console.print("  no live `fencepost worker` serves deliveries on this control database: they stay "
                             "pending until one is started (`fencepost worker`, with the same --database)")


def wait_for(service: DeliveryService, ids: list[tuple[str, str]], timeout: float, *,
             quiet: bool) -> list[InvocationView]:
    """Poll the deliveries ``ids`` (target, invocation id) until each has a verdict or ``timeout`` seconds pass;
    print a line per target as it settles and an overall progress bar (unless ``quiet``)."""
    deadline = time.monotonic() + timeout
    views = {i: service.host.get(i) for _, i in ids}
    shown: set[str] = set()
    with Progress(TextColumn("delivering"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=render.console, disable=quiet, transient=True) as progress:
        overall = progress.add_task("all", total=len(ids))
        while True:
            for target, invocation_id in ids:
                view = views[invocation_id] = service.host.get(invocation_id)
                if view.status.terminal and invocation_id not in shown:
                    shown.add(invocation_id)
                    progress.advance(overall)
                    if not quiet:
                        progress.console.print(delivery_line(target, view))
            if len(shown) == len(ids) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    if not quiet:
        for target, invocation_id in ids:
            if invocation_id not in shown:
                render.console.print(f"  {target:<24} {views[invocation_id].status}: no verdict within {timeout:g} s "
                                     "(is a `fencepost worker` running?)")
        counts = Counter(str(views[i].status) for _, i in ids)
        render.console.print(f"{len(ids)} target{'' if len(ids) == 1 else 's'}: "
                             + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return [views[i] for _, i in ids]


def delivery_line(target: str, view: InvocationView) -> str:
    """``  tenant-a  succeeded  matches rehearsal`` (or the error)."""
    detail = view.error or ""
    result = view.result if isinstance(view.result, dict) else {}
    verify = (result.get("steps") or {}).get("verify") if result else None
    if view.status is InvocationStatus.SUCCEEDED and isinstance(verify, dict):
        applied = sum(1 for k, v in (result.get("steps") or {}).items()
                      if k.startswith("migrate-") and isinstance(v, dict) and v.get("applied"))
        detail = f"{applied} migration(s) applied; {verify.get('comparison')}"
    return f"  {target:<24} {view.status}  {escape(detail)}"


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
