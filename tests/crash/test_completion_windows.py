"""SIGKILL on each side of the COMMIT of every unit of an external completion (issue 14; host-spec N1, N2, N4,
N6, N12-N15, N19, N20; ADR 0035): the handoff (``host.step.handoff``), the parking (``host.park``), the
callback (``host.complete``) and the deadline sweep (``host.sweep``), each in a real process, then what the
database holds and how it converges.

The subject is ``host_subject.py`` with behaviour ``payout`` (or ``payout-due``, a deadline of one second): the
action ``shop.payout`` hands its ``payout`` step off (the provider answers ``Accepted``), then runs ``notify``,
then parks. The provider's ground truth is on disk: ``payout-requests`` (a line per call of ``payout``),
``payouts`` (one per key), ``notices`` (a line per call of ``notify``). After each crash:

- **before a COMMIT** nothing of that unit is durable, and what follows settles it once: before the handoff, no
  handoff and the step row ``running``, so a worker's recovery settles it ``reconciliation_required`` without
  calling the provider again, and the callback finds nothing (``not_found``: nothing buffered, N33); before
  parking, the handoff durable but not parked: the callback is refused ``still_executing`` (N4), and either a
  worker's recovery (an idempotent action parks, a non-idempotent one settles ``reconciliation_required`` and
  the callback is evidence) or the deadline sweep (unparked: the late callback is evidence only and clears the
  handoff, N20) deals with it; before the callback's COMMIT the invocation is unchanged and the provider's retry
  settles it; before the sweep's, the invocation is not swept and the next sweep settles it once;
- **after a COMMIT** exactly that unit's effects are durable, and what follows converges: the callback settles
  exactly once (its retry is ``absorbed``), the sweep never twice, the provider called once per step.

``audit_store`` is clean at the end of every window (and right after every crash).

Default run: every window on SQLite WAL/FULL and two on PostgreSQL; the rest of the PostgreSQL windows and the
SQLite DELETE/FULL ones are marked soak (docs/crash-testing.md).
"""

from __future__ import annotations

import json
import subprocess
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
from host_subject import PAYOUT_VENDOR

from fencepost.core.statuses import AdapterStatus, InvocationStatus, ReconciliationKind
from fencepost.host.completion import COMPLETED_EVENT
from fencepost.host.lifecycle import HANDOFF_ACCEPTED, VERDICT_EVENTS
from fencepost.store.audit import audit_store
from helpers.processes import KILLED
from helpers.store_backends import BackendUnreachable

RUNNING, SUCCEEDED = InvocationStatus.RUNNING, InvocationStatus.SUCCEEDED
RECON = InvocationStatus.RECONCILIATION_REQUIRED


@dataclass(frozen=True)
class CompletionWindow:
    """One crash point of the completion path.

    Attributes:
        point: the ``FENCEPOST_CRASHPOINT`` value. idempotent: the action's flag. behaviour: ``payout`` (a
            deadline of an hour: never due) or ``payout-due`` (one second). recovery: for ``host.park:before-commit``,
            who deals with the unparked handoff: ``worker`` or ``sweep``.
    """

    point: str
    idempotent: bool = False
    behaviour: str = "payout"
    recovery: str = "worker"

    @property
    def transaction(self) -> str:
        return self.point.split(":")[0]

    @property
    def id(self) -> str:
        tags = [self.point, "idempotent" if self.idempotent else "non-idempotent"]
        if self.transaction == "host.park" and self.point.endswith("before-commit"):
            tags.append(f"by-{self.recovery}")
        return "-".join(tags)


WINDOWS: tuple[CompletionWindow, ...] = (
    CompletionWindow("host.step.handoff:before-commit"),
    CompletionWindow("host.step.handoff:after-commit"),
    CompletionWindow("host.step.handoff:after-commit", idempotent=True),
    CompletionWindow("host.step:payout:after-handoff", idempotent=True),
    CompletionWindow("host.park:before-commit"),
    CompletionWindow("host.park:before-commit", idempotent=True),
    CompletionWindow("host.park:before-commit", behaviour="payout-due", recovery="sweep"),
    CompletionWindow("host.park:after-commit"),
    CompletionWindow("host.complete:before-commit"),
    CompletionWindow("host.complete:after-commit"),
    CompletionWindow("host.sweep:before-commit", behaviour="payout-due"),
    CompletionWindow("host.sweep:after-commit", behaviour="payout-due"),
)
#: The PostgreSQL windows of the default run: no handoff durable yet, and a durable sweep a late callback settles.
POSTGRES_DEFAULT = ("host.step.handoff:before-commit-non-idempotent", "host.sweep:after-commit-non-idempotent")


