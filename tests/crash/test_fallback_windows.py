"""SIGKILL inside the verdict-first fallback (issue 13; host-spec K5-K8, K10; ADR 0031): between the verdict and
each evidence write, in a real process, then what the database holds and what recovery does with it.

The subject (``host_subject.py``, mode ``inline``) runs a non-idempotent charge whose provider charges, then
times out (an unknown outcome: the settlement is checkpoint ``ambiguous`` -> ``AdapterInvocationAmbiguous`` ->
reconciliation record -> ``reconciliation_required``). Its store is a ``FaultInjectingStore`` that fails the
first two ``finish_command`` (the fence of both atomic ``host.settle`` attempts), so the fallback runs: the
fenced verdict alone (``host.settle.verdict``), then one ``host.evidence`` unit per write: ``@1`` the checkpoint,
``@2`` the event, ``@3`` the record. ``FENCEPOST_CRASHPOINT`` kills it at one of those commits. Then:

- **before the verdict's COMMIT**: no verdict, no evidence, the command still leased, the row ``running``: the
  state of a crash mid-call (K10). A worker process takes it over after the lease expires and settles it
  ``reconciliation_required`` without calling the provider again (one request, one charge), audit clean;
- **after a COMMIT of the fallback**: the verdict is durable and marked ``settled_by: verdict-first-fallback``,
  the command finished with no lease left, exactly the evidence committed before the crash exists (the rest
  is missing), ``audit_store`` reports the gap for this invocation and nothing else, and a worker started after
  the dead caller's lease ran out claims nothing: the gap is final (K8).

What the audit can say about a gap (``audit_invocation_evidence_gaps``): a row still ``running`` under a verdict
is one finding (the audit cannot tell which event such a row lacks: an unknown outcome's ambiguity event or a
success marker's event, L2), so with the checkpoint missing the missing event and record are not reported on
their own; an ``ambiguous`` row without its event, and without its governance record, is one finding each.

Default run: the four windows on SQLite WAL/FULL and one on PostgreSQL; the rest of the PostgreSQL windows and
the SQLite DELETE/FULL ones are marked soak (docs/crash-testing.md).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from crash_flows import require_backend, window_matrix
from crash_harness import CrashDB, claim_count, crash_db
from host_flow import ledger_lines, run_subject

from fencepost.core.statuses import AdapterStatus, InvocationStatus
from fencepost.host.finalization import SETTLED_BY_FALLBACK
from fencepost.host.lifecycle import STEP_AMBIGUOUS, VERDICT_EVENTS
from fencepost.store.audit import audit_store
from helpers.processes import KILLED
from helpers.store_backends import BackendUnreachable

#: Both atomic attempts fail at their fence (the 1st and 2nd ``finish_command``): the fallback runs (K3).
FAULTS = {"finish_command": {1, 2}}
BEHAVIOUR = "timeout"   # the provider charges, then the reply is lost
VERDICT_EVENT = VERDICT_EVENTS[InvocationStatus.RECONCILIATION_REQUIRED]
#: The fallback's evidence, in its order of writing (``host.evidence@<n>``, K5).
EVIDENCE = ("checkpoint", "event", "record")
#: The ``audit_store`` finding each missing piece of evidence gives (the end of its detail), for an ambiguous row.
GAP_FINDINGS = {"event": f"is ambiguous without an {STEP_AMBIGUOUS} event",
                "record": "is ambiguous without a governance reconciliation record"}
RUNNING_GAP = "is still running under a reconciliation_required verdict"


@dataclass(frozen=True)
class FallbackWindow:
    """One crash point inside the fallback.

    Attributes:
        point: the ``FENCEPOST_CRASHPOINT`` value.
        verdict: whether the verdict is durable after the crash.
        written: the evidence durable after the crash (a prefix of ``EVIDENCE``).
    """

    point: str
    verdict: bool
    written: tuple[str, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(e for e in EVIDENCE if e not in self.written)

    @property
    def gap_findings(self) -> list[str]:
        """The ends of the findings ``audit_store`` must report for this window's gap, in its order."""
        if not self.verdict:
            return []
        if "checkpoint" in self.missing:
            return [RUNNING_GAP]
        return [GAP_FINDINGS[e] for e in self.missing]


