"""The action host when the store fails while it records an outcome (host-spec K, L1-L3, M, J8; ADR 0031), on
every backend: the atomic settlement and its one retry, the verdict-first fallback and its independent evidence
writes, the post-success marker path, and what each leaves for recovery and for ``fencepost audit``.

Faults are injected by query name and occurrence (``FaultInjectingStore(plan=...)``) inside the real
transactions of a real SQLite file or PostgreSQL database; commit order is read from the units that committed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from fencepost.core.errors import LeaseLost, RecoverableFinalization, StoreUnavailable
from fencepost.core.statuses import AdapterStatus, InvocationStatus, ReconciliationKind
from fencepost.host import Ambiguous, Inline
from fencepost.host.adapter import AdapterCall
from fencepost.host.finalization import SETTLED_BY_FALLBACK
from fencepost.host.telemetry import EVIDENCE_FAILED, EVIDENCE_REFUSED, STATUS
from fencepost.store.audit import audit_store
from fencepost.store.base import Store, StoreBusy
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.host_records import VerdictHeld
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, events_of, make_host, run_worker


class Recorder:
    """A telemetry sink that keeps every emission."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        self.emitted.append((name, dict(attributes)))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [a for n, a in self.emitted if n == name]


def inline(faulty: FaultInjectingStore, adapter: Scripted, *, idempotent: bool = False,
           sink: Recorder | None = None, lease: float = 30.0,
           key: str = "k") -> tuple[Any, str, RecoverableFinalization | None]:
    """Submit inline through ``faulty``; (host, invocation id, the RecoverableFinalization raised or None).
    ``lease``: the caller lease (``backend.short_lease`` where a worker must take over later)."""
    host = make_host(faulty, charge_action(Spy(), idempotent=idempotent), adapter, lease=lease)
    if sink is not None:
        host.runtime = type(host.runtime)(actions=host.runtime.actions, adapters=host.runtime.adapters,
                                          telemetry=sink)
    raised = None
    try:
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=key, mode=Inline())
    except RecoverableFinalization as error:
        raised = error
    return host, host.list()[0].id, raised


def fence_out(store: Store) -> None:
    """Take the lease away from the running execution, as an operator's abort does on every backend (a takeover
    needs the lease to expire, which the inline caller's heartbeat prevents on PostgreSQL's real clock)."""
    [invocation] = store.read(lambda tx: tx.host.list_invocations())
    assert store.transact(lambda tx: tx.outbox.abort(invocation.id, "fenced out by the test"))


def reconciliations(store: Store, invocation_id: str) -> list[Any]:
    return store.read(lambda tx: tx.host.list_reconciliations(invocation_id))


def gaps(store: Store, invocation_id: str) -> list[str]:
    return [f.detail for f in audit_store(store) if f.subject == invocation_id]


def units(faulty: FaultInjectingStore, prefix: str) -> list[tuple[str | None, list[str]]]:
    return [(name, ran) for name, ran in faulty.committed if name is not None and name.startswith(prefix)]


WRITES = ("update_adapter_invocation", "insert_event", "insert_reconciliation", "update_leased_invocation",
          "finish_command")


def writes_of(backend: StoreBackend, ran: list[str]) -> list[str]:
    """The writes among the statements ``ran``. PostgreSQL's one-statement event append is named as the event
    insert it does; on SQLite it returns nothing and the insert follows it (ADR 0079)."""
    fused = {"append_event_fused": "insert_event"} if backend.is_postgres else {}
    return [fused.get(q, q) for q in ran if fused.get(q, q) in WRITES]


def event_insert(backend: StoreBackend) -> str:
    """The statement that inserts an event on ``backend`` (where a fault is planned to fail one)."""
    return "append_event_fused" if backend.is_postgres else "insert_event"


# ── K: unknown-outcome settlement ──

def test_unknown_outcome_atomic_order(backend: StoreBackend, ledger: Ledger) -> None:
    """K1: one unit writes the ambiguous checkpoint, its event, the reconciliation record, then the verdict (its
    event and the row) and the fence, in that order."""
    faulty = FaultInjectingStore(backend.migrated(), plan={})
    _, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset after send")))
    assert raised is None
    settled = units(faulty, "host.settle")
    assert [name for name, _ in settled] == ["host.settle"]
    assert writes_of(backend, settled[0][1]) == ["update_adapter_invocation", "insert_event", "insert_reconciliation",
                                        "insert_event", "update_leased_invocation", "finish_command"]
    [record] = reconciliations(faulty.inner, invocation_id)
    assert record.kind is ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS and record.adapter_invocation_id
    assert gaps(faulty.inner, invocation_id) == []


