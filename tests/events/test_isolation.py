"""The tenant isolation checks for adapter rows (host-spec V; ADR 0040), themselves checked."""

from __future__ import annotations

from typing import Any

from events import broken_stores as b
from fencepost.core.statuses import InvocationStatus
from fencepost.events.conformance import EventAppendSubject, run_event_append_checks
from fencepost.events.fencepost_subject import FencepostAdapterRows, FencepostEventStore
from fencepost.events.isolation import TenantIsolationSubject, run_tenant_isolation_checks, tenant_isolation_checks
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
