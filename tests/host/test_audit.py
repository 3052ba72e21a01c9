"""``fencepost audit`` learns the host's invariants (issue 12): a sound run has no finding; each damage is found; a
terminal verdict's evidence gap (host-spec K8, ADR 0032) is a finding, also in the CLI's output; a parked, swept
or settled handoff is consistent and each handoff damage is a finding (host-spec N8, ADR 0034)."""

from __future__ import annotations

import json

from fencepost.core.statuses import AdapterStatus, CommandStatus, InvocationStatus, ReconciliationLog
from fencepost.store.base import Store
from fencepost.store.host_records import InvocationVerdict, NewEvent, Subject
from fencepost.store.records import Lease
from fencepost.testing import host as hc
from helpers.processes import run_cli
from helpers.store_backends import StoreBackend, schema_url
from helpers.store_reads import update_past_checks
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host, run_worker


def findings(store: Store) -> set[str]:
    return {f.check for f in store.read(lambda tx: tx.audit.invariant_findings())}


def test_host_runs_leave_no_finding_and_damage_is_found(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    done = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="done")
    run_worker(host, backend)
    assert host.get(done.id).status == "succeeded" and findings(store) == set()
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="queued-2")
    store.transact(lambda tx: backend.inspect(
        tx, f"UPDATE invocations SET status = 'succeeded' WHERE id = '{queued.id}'"))
    assert {"invocation_command_status", "invocation_verdict_event"} <= findings(store)
    store.transact(lambda tx: backend.inspect(tx, f"UPDATE invocations SET status = 'pending' WHERE id = '{done.id}'"))
    assert "invocation_steps" in findings(store)


# ── evidence gaps of terminal verdicts (host-spec K8; ADR 0032) ──
GAPS = "invocation_evidence_gaps"


def step_event(store: Store, event_id: str, adapter_id: str, type_: str,
               subject_type: str = "AdapterInvocation") -> None:
    assert store.transact(lambda tx: tx.events.append_event(NewEvent(
        event_id, hc.TENANT, hc.SPACE, Subject(subject_type, adapter_id), type_)))


def settled_with(store: Store, invocation_id: str, verdict: InvocationStatus,
                 steps: list[tuple[str, AdapterStatus]]) -> None:
    """An invocation run under a lease whose adapter rows end in ``steps``' statuses, then settled ``verdict``;
    no event or reconciliation entry is written: each test adds the evidence it keeps."""
    lease = hc.running(store, invocation_id, 600)
    for index, (adapter_id, status) in enumerate(steps):
        assert hc.create(store, invocation_id, lease, adapter_id, step_index=index, step_name=f"step{index}")
        if status is not AdapterStatus.RUNNING:
            assert hc.update(store, invocation_id, lease, adapter_id, status)
    assert store.transact(lambda tx: tx.host.update_leased_invocation(
        invocation_id, lease, InvocationVerdict(verdict, error="x")))


def gaps(store: Store) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in store.read(lambda tx: tx.audit.invariant_findings()):
        if f.check == GAPS:
            found.setdefault(f.subject, []).append(f.detail)
    return {subject: sorted(details) for subject, details in found.items()}


def test_each_evidence_gap_of_a_terminal_verdict_is_a_finding(store: Store) -> None:
    # a. a row still running under a verdict
    settled_with(store, "inv_running", InvocationStatus.FAILED, [("ai_running", AdapterStatus.RUNNING)])
    # b. an ambiguous row with its governance entry but no AdapterInvocationAmbiguous event
    settled_with(store, "inv_no_event", InvocationStatus.RECONCILIATION_REQUIRED,
                 [("ai_no_event", AdapterStatus.AMBIGUOUS)])
    assert hc.append(store, hc.reconciliation("rc_b", "inv_no_event", adapter_invocation_id="ai_no_event"))
    # c. an ambiguous row with its event but only a completion-log entry (the governance one is missing)
    settled_with(store, "inv_no_record", InvocationStatus.RECONCILIATION_REQUIRED,
                 [("ai_no_record", AdapterStatus.AMBIGUOUS)])
    step_event(store, "ev_c", "ai_no_record", "AdapterInvocationAmbiguous")
    assert hc.append(store, hc.reconciliation("rc_c", "inv_no_record", adapter_invocation_id="ai_no_record",
                                              log=ReconciliationLog.COMPLETION))
    # d. a succeeded row whose only success event is about another subject type
    settled_with(store, "inv_no_success", InvocationStatus.SUCCEEDED, [("ai_no_success", AdapterStatus.SUCCEEDED)])
    step_event(store, "ev_d", "ai_no_success", "AdapterInvocationSucceeded", subject_type="ActionInvocation")
    assert gaps(store) == {
        "inv_running": ["evidence gap: adapter invocation ai_running (step step0) is still running under a failed "
                        "verdict"],
        "inv_no_event": ["evidence gap: adapter invocation ai_no_event (step step0) is ambiguous without an "
                         "AdapterInvocationAmbiguous event"],
        "inv_no_record": ["evidence gap: adapter invocation ai_no_record (step step0) is ambiguous without a "
                          "governance reconciliation record"],
        "inv_no_success": ["evidence gap: adapter invocation ai_no_success (step step0) succeeded without an "
                           "AdapterInvocationSucceeded or ExternalOperationAccepted event"]}