def test_atomic_rollback_then_one_retry_commits(backend: StoreBackend, ledger: Ledger) -> None:
    """K3, L8: the fence fails once: that unit leaves nothing (the row stays running until the retry); the one
    retry commits everything; no fallback mark."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"finish_command": {1}})
    host, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset after send")))
    assert raised is None and faulty.fired == 1
    assert [name for name, _ in units(faulty, "host.settle")] == ["host.settle"]
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert "settled_by" not in (view.reconciliation or {})
    assert view.steps[0].status is AdapterStatus.AMBIGUOUS and len(ledger.requests) == 1


def test_second_failure_takes_the_verdict_first_fallback_in_order(backend: StoreBackend, ledger: Ledger) -> None:
    """K3, K5: two failed atomic attempts; the fallback commits the verdict alone, then the checkpoint, the event
    and the record, each in its own unit; everything lands, so nothing is raised and audit is clean."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"finish_command": {1, 2}})
    sink = Recorder()
    host, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset after send")), sink=sink)
    assert raised is None
    settled = units(faulty, "host.settle.verdict") + units(faulty, "host.evidence")
    assert [name for name, _ in settled] == ["host.settle.verdict", "host.evidence", "host.evidence",
                                             "host.evidence"]
    assert writes_of(backend, settled[0][1]) == ["insert_event", "update_leased_invocation", "finish_command"]
    assert [writes_of(backend, ran) for _, ran in settled[1:]] == [["update_adapter_invocation"], ["insert_event"],
                                                         ["insert_reconciliation"]]
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert view.reconciliation is not None and view.reconciliation["settled_by"] == SETTLED_BY_FALLBACK
    assert view.steps[0].status is AdapterStatus.AMBIGUOUS
    assert gaps(faulty.inner, invocation_id) == []
    assert [a["status"] for a in sink.named(STATUS)] == ["running", "reconciliation_required"]


def test_lease_loss_no_retry_no_fallback(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """K4, M5: the lease is taken over during the call: exactly one settlement attempt, refused at its first
    lease-conditioned write; no verdict, no evidence, the row still running; the cause is LeaseLost."""
    faulty = FaultInjectingStore(store, plan={})

    def take_over(call: AdapterCall) -> None:
        fence_out(store)

    host, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset"), before=take_over),
                                         lease=backend.short_lease)
    assert raised is not None and isinstance(raised.cause, LeaseLost) and not raised.verdict_durable
    after_call = faulty.executed[faulty.executed.index("insert_adapter_invocation") + 1:]
    assert after_call.count("update_adapter_invocation") == 1  # one attempt, no retry
    assert units(faulty, "host.settle") == []
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RUNNING and view.steps[0].status is AdapterStatus.RUNNING
    assert reconciliations(store, invocation_id) == []


