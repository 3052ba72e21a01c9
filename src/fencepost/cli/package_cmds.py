"""``fencepost package ...``: publish, withdraw, install, disable/enable, quarantine, show."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fencepost.catalog.lifecycle import CatalogService, PackageState
from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.rehearsal.service import release_gate
from fencepost.rehearsal.views import iso
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


@app.command()
def install(name: NameArg, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False,
            version: Annotated[str | None, typer.Option(help="Install this version instead of the head.")] = None
            ) -> None:
    """Install (activate) the head publication, or a given version, of a package."""
    with opened(database) as store, handled():
        inst = CatalogService(store, release_gate=release_gate).install(name, version)
    emit(json, installation_view(inst), lambda: typer.echo(
        f"installed {name}: installation {inst.id} at {inst.publication_id} (lock {inst.lock_digest[:23]}...)"))


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
