"""Human-readable output of rehearsal views (rich)."""

from __future__ import annotations

import os
import sys
import unicodedata
from typing import Any

from rich.console import Console
from rich.table import Table

#: The width of output that is not a terminal (a pipe, ``watch``, a CI log) when COLUMNS does not say: wide
#: enough that a table's rows stay one line each. Rich would take 80 and wrap every cell (a new user's trial).
PIPED_WIDTH = 240


def _width() -> int | None:
    """None (rich asks the terminal, or reads COLUMNS) unless stdout is not a terminal and COLUMNS is unset."""
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return None
    return PIPED_WIDTH


console = Console(highlight=False, soft_wrap=True, width=_width())

_STYLE = {"SUCCEEDED": "green", "DELIVERED": "green", "FAILED": "red", "ABORTED": "yellow", "RUNNING": "cyan",
          "PROCESSING": "cyan", "PENDING": "dim", "READY": "green", "RETIRED": "yellow", "INTERRUPTED": "yellow",
          # the action host's lower-case statuses (ADR 0015's convention)
          "succeeded": "green", "failed": "red", "reconciliation_required": "yellow", "running": "cyan",
          "pending": "dim"}


#: Unicode categories a terminal acts on instead of showing: controls (C0, DEL, C1: escape sequences, newlines)
#: and the line and paragraph separators; and, of the format characters, the bidirectional embeddings, overrides
#: and isolates that reorder what follows them. The other format characters (zero-width joiners in emoji and
#: Persian script, soft hyphens) are text and stay (a verification trial).
_UNSHOWN = frozenset({"Cc", "Zl", "Zp"})
_REORDERING = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape (``\\n``, ``\\x1b``,
    ``\\u202e``): stored text from operators, providers and API callers cannot recolour the screen or forge a
    line of the output (a break-it trial printed a fake "resolved succeeded" line through a note)."""
    if text.isprintable():
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii")
                   if ch in _REORDERING or unicodedata.category(ch) in _UNSHOWN else ch for ch in text)


def line(text: str, *, markup: bool = True) -> None:
    """Print one line that carries stored text, ``printable`` first (the stored text is shown, never acted on)."""
    console.print(printable(text), markup=markup)


def styled(status: str) -> str:
    style = _STYLE.get(status)
    return f"[{style}]{status}[/{style}]" if style else status


def when(iso: str | None) -> str:
    """``2026-01-01T12:00:05.123456Z`` as ``2026-01-01 12:00:05 UTC`` (the store's time, never this machine's)."""
    return iso[:19].replace("T", " ") + " UTC" if iso else "-"


def age(seconds: float) -> str:
    """A duration for people: ``4.2 s``, ``3 min 05 s``, ``2 h 07 min``, ``3 d 04 h``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600:02d} h"


def run(view: dict[str, Any]) -> None:
    pkg = view["package"]
    previous = f" (upgrades from {pkg['previous_version']})" if pkg.get("previous_version") else ""
    console.print(f"rehearsal [bold]{view['id']}[/bold]: {pkg['name']} {pkg['version']}{previous}  "
                  f"{styled(view['status'])}")
    console.print(f"  content digest {view['content_digest']}, {len(view['migrations'])} migration(s)")


