"""``fencepost demo payments``: the action host against a real provider, real workers and real crashes.

The demo runs everything on loopback and embedded SQLite, in a directory of its own:

- SimPay, the local payment provider (``fencepost.demo.simpay``), with a ground-truth ledger in a SQLite file of
  its own, so that what the provider really did is measured, never taken from fencepost;
- real ``fencepost worker --app fencepost.demo.payments:demo_host`` subprocesses with 3 s leases;
- one invocation per scenario of host-spec §2.10 that the action host covers so far (rows 1-7, 11 and 12),
  and row 13 (issue 13): the provider charges, then the store refuses the checkpoint write.

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
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fencepost.core.errors import IdempotencyConflict, InvalidInput, RecoverableFinalization
from fencepost.core.statuses import InvocationStatus
from fencepost.demo.payments import RECOVERY_MAX_ATTEMPTS, SIMPAY_URL_ENV, WORKER_ENV, build_host
from fencepost.demo.simpay import SimPay
from fencepost.host.finalization import SETTLED_BY_FALLBACK
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
        if s.expect_gap:
            self._check_gap()
        elif self.findings:
            self.problems.append("audit reports " + "; ".join(self.findings))

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
                "expected": {"status": s.expect_status, "charges": s.expect_charges, "calls": s.expect_calls,
                             "reason": s.expect_reason, "audit_gap": s.expect_gap},
                "holds": self.holds, "problems": self.problems}


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
        simpay = SimPay(self.directory / "simpay-ledger.db", slow_seconds=SLOW_SECONDS).start()
        workers = Workers(self.directory, self.database, simpay.url)
        rows = {s.number: Row(s) for s in SCENARIOS}
        try:
            host = build_host(store, simpay.url)
            self._plain(host, workers, rows)
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
        plain = [s for s in SCENARIOS if s.phase == "plain"]
        views = [self._submit(host, s) for s in plain]
        for scenario, view in zip(plain, views, strict=True):
            self._settle(host, rows[scenario.number], view)

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
        self.progress(f"  the recovery budget ended it after {kills} killed worker(s)")

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
            charge = simpay.ledger.find("charge", key=key)
            row.charges = 1 if charge is not None else 0
            row.provider_charge_id = charge["id"] if charge is not None else None
            row.calls = sum(1 for call in simpay.ledger.calls() if call["idempotency_key"] == key)
        events = lifecycle_events(store, view)
        row.events = [e.type for e in events]
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
        events = tx.events.list_events(tenant_id=invocation.tenant_id, space_id=invocation.space_id)
        subjects = {invocation.id} | {s.adapter_invocation_id for s in invocation.steps}
        return [e for e in events if e.subject.subject_id in subjects]

    found: list[Any] = store.read(read)
    return found

