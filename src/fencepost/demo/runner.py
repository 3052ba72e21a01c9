"""``fencepost demo payments``: the action host against a real provider, real workers and real crashes.

The demo runs everything on loopback and embedded SQLite, in a directory of its own:

- SimPay, the local payment provider (``fencepost.demo.simpay``), with a ground-truth ledger in a SQLite file of
  its own, so that what the provider really did is measured, never taken from fencepost;
- real ``fencepost worker --app fencepost.demo.payments:demo_host`` subprocesses with 3 s leases;
- a real ``fencepost serve --no-worker --app fencepost.demo.payments:demo_host --completion-secret simpay=...``
  subprocess: the completion endpoint SimPay's signed payout webhooks reach over loopback HTTP (ADR 0036);
- one invocation per scenario of host-spec §2.10 (rows 1-12), and row 13 (issue 13): the provider charges, then
  the store refuses the checkpoint write.

Rows 8-10 are asynchronous payouts (issue 14, host-spec N). SimPay answers 202, the adapter answers
``Accepted(po_...)``, the invocation parks, and SimPay itself POSTs ``Fencepost-Signature``-signed webhooks,
retrying any answer but a 2xx as a provider does (a webhook that outruns the parking is answered 404 or 409).
The spec's five webhook behaviours fit its three rows: row 8 is on time, then the same body again (absorbed);
row 9 is on time, then a contradicting ``payout.failed``; row 10 is never, until the workers' deadline sweep has
settled it ``reconciliation_required`` (``COMPLETION_DEADLINE_SECONDS``), and then late: the demo tells SimPay to
settle the payout, and its webhook settles the parked, swept handoff. Each is checked against SimPay's ledger
(the payout, its status, every delivery attempt and the answer it got) and the invocation (status, parking,
``overdue_at``, the recorded completion, the contradiction event).

The crash scenarios arm ``FENCEPOST_CRASHPOINT=host.step:charge:after-provider-call`` in the only worker
running, so SimPay has charged and that worker is SIGKILLed before anything is recorded. A fresh worker takes
the invocation over when the lease expires. The poison scenario's handler SIGKILLs every worker that claims it,
and the demo restarts workers until the recovery budget ends it.

Row 13 runs inline, in the demo's own process, through a ``FaultInjectingStore`` wrapping the demo's store that
refuses every write of the step's checkpoint (``update_adapter_invocation``: the marker, its retry, the degraded
settlement and its retry, the fallback's marker). The fault is the test suite's injector, not a switch in the
host or the workers: SimPay really charges, the real transactions really roll back, and the host settles
``reconciliation_required`` by the verdict-first fallback (ADR 0031), leaving the missing checkpoint as a final
evidence gap that ``fencepost audit`` reports.

Each scenario's row is checked against its expectation: the verdict, the charges in SimPay's ledger under the
step's ``adapter_invocation_id``, and the provider calls made with it. ``audit_store`` then runs over the
demo's store: every finding must belong to row 13 and be its missing checkpoint (each other row's invocation must
audit clean, and no finding may name anything else). The demo exits 0 only when every row and the audit hold.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fencepost.core.errors import IdempotencyConflict, InvalidInput, RecoverableFinalization
from fencepost.core.statuses import InvocationStatus
from fencepost.demo.payments import (
    COMPLETION_DEADLINE_SECONDS,
    RECOVERY_MAX_ATTEMPTS,
    SIMPAY_URL_ENV,
    WORKER_ENV,
    build_host,
)
from fencepost.demo.simpay import SimPay
from fencepost.demo.simpay_adapter import VENDOR
from fencepost.host.finalization import SETTLED_BY_FALLBACK
from fencepost.host.operator import invocation_events
from fencepost.host.service import Dispatch, Host, Inline, InvocationView
from fencepost.host.telemetry import STATUS
from fencepost.store import open_store
from fencepost.store.audit import audit_store
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore

#: Marks a directory as the demo's own, so a re-run may clear it and nothing else is ever deleted.
MARKER = ".fencepost-demo"
LEASE_SECONDS = 3.0
#: SimPay's ``slow-after-charge`` sleep: past the step's 3.5 s deadline.
SLOW_SECONDS = 5.0
CRASHPOINT = "host.step:charge:after-provider-call"
SETTLE_TIMEOUT_SECONDS = 60.0
POISON_TIMEOUT_SECONDS = 120.0
REFUSED = "refused"
#: Row 13's fault: every ``update_adapter_invocation`` the inline execution runs (five: the success marker and
#: its retry, the degraded settlement's marker and its retry, the fallback's marker) fails inside its real
#: transaction, which rolls back.
CHECKPOINT_REFUSED = {"update_adapter_invocation": {1, 2, 3, 4, 5}}

S, F, R = InvocationStatus.SUCCEEDED, InvocationStatus.FAILED, InvocationStatus.RECONCILIATION_REQUIRED
#: The environment variable that carries the webhook secret to ``fencepost serve`` (never its command line).
WEBHOOK_SECRET_ENV = "FENCEPOST_DEMO_WEBHOOK_SECRET"
#: What fencepost answers a webhook that came too early (before the handoff, before parking): "send it later".
RETRY_LATER = ("unknown-reference", "still-executing")
API_START_SECONDS = 30.0


@dataclass(frozen=True)
class PayoutExpectation:
    """What must hold for a payout row (8-10), besides its verdict.

    Attributes:
        taken: the webhooks fencepost took (answered 2xx), in order, as (SimPay's event type, the disposition
            fencepost answered). Every other delivery attempt must have been answered "later" (``RETRY_LATER``).
        simpay_status: the payout's last status in SimPay's ledger.
        contradicted: an ``ExternalOperationContradicted`` event names the first completion (``completed``) and
            the second (``failed``); False: there is no such event.
        swept: the deadline sweep settled it first: ``reconciliation_required`` was seen, ``overdue_at`` is set,
            and every webhook was sent after it (a late callback). False: ``overdue_at`` is unset.
    """

    taken: tuple[tuple[str, str], ...]
    simpay_status: str
    contradicted: bool = False
    swept: bool = False


@dataclass(frozen=True)
class Scenario:
    """One row of the demo: what is submitted and what must hold afterwards.

    Attributes:
        number: the row of host-spec §2.10 (13: issue 13's store-fault row). phase: ``plain`` (two workers),
            ``crash`` (the only worker is SIGKILLed after the provider charged), ``poison`` (workers restarted
            until the budget settles it), ``conflict`` (the key of row 1 with another amount) or ``store-fault``
            (inline, through a store that refuses the checkpoint write).
        expect_status: the verdict (``"refused"`` for a submission that must be refused).
        expect_charges: charges in SimPay's ledger under the step's key. expect_calls: provider calls with it.
        expect_reason: a phrase the verdict's error must contain, when it has one.
        expect_gap: the verdict-first fallback settled it and its checkpoint is missing: the verdict says
            ``settled_by: verdict-first-fallback`` and carries SimPay's charge id, an ``AdapterInvocationSucceeded``
            event carries it too, an ``applied_effect`` reconciliation record exists, and audit reports exactly
            one finding for the invocation, the step's checkpoint still running. False: audit reports nothing
            for the invocation.
        expect_payout: for a payout row (phase ``payout``: submitted with the plain rows, completed by SimPay's
            webhooks), what its handoff and completions must show.
    """

    number: int
    title: str
    action: str
    mode: str
    phase: str
    expect_status: str
    expect_charges: int
    expect_calls: int
    expect_reason: str | None = None
    expect_gap: bool = False
    expect_payout: PayoutExpectation | None = None


SCENARIOS = (
    Scenario(1, "charge ok", "demo.charge", "ok", "plain", S, 1, 1),
    Scenario(2, "card declined", "demo.charge", "decline", "plain", F, 0, 1, "declined"),
    Scenario(3, "flaky provider: 503 twice, then ok", "demo.charge", "flaky", "plain", S, 1, 3),
    Scenario(4, "provider charges, then times out", "demo.charge", "slow-after-charge", "plain", R, 1, 1,
             "timed out"),
    Scenario(5, "provider charges, then replies []", "demo.charge", "garbage", "plain", R, 1, 1,
             "uninterpretable"),
    Scenario(6, "worker SIGKILLed after the charge, not idempotent", "demo.charge", "ok", "crash", R, 1, 1,
             "outcome unknown"),
    Scenario(7, "worker SIGKILLed after the charge, idempotent", "demo.charge-idempotent", "ok", "crash", S, 1, 2),
    Scenario(8, "async payout: webhook on time, then the same webhook again", "demo.payout", "webhook-twice",
             "payout", S, 0, 1, expect_payout=PayoutExpectation(
                 (("payout.paid", "settled"), ("payout.paid", "absorbed")), "paid")),
    Scenario(9, "async payout: webhook on time, then a contradictory one", "demo.payout", "webhook-contradict",
             "payout", R, 0, 1, "contradicts the first", expect_payout=PayoutExpectation(
                 (("payout.paid", "settled"), ("payout.failed", "contradicted")), "failed", contradicted=True)),
    Scenario(10, f"async payout: webhook never arrives (deadline {COMPLETION_DEADLINE_SECONDS:.0f} s), then late",
             "demo.payout", "webhook-never",
             "payout", S, 0, 1, expect_payout=PayoutExpectation((("payout.paid", "settled"),), "paid", swept=True)),
    Scenario(11, "same idempotency key, another amount", "demo.charge", "ok", "conflict", REFUSED, 0, 0,
             "parameters"),
    Scenario(12, "poison: kills its worker at every claim", "demo.poison", "ok", "poison", R, 0, 0,
             f"recovery attempts exhausted ({RECOVERY_MAX_ATTEMPTS + 1}/{RECOVERY_MAX_ATTEMPTS})"),
    Scenario(13, "provider charges, then the store refuses the checkpoint write (injected)",
             "demo.charge", "ok", "store-fault", R, 1, 1, "checkpoint could not be recorded", expect_gap=True),
)


@dataclass
class Row:
    """What one scenario did, measured: the verdict from fencepost, the charges and calls from SimPay."""

    scenario: Scenario
    invocation_id: str | None = None
    status: str = "not run"
    reason: str | None = None
    attempt_count: int | None = None
    adapter_invocation_id: str | None = None
    charges: int = 0
    calls: int = 0
    events: list[str] = field(default_factory=list)
    #: SimPay's charge id under the step's key; the one in the ``AdapterInvocationSucceeded`` event's output;
    #: the one in the verdict's ``reconciliation`` output (None where there is none).
    provider_charge_id: str | None = None
    event_charge_id: str | None = None
    verdict_charge_id: str | None = None
    settled_by: str | None = None
    #: kinds of the invocation's reconciliation records; details of the audit findings naming the invocation.
    reconciliations: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    #: Payout rows: the payouts SimPay made under the step's key, its id and last status there, every webhook
    #: delivery attempt SimPay made (``type``, ``answer_status``, ``answer``, ``sent_at``); the step's external
    #: reference; the invocation's ``parked_at`` and ``overdue_at`` (ISO text); the recorded first completion's
    #: outcome and reference; the status seen before the late webhook (row 10); the contradiction event's
    #: first and second outcomes.
    payouts: int = 0
    provider_payout_id: str | None = None
    payout_status: str | None = None
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    external_reference: str | None = None
    parked_at: str | None = None
    overdue_at: str | None = None
    completion_outcome: str | None = None
    completion_reference: str | None = None
    status_before_late_webhook: str | None = None
    contradiction: tuple[str | None, str | None] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return not self.problems

    def check(self) -> None:
        """Compare with the scenario's expectation; each difference becomes a problem."""
        s = self.scenario
        if self.status != s.expect_status:
            self.problems.append(f"verdict {self.status}, expected {s.expect_status}")
        if self.charges != s.expect_charges:
            self.problems.append(f"{self.charges} charge(s) at SimPay, expected {s.expect_charges}")
        if self.calls != s.expect_calls:
            self.problems.append(f"{self.calls} provider call(s), expected {s.expect_calls}")
        if s.expect_reason and s.expect_reason not in (self.reason or ""):
            self.problems.append(f"the reason does not say {s.expect_reason!r}")
        if s.expect_payout is not None:
            self._check_payout(s.expect_payout)
        if s.expect_gap:
            self._check_gap()
        elif self.findings:
            self.problems.append("audit reports " + "; ".join(self.findings))

    def _check_payout(self, expected: PayoutExpectation) -> None:
        """Rows 8-10: SimPay's payout and webhooks against the invocation's handoff, parking and completions."""
        if self.payouts != 1:
            self.problems.append(f"{self.payouts} payout(s) at SimPay, expected 1")
        payout = self.provider_payout_id
        if payout is None or self.external_reference != payout:
            self.problems.append(f"the handoff's reference {self.external_reference} is not SimPay's payout {payout}")
        if self.payout_status != expected.simpay_status:
            self.problems.append(f"SimPay's payout is {self.payout_status}, expected {expected.simpay_status}")
        taken = tuple((w["type"], w["answer"]) for w in self.webhooks if _taken(w))
        if taken != expected.taken:
            self.problems.append(f"fencepost took the webhooks {_shown(taken)}, expected {_shown(expected.taken)}")
        refused = [w for w in self.webhooks if not _taken(w) and w["answer"] not in RETRY_LATER]
        if refused:
            w = refused[0]
            self.problems.append(f"a {w['type']} webhook was answered {w['answer_status']} {w['answer']}, "
                                 "not taken nor deferred")
        if self.parked_at is None:
            self.problems.append("the invocation never parked (no parked_at)")
        if self.completion_outcome != "completed" or self.completion_reference != payout:
            self.problems.append(f"the recorded completion is {self.completion_outcome} of "
                                 f"{self.completion_reference}, expected the first one, completed, of {payout}")
        if expected.contradicted and self.contradiction != ("completed", "failed"):
            self.problems.append("no ExternalOperationContradicted event with the first (completed) and the second "
                                 "(failed) completion")
        if not expected.contradicted and self.contradiction is not None:
            self.problems.append("an unexpected ExternalOperationContradicted event")
        if expected.swept:
            if self.overdue_at is None:
                self.problems.append("the sweep did not set overdue_at")
            if self.status_before_late_webhook != str(InvocationStatus.RECONCILIATION_REQUIRED):
                self.problems.append(f"before the late webhook it was {self.status_before_late_webhook}, expected "
                                     "reconciliation_required")
            early = [w for w in self.webhooks if self.overdue_at is None or w["sent_at"] <= self.overdue_at]
            if early:
                self.problems.append(f"a webhook was sent at {early[0]['sent_at']}, before the sweep "
                                     f"({self.overdue_at})")
        elif self.overdue_at is not None:
            self.problems.append(f"the sweep set overdue_at {self.overdue_at}, expected the webhook on time")

    def _check_gap(self) -> None:
        """Row 13: the evidence that survived the refused checkpoint, and exactly the gap audit must report."""
        if self.settled_by != SETTLED_BY_FALLBACK:
            self.problems.append(f"settled by {self.settled_by or 'the atomic unit'}, expected {SETTLED_BY_FALLBACK}")
        charge = self.provider_charge_id
        if charge is None:
            self.problems.append("no charge at SimPay to find in the evidence")
        else:
            if self.event_charge_id != charge:
                self.problems.append(f"no AdapterInvocationSucceeded event with SimPay's charge {charge}")
            if self.verdict_charge_id != charge:
                self.problems.append(f"the verdict does not carry SimPay's charge {charge}")
        if "applied_effect" not in self.reconciliations:
            self.problems.append("no applied_effect reconciliation record")
        key = self.adapter_invocation_id
        gap = [f for f in self.findings if key is not None and key in f and "is still running" in f]
        if len(gap) != 1 or len(self.findings) != 1:
            shown = "; ".join(self.findings) or "nothing"
            self.problems.append(f"audit reports {shown}, expected exactly the missing checkpoint of {key}")

    def as_json(self) -> dict[str, Any]:
        s = self.scenario
        return {"scenario": s.number, "title": s.title, "action": s.action, "mode": s.mode,
                "invocation_id": self.invocation_id, "status": self.status, "reason": self.reason,
                "attempt_count": self.attempt_count, "adapter_invocation_id": self.adapter_invocation_id,
                "simpay_charges": self.charges, "simpay_calls": self.calls, "events": self.events,
                "simpay_charge_id": self.provider_charge_id, "event_charge_id": self.event_charge_id,
                "verdict_charge_id": self.verdict_charge_id, "settled_by": self.settled_by,
                "reconciliations": self.reconciliations, "audit_findings": self.findings,
                "simpay_payouts": self.payouts, "simpay_payout_id": self.provider_payout_id,
                "simpay_payout_status": self.payout_status, "simpay_webhooks": self.webhooks,
                "external_reference": self.external_reference, "parked_at": self.parked_at,
                "overdue_at": self.overdue_at, "completion_outcome": self.completion_outcome,
                "completion_reference": self.completion_reference,
                "status_before_late_webhook": self.status_before_late_webhook,
                "contradiction": list(self.contradiction) if self.contradiction else None,
                "expected": {"status": s.expect_status, "charges": s.expect_charges, "calls": s.expect_calls,
                             "reason": s.expect_reason, "audit_gap": s.expect_gap,
                             "payout": None if s.expect_payout is None else {
                                 "taken": [list(t) for t in s.expect_payout.taken],
                                 "simpay_status": s.expect_payout.simpay_status,
                                 "contradicted": s.expect_payout.contradicted, "swept": s.expect_payout.swept}},
                "holds": self.holds, "problems": self.problems}


def _taken(webhook: Mapping[str, Any]) -> bool:
    status = webhook.get("answer_status")
    return isinstance(status, int) and 200 <= status < 300


def _shown(taken: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{kind} -> {answer}" for kind, answer in taken) or "none"


def _iso(instant: datetime | None) -> str | None:
    """An instant as SimPay's ledger writes its own (``%Y-%m-%dT%H:%M:%S.%fZ``), so the two compare as text."""
    return None if instant is None else instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Report:
    """The demo's outcome: one row per scenario, where its files are, and whether every row held.

    ``stray_findings``: audit findings naming no row's invocation (each one makes the demo fail).
    """

    directory: Path
    database: str
    simpay_url: str
    rows: list[Row]
    seconds: float
    stray_findings: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return all(row.holds for row in self.rows) and not self.stray_findings

    def as_json(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "database": self.database, "simpay_url": self.simpay_url,
                "seconds": round(self.seconds, 1), "holds": self.holds, "stray_audit_findings": self.stray_findings,
                "rows": [r.as_json() for r in self.rows]}


def prepare(directory: Path) -> None:
    """Make ``directory`` an empty demo directory: create it, or clear an earlier run of the demo.

    Raises:
        InvalidInput: it exists, is not empty and is not the demo's (no marker file): nothing is deleted.
    """
    if directory.exists():
        if not directory.is_dir():
            raise InvalidInput(f"{directory} is not a directory")
        if any(directory.iterdir()) and not (directory / MARKER).is_file():
            raise InvalidInput(f"{directory} is not empty and not a payments demo directory: choose another --dir")
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / MARKER).write_text("a fencepost payments demo directory; the next run clears it\n")


class Workers:
    """The demo's ``fencepost worker`` subprocesses, each logging to a file of its own."""

    def __init__(self, directory: Path, database: str, simpay_url: str) -> None:
        self.directory = directory
        self.database = database
        self.simpay_url = simpay_url
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.started = 0

    def start(self, *, crashpoint: str | None = None) -> str:
        """Start a worker (armed with ``crashpoint`` if given); returns its name."""
        self.started += 1
        name = f"worker-{self.started}"
        env = {**os.environ, SIMPAY_URL_ENV: self.simpay_url, WORKER_ENV: "1", "FENCEPOST_WORKER_ID": name}
        env.pop("FENCEPOST_CRASHPOINT", None)
        if crashpoint:
            env["FENCEPOST_CRASHPOINT"] = crashpoint
        log = (self.directory / "logs" / f"{name}.log").open("wb")
        with log:
            self.running[name] = subprocess.Popen(
                [sys.executable, "-m", "fencepost.cli", "worker", "--database", self.database,
                 "--app", "fencepost.demo.payments:demo_host", "--lease-seconds", str(LEASE_SECONDS),
                 "--poll-interval", "0.1", "--grace-period", "2", "--work-dir", str(self.directory / "work"),
                 "--log-format", "text"], env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return name

    def dead(self) -> list[tuple[str, int]]:
        """Workers that have exited since the last call, with their return codes (-9: SIGKILLed)."""
        ended = [(name, p.returncode) for name, p in self.running.items() if p.poll() is not None]
        for name, _ in ended:
            del self.running[name]
        return ended

    def wait_exit(self, name: str, timeout: float) -> int | None:
        """The return code of worker ``name`` once it exits, or None after ``timeout`` seconds."""
        process = self.running[name]
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        del self.running[name]
        return code

    def stop_all(self) -> None:
        """SIGTERM every worker (a graceful stop), then SIGKILL what is still alive after 10 s."""
        for process in self.running.values():
            with _ignore_gone():
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        for process in self.running.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.running.clear()


class CompletionEndpoint:
    """The demo's ``fencepost serve --no-worker`` subprocess: the completion endpoint for SimPay's webhooks.

    It serves the demo's host (``--app``) with SimPay's secret from an environment variable and SimPay's parser
    from ``COMPLETION_PARSERS``, on a free loopback port, and runs no worker (the demo's worker subprocesses
    are the only ones, so the crash rows stay exact). Its output goes to ``logs/api.log``.
    """

    def __init__(self, directory: Path, database: str, simpay_url: str, secret: str) -> None:
        self.log = directory / "logs" / "api.log"
        env = {**os.environ, SIMPAY_URL_ENV: simpay_url, WEBHOOK_SECRET_ENV: secret,
               # a token of its own, so that serve prints none; the demo calls no token-guarded route
               "FENCEPOST_API_TOKEN": secrets.token_urlsafe(24)}
        env.pop("FENCEPOST_CRASHPOINT", None)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "fencepost.cli", "serve", "--database", database, "--host", "127.0.0.1",
                 "--port", "0", "--no-worker", "--app", "fencepost.demo.payments:demo_host",
                 "--completion-secret", f"{VENDOR}={WEBHOOK_SECRET_ENV}", "--log-format", "text"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.url: str | None = None

    def wait_ready(self, timeout: float = API_START_SECONDS) -> str:
        """The base URL once the server says it serves (``http://127.0.0.1:PORT/``).

        Raises:
            InvalidInput: it exited or did not start in time (its log is named).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+/)", self.log.read_text(errors="replace"))
            if found:
                self.url = found.group(1)
                return self.url
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise InvalidInput(f"the completion endpoint (fencepost serve) did not start: see {self.log}")

    def completion_url(self, provider: str) -> str:
        """Where ``provider`` POSTs its completions."""
        assert self.url is not None
        return f"{self.url}v1/host/completions/{provider}"

    def stop(self) -> None:
        """SIGTERM (a graceful stop), then SIGKILL after 10 s."""
        if self.process.poll() is None:
            with _ignore_gone():
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class _ignore_gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        return kind is not None and issubclass(kind, ProcessLookupError)


Progress = Callable[[str], None]


class PaymentsDemo:
    """Runs the scenarios (see the module docstring) and measures each one.

    Args:
        directory: the demo's own directory (cleared first, see ``prepare``).
        progress: called with one line of text per step, for a person watching.
    """

    def __init__(self, directory: Path, progress: Progress | None = None) -> None:
        self.directory = directory.resolve()
        self.progress = progress or (lambda line: None)
        self.database = f"sqlite:///{self.directory / 'fencepost-demo.db'}"

    def run(self) -> Report:
        """Run every scenario; returns the report (never raises for a scenario that does not hold).

        Raises:
            InvalidInput: the directory cannot be used. StoreUnavailable: the demo's database cannot be opened.
        """
        started = time.monotonic()
        prepare(self.directory)
        (self.directory / "logs").mkdir()
        store = open_store(self.database, create=True)
        store.migrate()
        secret = secrets.token_urlsafe(32)  # shared by SimPay and the endpoint only: a fresh one per run
        simpay = SimPay(self.directory / "simpay-ledger.db", slow_seconds=SLOW_SECONDS,
                        webhook_secret=secret).start()
        workers = Workers(self.directory, self.database, simpay.url)
        endpoint = CompletionEndpoint(self.directory, self.database, simpay.url, secret)
        rows = {s.number: Row(s) for s in SCENARIOS}
        try:
            host = build_host(store, simpay.url)
            endpoint.wait_ready()
            simpay.webhook_url = endpoint.completion_url(VENDOR)
            self.progress(f"SimPay at {simpay.url}; its webhooks go to {simpay.webhook_url} (fencepost serve)")
            self._plain(host, workers, rows)
            self._payouts(host, simpay, rows)
            self._conflict(host, simpay, rows)
            workers.stop_all()
            for scenario in SCENARIOS:
                if scenario.phase == "crash":
                    self._crash(host, workers, rows[scenario.number])
            self._poison(host, workers, rows[12])
            workers.stop_all()  # row 13 is inline: no worker may be around to take its invocation over
            self._store_fault(store, simpay, rows[13])
        finally:
            workers.stop_all()
            endpoint.stop()
            simpay.stop()
        try:
            findings = audit_store(store)
            for row in rows.values():
                self._measure(store, simpay, row)
                row.findings = [f.detail for f in findings if f.subject == row.invocation_id]
                row.check()
        finally:
            store.close()
        ours = {row.invocation_id for row in rows.values()}
        stray = [f"{f.check} {f.subject}: {f.detail}" for f in findings if f.subject not in ours]
        return Report(self.directory, self.database, simpay.url, list(rows.values()), time.monotonic() - started,
                      stray)

    # ── phases ──
    def _submit(self, host: Host, scenario: Scenario, *, amount: int = 1299,
                mode: Dispatch | Inline | None = None) -> InvocationView:
        params = {"order_id": f"order-{scenario.number}", "amount": amount, "mode": scenario.mode}
        return host.submit(scenario.action, params, actor="demo:cashier", authority="role:cashier",
                           idempotency_key=f"demo-{scenario.number}", tenant="demo", space="payments",
                           mode=mode or Dispatch())

    def _settle(self, host: Host, row: Row, view: InvocationView, timeout: float = SETTLE_TIMEOUT_SECONDS,
                tick: Callable[[], None] | None = None) -> None:
        row.invocation_id = view.id
        deadline = time.monotonic() + timeout
        while not view.status.terminal and time.monotonic() < deadline:
            if tick is not None:
                tick()
            time.sleep(0.1)
            view = host.get(view.id)
        row.status = str(view.status) if view.status.terminal else f"still {view.status}"
        self.progress(f"  {row.scenario.number:>2}. {row.scenario.title}: {row.status}")

    def _plain(self, host: Host, workers: Workers, rows: dict[int, Row]) -> None:
        self.progress("two workers, one invocation per scenario")
        workers.start()
        workers.start()
        plain = [s for s in SCENARIOS if s.phase in ("plain", "payout")]
        views = [self._submit(host, s) for s in plain]
        for scenario, view in zip(plain, views, strict=True):
            self._settle(host, rows[scenario.number], view)

    def _payouts(self, host: Host, simpay: SimPay, rows: dict[int, Row]) -> None:
        """Rows 8-10 after their first verdict: wait for SimPay's remaining webhooks (row 8's repeat, row 9's
        contradiction); for row 10, swept by now, have SimPay settle the payout: its late webhook."""
        payout_rows = [rows[s.number] for s in SCENARIOS if s.phase == "payout"]
        if not simpay.wait_for_webhooks(SETTLE_TIMEOUT_SECONDS):
            for row in payout_rows:
                row.problems.append("SimPay was still delivering webhooks")
        for row in payout_rows:
            if row.invocation_id is None:
                continue
            view = host.get(row.invocation_id)
            expected = row.scenario.expect_payout
            if expected is not None and expected.swept:
                row.status_before_late_webhook = str(view.status)
                reference = view.steps[0].external_reference if view.steps else None
                if reference is None:
                    row.problems.append("no handoff reference to deliver a late webhook for")
                else:
                    self.progress(f"  {row.scenario.number}. the sweep settled it {view.status}; now SimPay "
                                  f"delivers the late webhook of {reference}")
                    code = simpay.settle_payout(reference, "paid")
                    self.progress(f"      fencepost answered {code}")
                view = host.get(row.invocation_id)
            row.status = str(view.status)
            self.progress(f"  {row.scenario.number:>2}. {row.scenario.title}: {row.status} (after SimPay's webhooks)")

    def _conflict(self, host: Host, simpay: SimPay, rows: dict[int, Row]) -> None:
        """Row 1's key with another amount, while every worker is idle: whatever SimPay sees meanwhile is
        this submission's doing."""
        row = rows[11]
        first = next(s for s in SCENARIOS if s.number == 1)
        charges, calls = len(simpay.ledger.charges()), len(simpay.ledger.calls())
        try:
            view = self._submit(host, first, amount=99_999)
        except IdempotencyConflict as refused:
            row.status, row.reason = REFUSED, str(refused)
        else:
            row.status = f"accepted as {view.id}"
        time.sleep(1.0)  # long enough for an idle worker to claim and call, had anything been enqueued
        row.charges = len(simpay.ledger.charges()) - charges
        row.calls = len(simpay.ledger.calls()) - calls
        self.progress(f"  11. {row.scenario.title}: {row.status} ({row.reason})")

    def _crash(self, host: Host, workers: Workers, row: Row) -> None:
        scenario = row.scenario
        self.progress(f"one worker armed to die at {CRASHPOINT}")
        armed = workers.start(crashpoint=CRASHPOINT)
        view = self._submit(host, scenario)
        code = workers.wait_exit(armed, SETTLE_TIMEOUT_SECONDS)
        if code != -signal.SIGKILL:
            row.problems.append(f"the armed worker did not die at the crash point (exit {code})")
            workers.stop_all()
        else:
            self.progress(f"  {armed} SIGKILLed after SimPay charged; a new worker takes over when the lease expires")
        workers.start()
        self._settle(host, row, view)
        workers.stop_all()

    def _poison(self, host: Host, workers: Workers, row: Row) -> None:
        self.progress("a poison invocation: its handler SIGKILLs the worker that claims it")
        workers.start()
        view = self._submit(host, row.scenario)
        kills = 0

        def restart() -> None:
            nonlocal kills
            for name, code in workers.dead():
                kills += 1
                self.progress(f"  {name} died (exit {code}); starting another")
                workers.start()

        self._settle(host, row, view, timeout=POISON_TIMEOUT_SECONDS, tick=restart)
        self.progress(f"  {kills} killed worker(s); the next claim found the recovery budget spent and ended it "
                      "(the verdict's n/max is that claim's number over the budget)")

    def _store_fault(self, store: Store, simpay: SimPay, row: Row) -> None:
        """Row 13, inline in this process once every worker has stopped: the same demo host over the demo's store,
        wrapped so that each checkpoint write of the step fails (``CHECKPOINT_REFUSED``). SimPay charges; the
        host settles by the verdict-first fallback and raises ``RecoverableFinalization`` with the verdict
        durable, because the fallback's own checkpoint write failed too (the gap audit reports)."""
        self.progress("inline, through a store that refuses the step's checkpoint write (injected fault)")
        faulty = FaultInjectingStore(store, plan=CHECKPOINT_REFUSED)
        sink = _Shown(self.progress)  # the evidence failure is reported in the demo's output, not as a stray log line
        try:
            view = self._submit(build_host(faulty, simpay.url, telemetry=sink), row.scenario, mode=Inline())
        except RecoverableFinalization as raised:
            if raised.invocation_id is None or not raised.verdict_durable:
                row.problems.append(f"the host raised {raised} without a durable verdict")
            row.invocation_id = raised.invocation_id
            self.progress(f"  the verdict is durable, an evidence write failed: {raised}")
        else:
            row.invocation_id = view.id
            row.problems.append("the host reported no failed evidence write")
        faulty.disarm()
        if row.invocation_id is not None:
            row.status = str(build_view(store, row.invocation_id).status)
        self.progress(f"  13. {row.scenario.title}: {row.status} ({faulty.fired} checkpoint write(s) refused)")

    # ── measurement ──
    def _measure(self, store: Any, simpay: SimPay, row: Row) -> None:
        if row.invocation_id is None:
            return  # a refused submission: measured around it (``_conflict``)
        view = build_view(store, row.invocation_id)
        row.reason = view.error or row.reason
        row.attempt_count = view.attempt_count
        row.settled_by = (view.reconciliation or {}).get("settled_by")
        row.verdict_charge_id = _charge_id((view.reconciliation or {}).get("output"))
        if view.steps:
            key = view.steps[0].adapter_invocation_id
            row.adapter_invocation_id = key
            row.external_reference = view.steps[0].external_reference
            charge = simpay.ledger.find("charge", key=key)
            row.charges = 1 if charge is not None else 0
            row.provider_charge_id = charge["id"] if charge is not None else None
            row.calls = sum(1 for call in simpay.ledger.calls() if call["idempotency_key"] == key)
            payout = simpay.ledger.find("payout", key=key)
            row.payouts = 1 if payout is not None else 0
            if payout is not None:
                row.provider_payout_id, row.payout_status = payout["id"], payout["status"]
                row.webhooks = [{name: w[name] for name in ("type", "attempt", "answer_status", "answer", "sent_at")}
                                for w in simpay.ledger.webhooks(payout["id"])]
        record = store.read(lambda tx: tx.host.get_invocation(view.id))
        row.parked_at, row.overdue_at = _iso(record.parked_at), _iso(record.overdue_at)
        completion = record.external_completion or {}
        row.completion_outcome = completion.get("outcome")
        row.completion_reference = completion.get("external_reference")
        events = lifecycle_events(store, view)
        row.events = [e.type for e in events]
        contradiction = next((e.payload for e in events if e.type == "ExternalOperationContradicted"), None)
        if contradiction is not None:
            row.contradiction = ((contradiction.get("first") or {}).get("outcome"),
                                 (contradiction.get("second") or {}).get("outcome"))
        row.event_charge_id = next((_charge_id(e.payload.get("output")) for e in events
                                    if e.type == "AdapterInvocationSucceeded"), None)
        row.reconciliations = [str(r.kind) for r in store.read(lambda tx: tx.host.list_reconciliations(view.id))]


class _Shown:
    """Row 13's telemetry sink: each evidence emission becomes a progress line (status changes are in the table)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        if name != STATUS:
            shown = ", ".join(f"{k}={v}" for k, v in attributes.items() if k != "invocation_id")
            self.progress(f"  telemetry: {name} ({shown})")


def _charge_id(output: Any) -> str | None:
    """The ``id`` of a SimPay charge as the adapter returned it, or None."""
    found = output.get("id") if isinstance(output, dict) else None
    return found if isinstance(found, str) else None


def build_view(store: Any, invocation_id: str) -> InvocationView:
    """The invocation as ``Host.get`` shows it, read without a host's actions (any store will do)."""
    from fencepost.host.service import view

    def read(tx: Any) -> InvocationView:
        record = tx.host.get_invocation(invocation_id)
        return view(record, tx.host.list_adapter_invocations(invocation_id))

    found: InvocationView = store.read(read)
    return found


def lifecycle_events(store: Any, invocation: InvocationView) -> list[Any]:
    """The lifecycle events (``type``, ``subject``, ``payload``) recorded for ``invocation`` and its steps, in
    order."""

    def read(tx: Any) -> list[Any]:
        return invocation_events(tx, tenant_id=invocation.tenant_id, space_id=invocation.space_id,
                                 invocation_id=invocation.id,
                                 adapter_ids=[s.adapter_invocation_id for s in invocation.steps], state_bound=False)

    found: list[Any] = store.read(read)
    return found

