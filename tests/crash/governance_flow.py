"""Crash windows of governance and approvals (ADRs 0043-0045): each named unit SIGKILLed on both sides of its
COMMIT, then converged by new processes.

The subject is ``host_subject.py`` with behaviour ``governed`` (a mutation footprint, a policy attaching an
obligation, an attestation satisfying it), ``approval`` or ``approval-due`` (a policy requiring approval).
``run_governance_flow`` checks that nothing is partial after the crash and that convergence gives the expected
verdict with exactly one record of each governance kind, at most one charge, one event per id and a clean
``fencepost audit``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from crash_harness import CrashDB, assert_cli_audit_clean
from host_flow import KILLED, ledger_lines, run_subject

from fencepost.core.statuses import InvocationStatus

GOVERNED = ("host.governance.footprint", "host.governance.policy", "host.governance.obligations",
            "host.attestation")
APPROVAL = ("host.approval.request", "host.approval.decide", "host.approval.expire")


@dataclass(frozen=True)
class GovernanceWindow:
    transaction: str
    side: str

    @property
    def point(self) -> str:
        return f"{self.transaction}:{self.side}-commit"

    @property
    def id(self) -> str:
        return self.point


WINDOWS: tuple[GovernanceWindow, ...] = tuple(GovernanceWindow(t, side) for t in (*GOVERNED, *APPROVAL)
                                              for side in ("before", "after"))
POINTS: tuple[str, ...] = tuple(w.point for w in WINDOWS)


def _run(db: CrashDB, mode: str, behaviour: str, crash: str | None = None) -> dict[str, object]:
    done = run_subject(db, db.root / "ledger", mode, idempotent=True, behaviour=behaviour, crash=crash)
    if crash is not None:
        assert done.returncode == KILLED, f"expected SIGKILL at {crash}: {done.returncode}\n{done.stderr}"
        return {}
    assert done.returncode == 0, done.stdout + done.stderr
    parsed: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def _invocation(db: CrashDB) -> object:
    (only,) = db.store.read(lambda tx: tx.host.list_invocations())
    return only


def run_governance_flow(db: CrashDB, window: GovernanceWindow) -> None:
    """Crash at ``window.point``, converge, and check (see the module docstring)."""
    (db.root / "ledger").mkdir()
    point, after = window.point, window.side == "after"
    if window.transaction in GOVERNED:
        behaviour, expected = "governed", InvocationStatus.SUCCEEDED
        _run(db, "submit", behaviour)
        _run(db, "work", behaviour, crash=point)
        assert _invocation(db).status is InvocationStatus.RUNNING  # type: ignore[attr-defined]
        verdict = _run(db, "work", behaviour)
    elif window.transaction == "host.approval.request":
        behaviour, expected = "approval", InvocationStatus.SUCCEEDED
        _run(db, "submit", behaviour)
        _run(db, "work", behaviour, crash=point)
        status = _invocation(db).status  # type: ignore[attr-defined]
        assert status is (InvocationStatus.AWAITING_APPROVAL if after else InvocationStatus.RUNNING), status
        assert _run(db, "work", behaviour)["status"] == "awaiting_approval"
        verdict = _run(db, "approve", behaviour)
    elif window.transaction == "host.approval.decide":
        behaviour, expected = "approval", InvocationStatus.SUCCEEDED
        _run(db, "submit", behaviour)
        assert _run(db, "work", behaviour)["status"] == "awaiting_approval"
        _run(db, "approve", behaviour, crash=point)
        status = _invocation(db).status  # type: ignore[attr-defined]
        assert status is (InvocationStatus.RUNNING if after else InvocationStatus.AWAITING_APPROVAL), status
        # after the commit the resume's temporary lease expires and a worker takes over; before it, approve again
        verdict = _run(db, "work" if after else "approve", behaviour)
    else:
        behaviour, expected = "approval-due", InvocationStatus.FAILED
        _run(db, "submit", behaviour)
        assert _run(db, "work", behaviour)["status"] == "awaiting_approval"
        _run(db, "expire", behaviour, crash=point)
        status = _invocation(db).status  # type: ignore[attr-defined]
        assert status is (InvocationStatus.FAILED if after else InvocationStatus.AWAITING_APPROVAL), status
        assert _run(db, "expire", behaviour)["expired"] == (0 if after else 1)
        verdict = {"status": str(_invocation(db).status)}  # type: ignore[attr-defined]
    assert verdict["status"] == str(expected), (window.id, verdict)
    final = _invocation(db)
    assert final.status is expected  # type: ignore[attr-defined]
    charges = ledger_lines(db.root / "ledger" / "charges")
    assert len(charges) == (1 if expected is InvocationStatus.SUCCEEDED else 0), charges
    records = db.store.read(lambda tx: tx.host.list_governance_records(final.id))  # type: ignore[attr-defined]
    kinds = Counter(str(r.kind) for r in records)
    assert all(n == 1 for n in kinds.values()), kinds  # one record of each kind: every append deduplicated
    events = db.store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
    counts = Counter((e.type, e.subject.subject_id) for e in events)
    assert all(n == 1 for n in counts.values()), counts
    assert_cli_audit_clean(db)