def test_checkpoint_failure_still_writes_event_and_record(backend: StoreBackend, ledger: Ledger) -> None:
    """K6, K8: the checkpoint fails in both atomic attempts and in the fallback: the verdict, the event and the
    record still land; RecoverableFinalization says the verdict is durable; the gap is final and audit names it."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"update_adapter_invocation": {1, 2, 3}})
    sink = Recorder()
    host, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset after send")), sink=sink)
    assert raised is not None and raised.verdict_durable and raised.invocation_id == invocation_id
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert view.steps[0].status is AdapterStatus.RUNNING  # the missing checkpoint
    types = [e.type for e in events_of(faulty.inner, invocation_id)]
    assert "AdapterInvocationAmbiguous" in types
    assert len(reconciliations(faulty.inner, invocation_id)) == 1
    [failed] = sink.named(EVIDENCE_FAILED)
    assert failed["evidence"] == "adapter_checkpoint" and failed["target"] == view.steps[0].adapter_invocation_id
    [gap] = gaps(faulty.inner, invocation_id)
    assert view.steps[0].adapter_invocation_id in gap and "running" in gap
    # K8: final. Direct execution returns the verdict; no worker claims it; the gap stays.
    assert host.execute(invocation_id).status is InvocationStatus.RECONCILIATION_REQUIRED
    backend.expire()
    assert run_worker(host, backend, faulty.inner) == 0
    assert gaps(faulty.inner, invocation_id) == [gap] and len(ledger.requests) == 1


def test_event_failure_does_not_skip_the_record(backend: StoreBackend, ledger: Ledger) -> None:
    """K7: the evidence event fails after the verdict: the record is still written, then the error is raised."""
    # the event insert: 1 = Started (claim), 2 and 3 = the two atomic attempts, 4 = the fallback's verdict event,
    # 5 = the evidence event.
    faulty = FaultInjectingStore(backend.migrated(), plan={event_insert(backend): {2, 3, 5}})
    host, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset after send")))
    assert raised is not None and raised.verdict_durable
    assert host.get(invocation_id).steps[0].status is AdapterStatus.AMBIGUOUS
    assert "AdapterInvocationAmbiguous" not in [e.type for e in events_of(faulty.inner, invocation_id)]
    assert len(reconciliations(faulty.inner, invocation_id)) == 1
    [gap] = gaps(faulty.inner, invocation_id)
    assert "AdapterInvocationAmbiguous" in gap


def test_no_unfenced_checkpoint_when_the_verdict_fails(backend: StoreBackend, ledger: Ledger) -> None:
    """K9, K10: both atomic attempts and both fallback verdicts fail: nothing more is written; the state equals a
    crash mid-call, and recovery settles the unknown outcome without calling the provider again."""
    # update_leased_invocation (inline: the invocation is inserted running): 1, 2 atomic; 3, 4 the fallback verdict.
    faulty = FaultInjectingStore(backend.migrated(), plan={"update_leased_invocation": {1, 2, 3, 4}})
    adapter = Scripted(ledger, Ambiguous("reset after send"))
    host, invocation_id, raised = inline(faulty, adapter, lease=backend.short_lease)
    assert raised is not None and not raised.verdict_durable
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RUNNING and view.steps[0].status is AdapterStatus.RUNNING
    assert "AdapterInvocationAmbiguous" not in [e.type for e in events_of(faulty.inner, invocation_id)]
    assert reconciliations(faulty.inner, invocation_id) == [] and units(faulty, "host.settle") == []
    faulty.disarm()
    backend.expire()  # the caller does not retry: its lease runs out and a worker takes over (A8)
    run_worker(host, backend)
    settled = host.get(invocation_id)
    assert settled.status is InvocationStatus.RECONCILIATION_REQUIRED and len(adapter.calls) == 1


# ── L: post-success degraded finalization ──

def test_marker_write_retried_once(backend: StoreBackend, ledger: Ledger) -> None:
    """L1: the success marker fails once: its retry records it and the invocation succeeds, one charge."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"update_adapter_invocation": {1}})
    host, invocation_id, raised = inline(faulty, Scripted(ledger))
    assert raised is None and faulty.fired == 1
    assert host.get(invocation_id).status is InvocationStatus.SUCCEEDED and len(ledger.requests) == 1


