"""``fencepost check-store events|tenant-isolation``: run the store conformance checks (host-spec U, V; ADR 0040).

Both write probes into the store (probe spaces ``event-append-probe-<uuid>`` of the probe tenant), so the
warning to pause outbox relays for that tenant is printed before the first probe write (U25): on stdout, or
on stderr with ``--json`` so that stdout stays one JSON document. Exit 0 when no check failed (skips do not
fail, and their count is printed), 1 when one did.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from fencepost.cli.common import DatabaseOpt, JsonOpt, emit, handled, opened
from fencepost.events.conformance import RELAY_WARNING, EventAppendSubject, SuiteResult, run_event_append_checks
from fencepost.events.fencepost_subject import FencepostAdapterRows, FencepostEventStore
from fencepost.events.isolation import TenantIsolationSubject, run_tenant_isolation_checks
from fencepost.store.url import DEFAULT_URL

app = typer.Typer(
    help="Check that a store keeps the event log's first-write-wins rule and its outbox (events) or the adapter "
         "rows' tenant scope (tenant-isolation). Run against a test or staging store with a dedicated probe "
         "tenant, and pause outbox relays for that tenant first: the checks write, claim and dead-letter probe "
         "rows. Exit 1 on any failed check.",
    no_args_is_help=True, add_completion=False)

TenantOpt = Annotated[str, typer.Option(
    "--tenant", "-t", help="The dedicated probe tenant the checks write in (pause its outbox relays).")]


#: The tenant-isolation checks' own warning: they write invocations and adapter rows, not outbox rows.
ISOLATION_WARNING = ("these checks write probe invocations and adapter rows in the probe tenant and leave them "
                     "failed; run them against a test or staging store with a dedicated probe tenant")


def _warn(as_json: bool, warning: str = RELAY_WARNING) -> None:
    line = f"WARNING: {warning}"
    if as_json:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    else:
        typer.echo(line)


def _report(result: SuiteResult, as_json: bool, suite: str) -> None:
    def text() -> None:
        for check in result.checks:
            typer.echo(f"{check.status.upper():8} {check.id}" + (f": {check.error}" if check.error else ""))
            if check.status == "skipped":
                typer.echo(f"         {check.evidence}")
        verdict = "passed" if result.passed else "FAILED"
        typer.echo(f"{suite}: {verdict}: {len(result.checks) - result.failed - result.skipped} passed, "
                   f"{result.failed} failed, {result.skipped} skipped")

    data: dict[str, Any] = result.as_dict()
    data["suite"] = suite
    data["skipped"] = result.skipped
    emit(as_json, data, text)
    if not result.passed:
        raise typer.Exit(1)


@app.command()
def events(tenant: TenantOpt, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """The six event-append checks (plain-append, outbox-append, outbox-after-plain, tx-append,
    tx-outbox-append, tx-outbox-after-plain) against the store at --database, in probe spaces of --tenant.
    Successful outbox checks leave their probe row published although nothing was sent; every other probe row
    left pending is dead-lettered ("event append probe; never published")."""
    with opened(database) as store:
        _warn(json)
        with handled():
            result = run_event_append_checks(EventAppendSubject(FencepostEventStore(store), tenant))
    _report(result, json, "events")


@app.command("tenant-isolation")
def tenant_isolation(tenant: TenantOpt, database: DatabaseOpt = DEFAULT_URL, json: JsonOpt = False) -> None:
    """The adapter-row tenant isolation checks (adapter-read-scope, adapter-write-scope): reads and writes
    naming another tenant, space or invocation must find and change nothing. Probe invocations are left
    failed ("tenant isolation probe; never executed") with their verdict events, so audit stays sound."""
    with opened(database) as store:
        _warn(json, ISOLATION_WARNING)
        with handled():
            rows = FencepostAdapterRows(store)
            try:
                result = run_tenant_isolation_checks(TenantIsolationSubject(rows, tenant))
            finally:
                rows.retire()
    _report(result, json, "tenant-isolation")