def test_a_consistent_or_open_invocation_has_no_evidence_gap(store: Store) -> None:
    settled_with(store, "inv_ok", InvocationStatus.RECONCILIATION_REQUIRED,
                 [("ai_ok_0", AdapterStatus.SUCCEEDED), ("ai_ok_1", AdapterStatus.SUCCEEDED),
                  ("ai_ok_2", AdapterStatus.AMBIGUOUS), ("ai_ok_3", AdapterStatus.FAILED)])
    step_event(store, "ev_0", "ai_ok_0", "AdapterInvocationSucceeded")
    step_event(store, "ev_1", "ai_ok_1", "ExternalOperationAccepted")
    step_event(store, "ev_2", "ai_ok_2", "AdapterInvocationAmbiguous")
    assert hc.append(store, hc.reconciliation("rc_2", "inv_ok", adapter_invocation_id="ai_ok_2"))
    # an open invocation's running and ambiguous rows are work in progress, not gaps
    lease = hc.running(store, "inv_open", 600)
    assert hc.create(store, "inv_open", lease, "ai_open_0")
    assert hc.create(store, "inv_open", lease, "ai_open_1", step_index=1)
    assert hc.update(store, "inv_open", lease, "ai_open_1", AdapterStatus.AMBIGUOUS)
    assert gaps(store) == {}
    # the same consistent invocation loses one piece of evidence: now it is a gap
    settled_with(store, "inv_lost", InvocationStatus.SUCCEEDED, [("ai_lost", AdapterStatus.SUCCEEDED)])
    assert list(gaps(store)) == ["inv_lost"]


def test_fencepost_audit_prints_the_evidence_gap(store: Store, backend: StoreBackend) -> None:
    settled_with(store, "inv_gap", InvocationStatus.RECONCILIATION_REQUIRED, [("ai_gap", AdapterStatus.AMBIGUOUS)])
    step_event(store, "ev_gap", "ai_gap", "AdapterInvocationAmbiguous")
    url = schema_url(backend.schema) if backend.schema is not None else backend.url
    ran = run_cli(["audit", "-d", url])
    assert ran.returncode == 1, ran.describe()
    assert ("FINDING invocation_evidence_gaps: inv_gap: evidence gap: adapter invocation ai_gap (step step0) is "
            "ambiguous without a governance reconciliation record") in ran.stdout, ran.describe()
    report = json.loads(run_cli(["audit", "--json", "-d", url]).stdout)
    assert [f for f in report["findings"] if f["check"] == GAPS] == [{
        "check": GAPS, "subject": "inv_gap", "detail": "evidence gap: adapter invocation ai_gap (step step0) is "
                                                       "ambiguous without a governance reconciliation record"}]


# ── external completion handoffs (host-spec N2, N8, N19, N20; ADR 0034) ──
HANDOFF_CHECKS = ("invocation_command_status", "invocation_handoffs")


def handoff_findings(store: Store) -> dict[str, list[str]]:
    """``subject -> sorted details`` of the two checks a handoff's state answers to."""
    found: dict[str, list[str]] = {}
    for f in store.read(lambda tx: tx.audit.invariant_findings()):
        if f.check in HANDOFF_CHECKS:
            found.setdefault(f.subject, []).append(f"{f.check}: {f.detail}")
    return {subject: sorted(details) for subject, details in found.items()}


def handed_off(store: Store, backend: StoreBackend, invocation_id: str, *, parked: bool,
               lease_seconds: float = 600) -> Lease:
    """A running invocation with a due handoff, parked (its command finished DELIVERED) when ``parked``."""
    lease = hc.running(store, invocation_id, lease_seconds)
    assert hc.hand_off(store, invocation_id, lease, hc.handoff(f"po_{invocation_id}",
                                                               due_at=hc.store_now(store)))
    if parked:
        assert hc.park(store, invocation_id, lease)
    return lease


def sweep(store: Store, invocation_id: str) -> None:
    """The sweep's verdict on ``invocation_id``: reconciliation_required with overdue_at (N12)."""
    record = hc.invocation(store, invocation_id)
    assert hc.unleased(store, invocation_id, InvocationStatus.RUNNING, hc.verdict_of(
        record, status=InvocationStatus.RECONCILIATION_REQUIRED, error="did not complete by its deadline",
        overdue_at=hc.store_now(store)))