def test_marker_fails_twice_degraded_finalization(backend: StoreBackend, ledger: Ledger) -> None:
    """L2: the marker fails twice: reconciliation_required (applied effect) with the marker, the success event
    carrying the output and a reconciliation record, in one unit; the next step is not run."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"update_adapter_invocation": {1, 2}})
    host = make_host(faulty, charge_action(Spy(), steps=("charge", "ship")), Scripted(ledger))
    host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    view = host.list()[0]
    view = host.get(view.id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert view.reconciliation is not None and view.reconciliation["kind"] == "applied_effect"
    assert [s.status for s in view.steps] == [AdapterStatus.SUCCEEDED]  # marker written; "ship" never started
    [event] = [e for e in events_of(faulty.inner, view.id) if e.type == "AdapterInvocationSucceeded"]
    assert event.payload["output"] == {"charge_id": "ch_1"}
    [record] = reconciliations(faulty.inner, view.id)
    assert record.kind is ReconciliationKind.APPLIED_EFFECT and len(ledger.requests) == 1
    assert gaps(faulty.inner, view.id) == []


def test_marker_lost_everywhere_leaves_a_gap_audit_reports(backend: StoreBackend, ledger: Ledger) -> None:
    """L2, L10: the marker fails in the checkpoint (x2), the degraded unit (x2) and the fallback: the verdict and
    the success event (with its output) land; the missing marker is a final, reported gap."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"update_adapter_invocation": {1, 2, 3, 4, 5}})
    host, invocation_id, raised = inline(faulty, Scripted(ledger))
    assert raised is not None and raised.verdict_durable
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED and view.steps[0].status is AdapterStatus.RUNNING
    [event] = [e for e in events_of(faulty.inner, invocation_id) if e.type == "AdapterInvocationSucceeded"]
    assert event.payload["output"] == {"charge_id": "ch_1"}
    [gap] = gaps(faulty.inner, invocation_id)
    assert view.steps[0].adapter_invocation_id in gap


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "non-idempotent"])
def test_verdict_unsavable_after_success(backend: StoreBackend, ledger: Ledger, idempotent: bool) -> None:
    """L3: after the provider succeeded neither the marker nor any verdict can be saved: RecoverableFinalization,
    the row stays running. Recovery: idempotent re-sends under the same key (one charge); non-idempotent settles
    reconciliation_required without a call."""
    # the marker: 1, 2 the checkpoint, 3, 4 the degraded unit; the verdict: 1, 2 the fallback's.
    faulty = FaultInjectingStore(backend.migrated(), plan={"update_adapter_invocation": {1, 2, 3, 4},
                                                           "update_leased_invocation": {1, 2}})
    adapter = Scripted(ledger)
    host, invocation_id, raised = inline(faulty, adapter, idempotent=idempotent, lease=backend.short_lease)
    assert raised is not None and not raised.verdict_durable
    assert host.get(invocation_id).steps[0].status is AdapterStatus.RUNNING
    faulty.disarm()
    backend.expire()
    run_worker(host, backend)
    done = host.get(invocation_id)
    if idempotent:
        assert done.status is InvocationStatus.SUCCEEDED and len(adapter.calls) == 2
        assert len(ledger.charges) == 1 and ledger.requests[0] == ledger.requests[1]
    else:
        assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and len(adapter.calls) == 1


# ── J8, S3: telemetry after commit only ──

def test_no_status_telemetry_for_a_rolled_back_unit(backend: StoreBackend, ledger: Ledger) -> None:
    """J8: the success finalization's fence fails: no ``succeeded`` emission; a full happy path emits running and
    succeeded, once each (S3)."""
    sink = Recorder()
    faulty = FaultInjectingStore(backend.migrated(), plan={"finish_command": {1}})
    _, _, raised = inline(faulty, Scripted(ledger), sink=sink)
    assert raised is not None and [a["status"] for a in sink.named(STATUS)] == ["running"]
    happy = Recorder()
    inline(FaultInjectingStore(backend.migrated(), plan={}), Scripted(Ledger()), sink=happy, key="happy")
    assert [a["status"] for a in happy.named(STATUS)] == ["running", "succeeded"]


def test_handler_error_is_a_verdict_not_recoverable(backend: StoreBackend, ledger: Ledger) -> None:
    """M4: an ordinary handler error is ``failed``; RecoverableFinalization is not raised."""
    faulty = FaultInjectingStore(backend.migrated(), plan={})
    host = make_host(faulty, charge_action(Spy(raises=ValueError("no stock"))), Scripted(ledger))
    view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert view.status is InvocationStatus.FAILED and ledger.requests == []


def test_a_failed_verdict_never_takes_the_fallback(backend: StoreBackend, ledger: Ledger) -> None:
    """ADR 0031: a definite failure whose settlement fails twice raises, leaving the row as a crash would; a
    ``failed`` verdict is never written without its evidence."""
    from fencepost.host import PermanentFailure

    faulty = FaultInjectingStore(backend.migrated(), plan={"finish_command": {1, 2}})
    host, invocation_id, raised = inline(faulty, Scripted(ledger, PermanentFailure("card_declined"), charges=False))
    assert raised is not None and not raised.verdict_durable
    assert host.get(invocation_id).status is InvocationStatus.RUNNING and units(faulty, "host.settle") == []


def test_recoverable_is_public() -> None:
    """M3: importable from the package root, with its attributes."""
    from fencepost import RecoverableFinalization as Public

    error = Public("x", invocation_id="inv", verdict_durable=True)
    assert Public is RecoverableFinalization and error.invocation_id == "inv" and error.verdict_durable


