"""Crash windows of the action host (issue 12; host-spec §2.9): every named transaction of the invocation path
SIGKILLed on both sides of its COMMIT, and the step crash points between them, then converged by a new process.

The subject is ``host_subject.py`` (a submitter, or a worker running claims until a verdict), killed by
``FENCEPOST_CRASHPOINT`` at the window's point. ``run_host_flow`` then checks:

1. **no partial fact**: right after the crash the invocation has a verdict exactly when the transaction that
   writes it committed, and its command is finished exactly when it has one (the verdict and the finish are one
   transaction);
2. a new worker process converges it to a verdict; that verdict is the one ``EXPECTED`` names for the window (a
   non-idempotent action never calls a provider twice: what a crash left unknown ends ``reconciliation_required``);
3. **the provider's ledger equals what the verdict claims**: ``succeeded`` has exactly one charge, ``failed``
   none, ``reconciliation_required`` at most one; never two (the idempotency key is stable across processes);
4. one verdict event, never a lifecycle event twice; ``fencepost audit`` exits 0;
5. the state binding (ADR 0077): ``succeeded`` has exactly one ``StateTransitioned`` fact and order ``o-1`` is
   ``charged`` by this invocation; any other verdict has neither a fact nor a recorded state (the handler writes
   none).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from crash_harness import CrashDB, assert_cli_audit_clean

from fencepost.host.state import STATE_TRANSITIONED, state_event_id
from fencepost.store.host_records import EntityKey, Subject
from helpers.processes import subprocess_env

SUBJECT = Path(__file__).resolve().parent / "host_subject.py"
KILLED = -9
TRANSACTIONS = ("host.submit", "host.claim", "host.handler", "host.step.row", "host.step.attempt",
                "host.step.checkpoint", "host.settle", "host.finalize")
STEP_POINTS = ("host.step:charge:after-row", "host.step:charge:after-provider-call@2",
               "host.step:charge:after-checkpoint")

S, F, R = "succeeded", "failed", "reconciliation_required"
#: The verdict of a non-idempotent action after a crash at each point (flaky provider; decline for host.settle).
NON_IDEMPOTENT = {
    "host.submit:before-commit": S, "host.submit:after-commit": S,
    "host.claim:before-commit": S,                  # still pending: the next claim is a first run
    "host.claim:after-commit": F,                   # running, no step row: no provider effect (G5)
    "host.handler:before-commit": F, "host.handler:after-commit": F,
    "host.step.row:before-commit": F,
    "host.step.row:after-commit": R,                # a running row: outcome unknown to recovery (G7, X5)
    "host.step.attempt:before-commit": R, "host.step.attempt:after-commit": R,
    "host.step.checkpoint:before-commit": R,        # charged, not recorded: unknown (G7)
    "host.step.checkpoint:after-commit": R,         # a recorded effect is not continued (G8)
    "host.settle:before-commit": R,                 # the decline's row is still running on reclaim
    "host.settle:after-commit": F,
    "host.finalize:before-commit": R, "host.finalize:after-commit": S,
    "host.step:charge:after-row": R, "host.step:charge:after-provider-call@2": R,
    "host.step:charge:after-checkpoint": R,
}
#: An idempotent action converges whatever the point: the provider deduplicates the stable key (G14).
IDEMPOTENT = {point: (F if point.startswith("host.settle") else S) for point in NON_IDEMPOTENT}
COMMITTED_VERDICT = {"host.settle:after-commit", "host.finalize:after-commit"}


@dataclass(frozen=True)
class HostWindow:
    point: str
    idempotent: bool

    @property
    def id(self) -> str:
        return f"{self.point}-{'idempotent' if self.idempotent else 'non-idempotent'}"


WINDOWS: tuple[HostWindow, ...] = tuple(HostWindow(p, i) for i in (False, True) for p in NON_IDEMPOTENT)
#: The commit-side points, for the meta-test of ``test_crash_windows``.
POINTS: tuple[str, ...] = tuple(f"{t}:{side}-commit" for t in TRANSACTIONS for side in ("before", "after"))


def run_subject(db: CrashDB, ledger: Path, mode: str, *, idempotent: bool, behaviour: str,
                crash: str | None = None, faults: Mapping[str, Collection[int]] | None = None,
                ) -> subprocess.CompletedProcess[str]:
    """Run ``host_subject.py`` on ``db`` to its end (its exit code and output; asserts nothing).

    Args:
        mode: ``submit``, ``inline`` or ``work``. behaviour: the provider's (see ``host_subject``).
        crash: the ``FENCEPOST_CRASHPOINT`` armed in it. faults: a ``FaultInjectingStore`` plan
            (query name -> the occurrences that fail) for its store.
    """
    env = subprocess_env(crashpoint=crash)
    args = [sys.executable, str(SUBJECT), db.url, str(ledger), mode, "1" if idempotent else "0", behaviour]
    if faults is not None:
        args.append(json.dumps({query: sorted(occurrences) for query, occurrences in faults.items()}))
    return subprocess.run(args, env=env, cwd=db.root, capture_output=True, text=True, timeout=120)


def ledger_lines(path: Path) -> list[str]:
    """The lines of one provider ledger file (``requests``, ``charges``); none when it does not exist yet."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _run(db: CrashDB, ledger: Path, mode: str, window: HostWindow, behaviour: str,
         crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_subject(db, ledger, mode, idempotent=window.idempotent, behaviour=behaviour, crash=crash)