def _matrix() -> list[Any]:
    return window_matrix(WINDOWS, lambda w: w.id, postgres_default=POSTGRES_DEFAULT)


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "window"), _matrix())
def test_completion_window(backend: str, window: CompletionWindow, tmp_path: Path) -> None:
    require_backend(backend)
    try:
        with crash_db(backend, tmp_path) as db:
            run_completion_window(db, window)
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


# ── reading the database and the provider's ledger ──

@dataclass(frozen=True)
class State:
    """What the database holds for the one invocation, read in-process after a process ended."""

    invocation: Any
    command: Any
    rows: dict[str, Any]                 # step name -> adapter row
    events: Counter[str]                 # event type -> count (every event of the space)
    event_ids: Counter[str]              # event id -> count
    records: list[Any]
    findings: list[Any]
    claims: int

    def kinds(self) -> list[str]:
        return sorted(str(r.kind) for r in self.records)


def read_state(db: CrashDB) -> State:
    store = db.store
    [invocation] = store.read(lambda tx: tx.host.list_invocations())
    events = store.read(lambda tx: tx.events.list_events(tenant_id=invocation.tenant_id,
                                                         space_id=invocation.space_id))
    return State(
        invocation=store.read(lambda tx: tx.host.get_invocation(invocation.id)),
        command=store.read(lambda tx: tx.outbox.get(invocation.id)),
        rows={r.step_name: r for r in store.read(lambda tx: tx.host.list_adapter_invocations(invocation.id))},
        events=Counter(e.type for e in events),
        event_ids=Counter(e.id for e in events),
        records=store.read(lambda tx: tx.host.list_reconciliations(invocation.id)),
        findings=audit_store(store),
        claims=claim_count(store.read(lambda tx: tx.outbox.lease_events(invocation.id))),
    )


@dataclass(frozen=True)
class Ledger:
    """The provider's files: every ``payout`` call, the payouts made, every ``notify`` call."""

    root: Path

    @property
    def requests(self) -> int:
        return len(ledger_lines(self.root / "payout-requests"))

    @property
    def payouts(self) -> list[str]:
        return ledger_lines(self.root / "payouts")

    @property
    def notices(self) -> int:
        return len(ledger_lines(self.root / "notices"))

    @property
    def reference(self) -> str:
        [line] = self.payouts
        return line.split(" ", 1)[1]


# ── running the subject ──

