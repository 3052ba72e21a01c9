"""The tenant isolation checks for adapter rows (host-spec V; ADR 0040), themselves checked."""

from __future__ import annotations

from typing import Any

from events import broken_stores as b
from fencepost.core.statuses import AdapterStatus, InvocationStatus
from fencepost.events.conformance import EventAppendSubject, run_event_append_checks
from fencepost.events.fencepost_subject import FencepostAdapterRows, FencepostEventStore
from fencepost.events.isolation import TenantIsolationSubject, run_tenant_isolation_checks, tenant_isolation_checks
from fencepost.rehearsal.audit import audit
from fencepost.store.host_records import (
    AdapterScope,
    AdapterWrite,
    CreateAdapterRow,
    InvocationVerdict,
    LeaseHeld,
    NewAdapterRow,
    Subject,
)
from helpers.store_backends import StoreBackend


def test_fencepost_backends_pass_and_retire_their_probes(backend: StoreBackend) -> None:
    store = backend.migrated()
    rows = FencepostAdapterRows(store)
    result = run_tenant_isolation_checks(TenantIsolationSubject(rows, "probe-tenant"))
    assert result.passed, [(c.id, c.error) for c in result.checks]
    assert [c.id for c in result.checks] == [c.id for c in tenant_isolation_checks()] == [
        "adapter-read-scope", "adapter-write-scope"]
    assert len(rows.parents) == 3  # one parent for the read check, two for the write check
    rows.retire()
    statuses = {i.status for i in store.read(lambda tx: tx.host.list_invocations(tenant_id="probe-tenant"))}
    assert statuses == {InvocationStatus.FAILED}


def test_retired_probes_are_a_well_formed_history_that_audit_finds_sound(backend: StoreBackend) -> None:
    # A new-user trial: check-store tenant-isolation, then audit, found a failed verdict without its event and
    # the read check's row still running under it. A probe's history must pass every invariant a real one does.
    store = backend.migrated()
    rows = FencepostAdapterRows(store)
    assert run_tenant_isolation_checks(TenantIsolationSubject(rows, "probe-tenant")).passed
    parents = [invocation_id for invocation_id, _lease in rows.parents]
    rows.retire()
    assert [(f.check, f.subject, f.detail) for f in audit(store)] == []
    for invocation_id in parents:
        steps = store.read(lambda tx, i=invocation_id: tx.host.list_adapter_invocations(i))
        assert {a.status for a in steps} <= {AdapterStatus.FAILED}
        subjects = [Subject("ActionInvocation", invocation_id)] + [Subject("AdapterInvocation", a.id) for a in steps]
        space = store.read(lambda tx, i=invocation_id: tx.host.get_invocation(i)).space_id  # type: ignore[union-attr]
        events = [e for subject in subjects for e in store.read(lambda tx, s=subject, p=space: tx.events.list_events(
            tenant_id="probe-tenant", space_id=p, subject=s))]
        assert sorted(e.type for e in events) == ["ActionInvocationFailed"] + ["AdapterInvocationFailed"] * len(steps)
        # Never published (host-spec U30): a probe's event has no publication row to sit pending.
        assert all(store.read(lambda tx, e=e: tx.events.get_event_outbox(e.id)) is None for e in events)


def test_the_same_gaps_outside_a_probe_are_still_findings(backend: StoreBackend) -> None:
    # What the probes used to leave, written in an ordinary space by hand: audit must not have learnt to look
    # away from it (the fix is in the probe's history, not in the audit).
    store = backend.migrated()
    scope = AdapterScope("shop", "orders", "orders:invocation")
    lease = FencepostAdapterRows(store).create_probe_parent(scope)
    assert store.transact(lambda tx: tx.host.write_adapter_invocation(
        AdapterWrite(scope, CreateAdapterRow(NewAdapterRow(
        "orders:row", 0, "charge", "http", "charge", "acme", {})), LeaseHeld(lease))))
    assert store.transact(lambda tx: tx.host.update_leased_invocation(
        scope.invocation_id, lease, InvocationVerdict(InvocationStatus.FAILED, error="x")))
    found = {(f.check, f.subject) for f in audit(store)}
    assert {("invocation_verdict_event", scope.invocation_id),
            ("invocation_evidence_gaps", scope.invocation_id)} <= found


def test_scope_ignoring_store_fails_both_checks(backend: StoreBackend) -> None:
    broken = b.IgnoringScope(FencepostAdapterRows(backend.migrated()))
    result = run_tenant_isolation_checks(TenantIsolationSubject(broken, "probe-tenant"))
    assert not result.passed
    read, write = result.checks
    assert read.status == write.status == "failed"
    assert "ignoring scope: a read under another tenant" in (read.error or "")
    assert "ignoring scope: a create under another tenant was admitted" in (write.error or "")


def test_result_shape_matches_the_event_suite(backend: StoreBackend) -> None:
    rows = FencepostAdapterRows(backend.migrated())
    isolation = run_tenant_isolation_checks(TenantIsolationSubject(rows, "probe-tenant")).as_dict()
    events: Any = run_event_append_checks(EventAppendSubject(FencepostEventStore(rows.store), "probe-tenant"))
    assert set(isolation) == set(events.as_dict()) == {"passed", "checks"}
    assert {frozenset(c) for c in isolation["checks"]} == {frozenset(c) for c in events.as_dict()["checks"]} == {
        frozenset({"id", "status", "evidence", "error"})}