def settle(store: Store, invocation_id: str, status: InvocationStatus) -> None:
    """A callback's settlement of ``invocation_id`` from its current status, keeping its instants."""
    record = hc.invocation(store, invocation_id)
    assert hc.unleased(store, invocation_id, record.status, hc.verdict_of(
        record, status=status, result={"paid": True}, pending_completion=None,
        external_completion={"outcome": "completed"}))


def past_the_check(store: Store, backend: StoreBackend, invocation_id: str, assignment: str) -> None:
    """``UPDATE invocations SET <assignment>`` on one row past the CHECKs that refuse it (a row edited behind the
    store's back: SQLite ignores CHECKs for the statement, PostgreSQL drops the named constraint first)."""
    update = f"UPDATE invocations SET {assignment} WHERE id = '{invocation_id}'"

    store.transact(lambda tx: update_past_checks(backend, tx, update, "invocations_parked_needs_handoff"))


def test_parked_swept_and_settled_handoffs_are_consistent(store: Store, backend: StoreBackend) -> None:
    handed_off(store, backend, "inv_parked", parked=True)  # running, command DELIVERED
    handed_off(store, backend, "inv_settled", parked=True)
    settle(store, "inv_settled", InvocationStatus.SUCCEEDED)
    handed_off(store, backend, "inv_late", parked=True)  # parked, swept, then settled by a late callback (N19)
    sweep(store, "inv_late")
    settle(store, "inv_late", InvocationStatus.FAILED)
    handed_off(store, backend, "inv_evidence", parked=False, lease_seconds=backend.short_lease)
    handed_off(store, backend, "inv_running", parked=False)  # still executing under its lease
    backend.advance(backend.short_lease + (0.05 if backend.clock is None else 1.0))
    sweep(store, "inv_evidence")  # swept unparked: the verdict is kept, evidence only (N20)
    record = hc.invocation(store, "inv_evidence")
    assert hc.unleased(store, "inv_evidence", InvocationStatus.RECONCILIATION_REQUIRED, hc.verdict_of(
        record, pending_completion=None, external_completion={"outcome": "completed"}))
    assert handoff_findings(store) == {}


def test_each_handoff_damage_is_a_finding(store: Store, backend: StoreBackend) -> None:
    # settled after a sweep without having parked (N8's invariant): the store writes it, the audit finds it
    handed_off(store, backend, "inv_unparked", parked=False, lease_seconds=backend.short_lease)
    backend.advance(backend.short_lease + (0.05 if backend.clock is None else 1.0))
    sweep(store, "inv_unparked")
    settle(store, "inv_unparked", InvocationStatus.SUCCEEDED)
    # parked but its command still held: the park's unit did not finish it
    lease = hc.running(store, "inv_half_parked", 600)
    assert hc.hand_off(store, "inv_half_parked", lease, hc.handoff("po_half"))
    assert hc.park(store, "inv_half_parked", lease, deliver=False)
    # a parked one given a verdict behind the store's back: a terminal verdict still needs a finished command
    lease = hc.running(store, "inv_terminal", 600)
    assert hc.hand_off(store, "inv_terminal", lease, hc.handoff("po_terminal"))
    assert hc.park(store, "inv_terminal", lease, deliver=False)
    store.transact(lambda tx: backend.inspect(
        tx, "UPDATE invocations SET status = 'succeeded' WHERE id = 'inv_terminal'"))
    # running, not parked, with its command finished: nobody will run it
    lease = hc.running(store, "inv_dropped", 600)
    store.transact(lambda tx: tx.outbox.finish(lease, CommandStatus.DELIVERED))
    # parked_at without a handoff, past the CHECK
    hc.dispatched(store, "inv_no_handoff")
    past_the_check(store, backend, "inv_no_handoff", "parked_at = updated_at")
    # marked overdue but still running: the sweep's verdict never came with it
    lease = hc.running(store, "inv_overdue_running", 600)
    assert hc.hand_off(store, "inv_overdue_running", lease, hc.handoff("po_overdue"))
    assert hc.park(store, "inv_overdue_running", lease)
    store.transact(lambda tx: backend.inspect(
        tx, "UPDATE invocations SET overdue_at = updated_at WHERE id = 'inv_overdue_running'"))
    assert handoff_findings(store) == {
        "inv_unparked": ["invocation_handoffs: succeeded invocation carries overdue_at without parked_at (settled "
                         "after a sweep without having parked)"],
        "inv_half_parked": ["invocation_command_status: invocation running and parked but command PROCESSING"],
        "inv_terminal": ["invocation_command_status: invocation succeeded but command PROCESSING",
                         "invocation_handoffs: succeeded invocation with a handoff that did not park or has no "
                         "completion on record"],
        "inv_dropped": ["invocation_command_status: invocation running but command DELIVERED"],
        "inv_no_handoff": ["invocation_handoffs: parked_at, overdue_at or completion_due_at without a handoff"],
        "inv_overdue_running": ["invocation_handoffs: running invocation carries overdue_at (the sweep settles what "
                                "it marks)"]}