def _run(db: CrashDB, ledger: Ledger, mode: str, window: CompletionWindow,
         crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_subject(db, ledger.root, mode, idempotent=window.idempotent, behaviour=window.behaviour, crash=crash)


def _ok(db: CrashDB, ledger: Ledger, mode: str, window: CompletionWindow) -> dict[str, Any]:
    """Run the subject without a crash point; its JSON answer."""
    done = _run(db, ledger, mode, window)
    assert done.returncode == 0, f"{mode}: {done.returncode}\n{done.stdout}{done.stderr}"
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def _killed(db: CrashDB, ledger: Ledger, mode: str, window: CompletionWindow) -> None:
    done = _run(db, ledger, mode, window, crash=window.point)
    assert done.returncode == KILLED, f"expected SIGKILL at {window.point}: {done.returncode}\n{done.stderr}"
    assert done.stdout == "", f"a process killed at {window.point} printed an answer: {done.stdout}"


def _callback(db: CrashDB, ledger: Ledger, window: CompletionWindow) -> str:
    """The provider's callback (``completed``, its payout id); the receipt's disposition."""
    return str(_ok(db, ledger, "complete", window)["disposition"])


def _sleep_until(instant: datetime) -> None:
    remaining = (instant - datetime.now(UTC)).total_seconds()
    if remaining > 0:
        time.sleep(remaining + 0.05)


def _lease_runs_out(db: CrashDB, command_id: str) -> None:
    """Until the last lease the crashed process was granted has expired (then a worker may take over)."""
    events = db.store.read(lambda tx: tx.outbox.lease_events(command_id))
    _sleep_until(max(e.lease_until for e in events if e.lease_until is not None))


def _due(state: State) -> None:
    """Until the handoff's completion deadline has passed."""
    assert state.invocation.completion_due_at is not None
    _sleep_until(state.invocation.completion_due_at)


# ── the checks every window shares ──

def _clean(state: State, when: str) -> None:
    """Audit clean, no event written twice."""
    assert state.findings == [], f"{when}: {state.findings}"
    assert all(n == 1 for n in state.event_ids.values()), (when, state.event_ids)


def _handoff_durable(state: State, ledger: Ledger) -> None:
    """The handoff and its marker committed together (N1, E6); the invocation has not parked."""
    invocation = state.invocation
    assert invocation.status is RUNNING, invocation
    assert (invocation.handoff_provider, invocation.handoff_reference) == (PAYOUT_VENDOR, ledger.reference)
    assert invocation.completion_due_at is not None and invocation.parked_at is None, invocation
    assert invocation.overdue_at is None and invocation.external_completion is None, invocation
    payout = state.rows["payout"]
    assert payout.status is AdapterStatus.SUCCEEDED and payout.external_reference == ledger.reference, payout
    assert state.events[HANDOFF_ACCEPTED] == 1, state.events
    assert state.command is not None and not state.command.status.terminal, state.command
    assert state.command.lease_until is not None, "the dead executor's lease is left to expire"


def _parked(state: State, ledger: Ledger) -> None:
    """Parked (N2): running, the handoff and the result so far on it, the command finished, no lease."""
    invocation = state.invocation
    assert invocation.status is RUNNING and invocation.parked_at is not None, invocation
    assert invocation.handoff_reference == ledger.reference and invocation.overdue_at is None, invocation
    assert invocation.pending_completion["result"]["order"] == "o-1", invocation.pending_completion
    assert invocation.lease_owner is None and invocation.external_completion is None, invocation
    assert state.command is not None and state.command.status.terminal and state.command.lease_until is None
    assert {name: row.status for name, row in state.rows.items()} == {
        "payout": AdapterStatus.SUCCEEDED, "notify": AdapterStatus.SUCCEEDED}


def _settled_once(db: CrashDB, ledger: Ledger, window: CompletionWindow, *, verdicts: int = 1) -> State:
    """The callback settled the invocation ``succeeded`` with the payout's id merged in; the provider's retry is
    absorbed and changes nothing; one completion event; ``verdicts`` verdict events (a sweep's, then this one)."""
    state = read_state(db)
    invocation = state.invocation
    assert invocation.status is SUCCEEDED, invocation
    assert invocation.result["payout_id"] == ledger.reference and invocation.result["order"] == "o-1"
    assert invocation.external_completion["outcome"] == "completed", invocation.external_completion
    assert invocation.external_completion["disposition"] == "settled" and invocation.pending_completion is None
    assert state.events[COMPLETED_EVENT] == 1, state.events
    assert state.events[VERDICT_EVENTS[SUCCEEDED]] == 1, state.events
    assert sum(state.events[e] for e in VERDICT_EVENTS.values()) == verdicts, state.events
    assert _callback(db, ledger, window) == "absorbed"
    again = read_state(db)
    assert (again.invocation, again.events, again.records) == (invocation, state.events, state.records)
    _clean(again, "after the callback settled")
    return again


def _provider_once(ledger: Ledger, *, notices: int = 1) -> None:
    """Each step's provider called once, one payout."""
    assert ledger.requests == 1 and len(ledger.payouts) == 1, (ledger.requests, ledger.payouts)
    assert ledger.notices == notices, ledger.notices


def _no_claim(db: CrashDB, ledger: Ledger, window: CompletionWindow, before: State) -> None:
    """A worker started now claims nothing and writes nothing (a parked or settled command is finished)."""
    answer = _ok(db, ledger, "work", window)
    assert answer["status"] == str(before.invocation.status), answer
    after = read_state(db)
    assert after.claims == before.claims, "a worker claimed a parked or settled invocation"
    assert (after.invocation, after.rows, after.events) == (before.invocation, before.rows, before.events)


# ── one window ──

def run_completion_window(db: CrashDB, window: CompletionWindow) -> None:
    """Crash at ``window.point``, check the durable state, then converge it and check the outcome."""
    ledger = Ledger(db.root / "ledger")
    ledger.root.mkdir()
    assert _ok(db, ledger, "submit", window)["status"] == "pending"
    if window.transaction in ("host.step.handoff", "host.step", "host.park"):
        _killed(db, ledger, "work", window)
        crashed = read_state(db)
        _clean(crashed, f"right after the crash at {window.point}")
        if window.transaction == "host.park":
            _park_window(db, ledger, window, crashed)
        else:
            _handoff_window(db, ledger, window, crashed)
        return
    parked = _ok(db, ledger, "work", window)
    assert parked["parked"] is True and parked["status"] == "running", parked
    before = read_state(db)
    _parked(before, ledger)
    if window.transaction == "host.complete":
        _complete_window(db, ledger, window, before)
    else:
        _sweep_window(db, ledger, window, before)


def _handoff_window(db: CrashDB, ledger: Ledger, window: CompletionWindow, crashed: State) -> None:
    invocation = crashed.invocation
    if window.point.endswith("before-commit"):
        # nothing of the unit: no handoff, no marker, no event; the provider was called and paid out once
        assert invocation.status is RUNNING and invocation.handoff_reference is None, invocation
        assert invocation.completion_due_at is None and invocation.parked_at is None, invocation
        assert list(crashed.rows) == ["payout"] and crashed.rows["payout"].status is AdapterStatus.RUNNING
        assert crashed.events[HANDOFF_ACCEPTED] == 0, crashed.events
        assert crashed.command is not None and not crashed.command.status.terminal, crashed.command
        _provider_once(ledger, notices=0)
        # N33: the callback finds no handoff: not_found, nothing recorded (the provider retries)
        assert _callback(db, ledger, window) == "not_found"
        assert read_state(db).invocation == invocation
        # G7: after the lease runs out a worker takes over; a running row of a non-idempotent step is an unknown
        # outcome, settled reconciliation_required without calling the provider again
        _lease_runs_out(db, invocation.id)
        assert _ok(db, ledger, "work", window)["status"] == str(RECON)
        after = read_state(db)
        assert after.invocation.status is RECON and after.claims == crashed.claims + 1
        assert after.kinds() == [str(ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS)], after.kinds()
        assert after.command.status.terminal and after.command.lease_until is None, after.command
        _provider_once(ledger, notices=0)
        assert _callback(db, ledger, window) == "not_found"  # still nothing to match: an operator reconciles
        _clean(read_state(db), "after recovery")
        return
    # after the handoff's COMMIT (and at the step's crash point after it): the handoff and its marker, not parked
    _handoff_durable(crashed, ledger)
    assert list(crashed.rows) == ["payout"], crashed.rows
    _provider_once(ledger, notices=0)
    _unparked_converges(db, ledger, window, crashed, notices_before=0)


def _park_window(db: CrashDB, ledger: Ledger, window: CompletionWindow, crashed: State) -> None:
    invocation = crashed.invocation
    if window.point.endswith("after-commit"):
        _parked(crashed, ledger)
        _provider_once(ledger)
        _no_claim(db, ledger, window, crashed)
        assert _callback(db, ledger, window) == "settled"
        _settled_once(db, ledger, window)
        _provider_once(ledger)
        return
    # before parking's COMMIT: the remaining step ran, the handoff is durable, nothing of parking
    _handoff_durable(crashed, ledger)
    assert crashed.rows["notify"].status is AdapterStatus.SUCCEEDED
    assert invocation.pending_completion.get("result") is None, invocation.pending_completion
    _provider_once(ledger)
    if window.recovery == "worker":
        _unparked_converges(db, ledger, window, crashed, notices_before=1)
        return
    # the deadline passes before any worker takes the command over: the sweep settles the unparked handoff and
    # finishes its command (ADR 0035); the late callback is evidence only and clears the handoff (N20)
    _lease_runs_out(db, invocation.id)
    _due(crashed)
    assert _ok(db, ledger, "sweep", window) == {"swept": 1}
    swept = read_state(db)
    assert swept.invocation.status is RECON and swept.invocation.overdue_at is not None
    assert swept.invocation.parked_at is None and swept.invocation.handoff_reference == ledger.reference
    assert swept.kinds() == [str(ReconciliationKind.COMPLETION_OVERDUE)], swept.kinds()
    assert swept.invocation.reconciliation["parked"] is False, swept.invocation.reconciliation
    assert swept.command.status.terminal and swept.command.lease_until is None, swept.command
    _clean(swept, "after the sweep")
    assert _ok(db, ledger, "sweep", window) == {"swept": 0}
    _no_claim(db, ledger, window, swept)
    assert _callback(db, ledger, window) == "evidence_only"
    late = read_state(db)
    assert late.invocation.status is RECON and late.invocation.pending_completion is None, late.invocation
    assert late.invocation.external_completion["disposition"] == "evidence_only"
    assert late.invocation.overdue_at == swept.invocation.overdue_at and late.invocation.parked_at is None
    assert late.events[COMPLETED_EVENT] == 1 and late.events[VERDICT_EVENTS[SUCCEEDED]] == 0, late.events
    assert _callback(db, ledger, window) == "absorbed"
    _clean(read_state(db), "after the late callback")
    _provider_once(ledger)


def _unparked_converges(db: CrashDB, ledger: Ledger, window: CompletionWindow, crashed: State, *,
                        notices_before: int) -> None:
    """A durable handoff that has not parked: the callback is refused until the executor's successor decides. An
    idempotent action is continued and parks (the handed-off step is never called again), then the callback
    settles it; a non-idempotent one is not continued after an applied effect (G8): ``reconciliation_required``,
    and the callback is kept as evidence."""
    invocation = crashed.invocation
    assert _callback(db, ledger, window) == "still_executing"  # N4: nothing written
    refused = read_state(db)
    assert (refused.invocation, refused.events, refused.records) == (invocation, crashed.events, crashed.records)
    _lease_runs_out(db, invocation.id)
    answer = _ok(db, ledger, "work", window)
    recovered = read_state(db)
    assert recovered.claims == crashed.claims + 1, "one takeover by the recovering worker"
    assert ledger.requests == 1, "the handed-off step was called again"
    if window.idempotent:
        assert answer["parked"] is True, answer
        _parked(recovered, ledger)
        assert ledger.notices == 1, ledger.notices  # notify ran once, by whichever execution got to it
        _clean(recovered, "after recovery parked it")
        assert _callback(db, ledger, window) == "settled"
        _settled_once(db, ledger, window)
        _provider_once(ledger)
        return
    assert answer["status"] == str(RECON), answer
    assert recovered.invocation.status is RECON and recovered.invocation.parked_at is None
    assert recovered.invocation.reconciliation["kind"] == str(ReconciliationKind.APPLIED_EFFECT)
    assert ledger.notices == notices_before, "a non-idempotent action was continued after an applied effect"
    _clean(recovered, "after recovery")
    assert _callback(db, ledger, window) == "evidence_only"
    late = read_state(db)
    assert late.invocation.status is RECON and late.invocation.external_completion["outcome"] == "completed"
    assert late.events[COMPLETED_EVENT] == 1 and late.events[VERDICT_EVENTS[SUCCEEDED]] == 0, late.events
    assert _callback(db, ledger, window) == "absorbed"
    _clean(read_state(db), "after the callback")
    assert ledger.requests == 1 and ledger.notices == notices_before


def _complete_window(db: CrashDB, ledger: Ledger, window: CompletionWindow, before: State) -> None:
    _killed(db, ledger, "complete", window)
    crashed = read_state(db)
    _clean(crashed, f"right after the crash at {window.point}")
    if window.point.endswith("before-commit"):
        # nothing of the callback: the invocation, its rows, events and records are as parking left them
        assert (crashed.invocation, crashed.rows, crashed.events, crashed.records) == (
            before.invocation, before.rows, before.events, before.records)
        assert _callback(db, ledger, window) == "settled"  # the provider retries its callback
    else:
        # exactly the callback's effects: the verdict, the completion on record, its events; nothing else
        assert crashed.invocation.status is SUCCEEDED and crashed.invocation.parked_at == before.invocation.parked_at
        assert crashed.rows.keys() == before.rows.keys() and crashed.records == before.records == []
        assert crashed.events - before.events == Counter({COMPLETED_EVENT: 1, VERDICT_EVENTS[SUCCEEDED]: 1})
    _settled_once(db, ledger, window)
    _provider_once(ledger)


def _sweep_window(db: CrashDB, ledger: Ledger, window: CompletionWindow, before: State) -> None:
    _due(before)
    _killed(db, ledger, "sweep", window)
    crashed = read_state(db)
    _clean(crashed, f"right after the crash at {window.point}")
    if window.point.endswith("before-commit"):
        assert (crashed.invocation, crashed.events, crashed.records) == (
            before.invocation, before.events, before.records)
        assert _ok(db, ledger, "sweep", window) == {"swept": 1}  # the next sweep settles it
        crashed = read_state(db)
    # swept once: reconciliation_required with overdue_at, the handoff and parking kept, one record, one event
    swept = crashed.invocation
    assert swept.status is RECON and swept.overdue_at is not None, swept
    assert swept.parked_at == before.invocation.parked_at and swept.handoff_reference == ledger.reference
    assert crashed.kinds() == [str(ReconciliationKind.COMPLETION_OVERDUE)], crashed.kinds()
    assert crashed.events - before.events == Counter({VERDICT_EVENTS[RECON]: 1}), crashed.events - before.events
    _clean(crashed, "after the sweep")
    assert _ok(db, ledger, "sweep", window) == {"swept": 0}  # never twice
    _no_claim(db, ledger, window, crashed)
    # N19: the late callback settles a swept handoff that had parked
    assert _callback(db, ledger, window) == "settled"
    settled = _settled_once(db, ledger, window, verdicts=2)
    assert settled.invocation.overdue_at == swept.overdue_at and settled.invocation.parked_at == swept.parked_at
    assert settled.kinds() == [str(ReconciliationKind.COMPLETION_OVERDUE)], settled.kinds()
    _provider_once(ledger)