def run_host_flow(db: CrashDB, window: HostWindow) -> None:
    """Crash at ``window.point``, converge, and check (see the module docstring)."""
    ledger = db.root / "ledger"
    ledger.mkdir()
    behaviour = "decline" if window.point.startswith("host.settle") else "flaky"
    crashes_submit = window.point.startswith("host.submit")
    if not crashes_submit:
        submitted = _run(db, ledger, "submit", window, behaviour)
        assert submitted.returncode == 0, submitted.stderr
    killed = _run(db, ledger, "submit" if crashes_submit else "work", window, behaviour, crash=window.point)
    assert killed.returncode == KILLED, f"expected SIGKILL at {window.point}: {killed.returncode}\n{killed.stderr}"
    invocations = db.store.read(lambda tx: tx.host.list_invocations())
    if window.point == "host.submit:before-commit":
        assert invocations == []
    else:
        assert len(invocations) == 1
        crashed = invocations[0]
        has_verdict = crashed.status.terminal
        assert has_verdict is (window.point in COMMITTED_VERDICT), (window.point, crashed.status)
        command = db.store.read(lambda tx: tx.outbox.get(crashed.id))
        assert command is not None and command.status.terminal is has_verdict, (window.point, command)
    if crashes_submit:
        again = _run(db, ledger, "submit", window, behaviour)  # the caller asks again with the same key
        assert again.returncode == 0, again.stderr
    converged = _run(db, ledger, "work", window, behaviour)
    assert converged.returncode == 0, converged.stdout + converged.stderr
    verdict = json.loads(converged.stdout.strip().splitlines()[-1])
    expected = (IDEMPOTENT if window.idempotent else NON_IDEMPOTENT)[window.point]
    assert verdict["status"] == expected, (window.id, verdict)
    charges = ledger_lines(ledger / "charges")
    assert len(charges) <= 1, charges
    if expected == S:
        assert len(charges) == 1
    if expected == F:
        assert charges == []
    final = db.store.read(lambda tx: tx.host.list_invocations())
    assert len(final) == 1 and str(final[0].status) == expected
    events = db.store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
    counts = Counter((e.type, e.subject.subject_id) for e in events)
    assert all(n == 1 for n in counts.values()), counts
    assert sum(1 for e in events if e.type.startswith("ActionInvocation") and e.type != "ActionInvocationStarted"
               ) == 1, [e.type for e in events]
    check_state_fact(db, final[0].id, charged=expected == S)
    assert_cli_audit_clean(db)


def check_state_fact(db: CrashDB, invocation_id: str, *, charged: bool, target: str = "charged") -> None:
    """Order ``o-1``'s ``StateTransitioned`` facts and recorded state (ADR 0077): one fact naming the invocation
    and the state ``target`` set by it when the host recorded the transition (``charged``), else neither."""
    facts = [e for e in db.store.read(lambda tx: tx.events.list_events(
        tenant_id="default", space_id="default", subject=Subject("order", "o-1"))) if e.type == STATE_TRANSITIONED]
    recorded = db.store.read(lambda tx: tx.host.get_entity_state(EntityKey("default", "default", "order", "o-1")))
    if charged:
        assert [(f.id, f.payload["to"]) for f in facts] == [(state_event_id(invocation_id), target)], facts
        assert recorded is not None and (recorded.state, recorded.updated_by_invocation) == (target, invocation_id)
    else:
        assert facts == [] and recorded is None, (facts, recorded)