WINDOWS = (
    FallbackWindow("host.settle.verdict:before-commit", verdict=False, written=()),
    FallbackWindow("host.settle.verdict:after-commit", verdict=True, written=()),
    FallbackWindow("host.evidence:before-commit@1", verdict=True, written=()),
    FallbackWindow("host.evidence:after-commit@1", verdict=True, written=("checkpoint",)),
    FallbackWindow("host.evidence:after-commit@2", verdict=True, written=("checkpoint", "event")),
)
#: The one PostgreSQL window of the default run: a durable verdict with part of its evidence.
POSTGRES_DEFAULT = "host.evidence:after-commit@1"


def _matrix() -> list[Any]:
    return window_matrix(WINDOWS, lambda w: w.point, postgres_default={POSTGRES_DEFAULT})


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "window"), _matrix())
def test_fallback_window(backend: str, window: FallbackWindow, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_fallback_window(db, window)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


# ── reading the database ──

@dataclass(frozen=True)
class State:
    """What the database holds for the one invocation (and its ledger), read in-process after a process ended."""

    invocation: Any
    command: Any
    rows: list[Any]
    events: Counter[tuple[str, str]]   # (type, subject id) -> count
    records: list[Any]
    findings: list[Any]
    claims: int

    @property
    def row(self) -> Any:
        [row] = self.rows
        return row

    def evidence(self) -> tuple[str, ...]:
        """The evidence of the settlement present, as names of ``EVIDENCE``."""
        present = []
        if self.row.status is AdapterStatus.AMBIGUOUS:
            present.append("checkpoint")
        if self.events[(STEP_AMBIGUOUS, self.row.id)]:
            present.append("event")
        if any(r.adapter_invocation_id == self.row.id for r in self.records):
            present.append("record")
        return tuple(present)


def read_state(db: CrashDB) -> State:
    store = db.store
    [invocation] = store.read(lambda tx: tx.host.list_invocations())
    events = store.read(lambda tx: tx.events.list_events(tenant_id=invocation.tenant_id,
                                                         space_id=invocation.space_id))
    return State(
        invocation=invocation,
        command=store.read(lambda tx: tx.outbox.get(invocation.id)),
        rows=store.read(lambda tx: tx.host.list_adapter_invocations(invocation.id)),
        events=Counter((e.type, e.subject.subject_id) for e in events),
        records=store.read(lambda tx: tx.host.list_reconciliations(invocation.id)),
        findings=audit_store(store),
        claims=claim_count(store.read(lambda tx: tx.outbox.lease_events(invocation.id))),
    )


def _lease_runs_out(db: CrashDB, command_id: str) -> None:
    """Wait until the last lease the crashed caller was granted has expired, so that a worker started now could
    take the command over if it were still open (the crashed process renewed it with each heartbeat)."""
    events = db.store.read(lambda tx: tx.outbox.lease_events(command_id))
    until = max(e.lease_until for e in events if e.lease_until is not None)
    remaining = (until - datetime.now(UTC)).total_seconds()
    if remaining > 0:
        time.sleep(remaining + 0.05)


# ── one window ──

def run_fallback_window(db: CrashDB, window: FallbackWindow) -> None:
    """Crash the fallback at ``window.point``, check the durable state, then what a worker does with it."""
    ledger = db.root / "ledger"
    ledger.mkdir()
    killed = run_subject(db, ledger, "inline", idempotent=False, behaviour=BEHAVIOUR, crash=window.point,
                         faults=FAULTS)
    assert killed.returncode == KILLED, f"expected SIGKILL at {window.point}: {killed.returncode}\n{killed.stderr}"
    assert killed.stdout == "", "a process killed inside the fallback printed a verdict"
    # the provider was called once and charged once, before any settlement was attempted
    assert len(ledger_lines(ledger / "requests")) == 1 and len(ledger_lines(ledger / "charges")) == 1
    crashed = read_state(db)
    if window.verdict:
        _check_durable_verdict(db, ledger, window, crashed)
    else:
        _check_no_verdict_then_recover(db, ledger, crashed)


def _check_no_verdict_then_recover(db: CrashDB, ledger: Path, crashed: State) -> None:
    """Before the verdict's COMMIT: nothing of the settlement is durable; recovery settles it without a call."""
    invocation = crashed.invocation
    assert invocation.status is InvocationStatus.RUNNING, invocation
    assert crashed.command is not None and not crashed.command.status.terminal, crashed.command
    assert crashed.command.lease_until is not None, "the dead caller's lease is left to expire"
    assert crashed.row.status is AdapterStatus.RUNNING, crashed.row
    assert crashed.evidence() == (), crashed.evidence()
    assert crashed.events[(VERDICT_EVENT, invocation.id)] == 0 and crashed.records == []
    assert crashed.findings == [], crashed.findings  # a running invocation has no gap yet
    # K10, G7: a worker takes it over once the lease expires; a running row of a non-idempotent step is an unknown
    # outcome, settled reconciliation_required, and the provider is not called again.
    recovered = run_subject(db, ledger, "work", idempotent=False, behaviour=BEHAVIOUR)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    verdict = json.loads(recovered.stdout.strip().splitlines()[-1])
    assert verdict["status"] == str(InvocationStatus.RECONCILIATION_REQUIRED), verdict
    assert len(ledger_lines(ledger / "requests")) == 1, ledger_lines(ledger / "requests")
    assert len(ledger_lines(ledger / "charges")) == 1, ledger_lines(ledger / "charges")
    after = read_state(db)
    assert after.invocation.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert after.claims == crashed.claims + 1, "one takeover by the recovering worker"
    assert after.command.status.terminal and after.command.lease_until is None, after.command
    # the recovery's own atomic settlement: all the evidence, no fallback mark, nothing for audit to report
    assert after.evidence() == EVIDENCE, after.evidence()
    assert "settled_by" not in (after.invocation.reconciliation or {}), after.invocation.reconciliation
    assert after.events[(VERDICT_EVENT, invocation.id)] == 1
    assert all(n == 1 for n in after.events.values()), after.events
    assert after.findings == [], after.findings


def _check_durable_verdict(db: CrashDB, ledger: Path, window: FallbackWindow, crashed: State) -> None:
    """After a COMMIT of the fallback: the verdict stands, exactly the evidence written so far, a final gap."""
    invocation = crashed.invocation
    assert invocation.status is InvocationStatus.RECONCILIATION_REQUIRED, invocation
    reconciliation = invocation.reconciliation or {}
    assert reconciliation.get("settled_by") == SETTLED_BY_FALLBACK, reconciliation
    assert "StoreUnavailable" in reconciliation.get("store_error", ""), reconciliation
    assert crashed.events[(VERDICT_EVENT, invocation.id)] == 1, crashed.events
    # the verdict unit carried the fence: the command is finished and holds no lease
    command = crashed.command
    assert command is not None and command.status.terminal, command
    assert command.lease_owner is None and command.lease_until is None, command
    assert crashed.evidence() == window.written, (window.point, crashed.evidence())
    if "checkpoint" not in window.written:
        assert crashed.row.status is AdapterStatus.RUNNING, crashed.row
    # K8: audit names the invocation and the missing record, and reports nothing else
    assert all(f.subject == invocation.id and f.check == "invocation_evidence_gaps" for f in crashed.findings), \
        crashed.findings
    prefix = f"evidence gap: adapter invocation {crashed.row.id} (step {crashed.row.step_name}) "
    assert [f.detail for f in crashed.findings] == [prefix + gap for gap in window.gap_findings], crashed.findings
    # K8: the gap is final. A worker started after the dead caller's lease ran out claims nothing, calls no
    # provider and repairs nothing.
    _lease_runs_out(db, invocation.id)
    worker = run_subject(db, ledger, "work", idempotent=False, behaviour=BEHAVIOUR)
    assert worker.returncode == 0, worker.stdout + worker.stderr
    assert json.loads(worker.stdout.strip().splitlines()[-1])["status"] == str(
        InvocationStatus.RECONCILIATION_REQUIRED)
    after = read_state(db)
    assert after.claims == crashed.claims, "a worker claimed an invocation whose verdict is durable"
    assert after.command.delivery_count == command.delivery_count, after.command
    assert len(ledger_lines(ledger / "requests")) == 1
    assert after.invocation == invocation and after.rows == crashed.rows and after.records == crashed.records
    assert after.events == crashed.events and after.findings == crashed.findings