def attempt(view: dict[str, Any]) -> None:
    out = view["outbox"]
    console.print(f"attempt #{view['seq']} [bold]{view['id']}[/bold]: {styled(view.get('state', view['status']))}  "
                  f"outbox {styled(out['status'])}, delivery count {out['delivery_count']}")
    if view.get("state") == "INTERRUPTED":
        console.print("  interrupted, will be replayed: nothing runs it now (its lease was released or reconciled); "
                      "the next delivery replays all six scenarios from the first")
    if out["lease_owner"] and out.get("lease_expired"):
        # Not a live owner: it stopped renewing (ADR 0019 views carry ``lease_expired`` by the store's clock).
        console.print(f"  lease [red]EXPIRED[/red] at {out['lease_until']}: owner {out['lease_owner']} stopped "
                      f"renewing it (last heartbeat {out['last_heartbeat_at']}); a live worker takes it over, or "
                      f"`fencepost rehearsal reconcile {view['id']}` returns it to PENDING")
    elif out["lease_owner"]:
        console.print(f"  lease owner {out['lease_owner']}, last heartbeat {out['last_heartbeat_at']}, "
                      f"lease until {out['lease_until']}")
    if out.get("pending_seconds") is not None:
        console.print(f"  pending for {age(out['pending_seconds'])}")
    if out.get("no_live_worker"):
        console.print(f"  [yellow]no live worker serves this kind[/yellow] ({out['kind']}): nothing will run it "
                      "until one starts (`fencepost worker`; `fencepost workers` lists them)")
    if view.get("error"):
        console.print(f"  error: {view['error']}")
    if "receipts" in view:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("#", "scenario", "status", "delivery", "integrity", "evidence fingerprint"):
            table.add_column(col)
        for r in view["receipts"]:
            integrity = r["integrity"]["status"]
            mark = "[red]TAMPERED[/red]" if integrity == "tampered" else integrity
            table.add_row(str(r["position"]), r["scenario"], styled(r.get("state", r["status"])),
                          str(r["delivery"] or "-"), mark,
                          (r["evidence_fingerprint"] or "-")[:23])
        console.print(table)
        for r in view["receipts"]:
            if r.get("not_applicable_reason"):
                console.print(f"  {r['scenario']}: not applicable: {r['not_applicable_reason']}")
            elif r.get("partial"):
                console.print(f"  {r['scenario']}: {r['partial']}")


def comparison(view: dict[str, Any]) -> None:
    if not view["comparable"]:
        console.print(f"comparison: {view['reason']}")
        return
    verdict = "[green]match[/green]" if view["equal"] else "[red]differ[/red]"
    base, cand = view["baseline"], view["candidate"]
    console.print(f"comparison of attempt #{base['seq']} and #{cand['seq']}: semantics {verdict}")
    console.print(f"  semantic  #{base['seq']} {base['semantic_fingerprint']}")
    console.print(f"  semantic  #{cand['seq']} {cand['semantic_fingerprint']}")
    for b, c in zip(base["raw"], cand["raw"], strict=False):
        console.print(f"  raw {b['position']} {b['scenario']:<22} {(b['evidence_fingerprint'] or '-')[:23]}  "
                      f"{(c['evidence_fingerprint'] or '-')[:23]}")
    for path in view["differing_paths"]:
        console.print(f"  [red]differs[/red] at {path}")


def gate(view: dict[str, Any]) -> None:
    verdict = "[green]PASS[/green]" if view["passed"] else "[red]BLOCKED[/red]"
    console.print(f"release gate for {view['run_id']}: {verdict}")
    uncompared = view.get("latest_attempt_id") and not view.get("semantics_compared", True)
    for check in view["checks"]:
        mark = "[green]pass[/green]" if check["passed"] else "[red]FAIL[/red]"
        if check["passed"] and check["name"] == "semantic_match" and uncompared:
            mark = "[yellow]open[/yellow]"  # nothing contradicts it, but nothing was compared (a new-user trial)
        console.print(f"  {mark}  {check['name']:<26} {check['reason']}")
    scenarios = view.get("scenarios")
    if scenarios is not None and view.get("latest_attempt_id"):
        console.print(f"  scenarios exercised: {scenarios['count']} of {scenarios['of']}")
        for other in scenarios["not_exercised"]:
            console.print(f"    not exercised: {other['scenario']} ({other['reason']})")
    # Only a passing gate can rest on a single success; a blocked one says why in its checks (a gate with no
    # successful Attempt at all must not claim "only one").
    if view["passed"] and view.get("latest_attempt_id") and not view.get("semantics_compared", True):
        console.print("  [yellow]semantics were not compared[/yellow]: only one successful Attempt; "
                      "`package publish` needs a compared pair (or --allow-single-attempt)")