class ChangesTheVerdict(Recorder):
    """A sink that, when the fallback's verdict is reported (after its commit, before any evidence write), has
    another decision change that verdict, as an operator's note would."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        super().emit(name, attributes)
        if name == STATUS and attributes["status"] == "reconciliation_required":
            invocation_id = attributes["invocation_id"]
            current = self.store.read(lambda tx: tx.host.get_invocation(invocation_id))
            assert current is not None
            held = VerdictHeld(current.status, current.error)
            assert self.store.transact(lambda tx: tx.host.update_settled_invocation(
                invocation_id, held, error="an operator's note", reconciliation=current.reconciliation))


def test_evidence_after_a_changed_verdict_is_refused_not_raised(backend: StoreBackend, ledger: Ledger) -> None:
    """K5, H18: each evidence write is conditioned on the verdict this execution wrote; once another decision
    changed it, every write refuses itself, says so in telemetry, and nothing is raised."""
    inner = backend.migrated()
    faulty = FaultInjectingStore(inner, plan={"finish_command": {1, 2}})
    sink = ChangesTheVerdict(inner)
    host, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset after send")), sink=sink)
    assert raised is None
    refused = [a["evidence"] for a in sink.named(EVIDENCE_REFUSED)]
    assert refused == ["adapter_checkpoint", "event", "reconciliation"]
    view = host.get(invocation_id)
    assert view.error == "an operator's note" and view.steps[0].status is AdapterStatus.RUNNING
    assert reconciliations(inner, invocation_id) == []


class LosesTheAcknowledgement(FaultInjectingStore):
    """The unit named ``unit`` commits, then the driver reports the connection lost (once): the server committed,
    the client does not know. ``StoreBusy`` makes ``Store.transact`` run the unit again, as a dropped PostgreSQL
    connection does."""

    def __init__(self, inner: Store, unit: str, error: type[Exception], plan: dict[str, set[int]]) -> None:
        super().__init__(inner, plan=plan)
        self.unit, self.lost_with, self.lost = unit, error, 0

    @contextmanager
    def transaction(self, *, write: bool = True, name: str | None = None) -> Iterator[Any]:
        with super().transaction(write=write, name=name) as tx:
            yield tx
        if name == self.unit and not self.lost:
            self.lost += 1
            raise self.lost_with("connection lost after COMMIT")


@pytest.mark.parametrize("error", [StoreUnavailable, StoreBusy], ids=["unavailable", "busy"])
@pytest.mark.parametrize(("unit", "plan"), [("host.settle", {}), ("host.settle.verdict", {"finish_command": {1, 2}})],
                         ids=["atomic", "fallback"])
def test_a_lost_commit_acknowledgement_is_read_back(backend: StoreBackend, ledger: Ledger, unit: str,
                                                    plan: dict[str, set[int]], error: type[Exception]) -> None:
    """The settlement's COMMIT lands but its acknowledgement is lost: the execution reads the verdict back, goes
    on with the evidence (fallback), reports the status once, raises nothing; the audit is clean."""
    faulty = LosesTheAcknowledgement(backend.migrated(), unit, error, plan)
    sink = Recorder()
    host, invocation_id, raised = inline(faulty, Scripted(ledger, Ambiguous("reset after send")), sink=sink)
    assert faulty.lost == 1 and raised is None
    view = host.get(invocation_id)
    assert view.status is InvocationStatus.RECONCILIATION_REQUIRED and view.steps[0].status is AdapterStatus.AMBIGUOUS
    assert [a["status"] for a in sink.named(STATUS)] == ["running", "reconciliation_required"]
    assert gaps(faulty.inner, invocation_id) == [] and len(ledger.requests) == 1


def test_a_lost_applied_effect_record_is_a_gap_audit_reports(backend: StoreBackend, ledger: Ledger) -> None:
    """K8 for the post-success path: the verdict and the marker land but the applied-effect reconciliation record
    does not: the audit names the adapter invocation the verdict points to."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"update_adapter_invocation": {1, 2, 3, 4},
                                                           "insert_reconciliation": {1}})
    host, invocation_id, raised = inline(faulty, Scripted(ledger))
    assert raised is not None and raised.verdict_durable
    view = host.get(invocation_id)
    assert view.reconciliation is not None and view.reconciliation["kind"] == "applied_effect"
    assert view.steps[0].status is AdapterStatus.SUCCEEDED and reconciliations(faulty.inner, invocation_id) == []
    [gap] = gaps(faulty.inner, invocation_id)
    assert "applied_effect" in gap and view.steps[0].adapter_invocation_id in gap
