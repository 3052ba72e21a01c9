"""Tenant isolation checks for adapter rows (host-spec V1-V5; ADR 0040), with the event checks' result shape.

Two checks, each in a fresh probe scope ``(tenant, event-append-probe-<uuid>, <invocation>)`` of the subject's
tenant:

- ``adapter-read-scope``: a row read under its own scope is found; under another tenant, space or
  invocation the read returns None (raising ``NotFound`` is also accepted, V2).
- ``adapter-write-scope``: the conditional write (V4) refuses a create in a scope that is not the parent's
  (another tenant, another space) and an update naming another invocation's scope, leaving the row
  unchanged; an update within the probe's own scope is admitted.

The subject (``TenantIsolationSubject``) names a ``store`` offering:

- ``create_probe_parent(scope) -> lease``: a ``running`` parent invocation in ``scope`` under a lease the
  checks may write with (fencepost: an inline invocation and its leased command);
- ``write_adapter_invocation(write: AdapterWrite) -> bool``;
- ``get_adapter_invocation(adapter_invocation_id, scope) -> record | None``.

fencepost's own ``Store`` is presented by ``fencepost.events.fencepost_subject.FencepostAdapterRows``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fencepost.core.errors import NotFound
from fencepost.core.statuses import AdapterStatus
from fencepost.events.conformance import PROBE_SPACE_PREFIX, CheckResult, SuiteResult, snapshot, suite_result
from fencepost.store.host_records import (
    AdapterScope,
    AdapterWrite,
    CreateAdapterRow,
    LeaseHeld,
    NewAdapterRow,
    UpdateAdapterRow,
)


@dataclass
class TenantIsolationSubject:
    """What the isolation checks probe: a ``store`` (see the module doc) and the probe ``tenant_id``."""

    store: Any
    tenant_id: str
    reset: Callable[[], None] | None = None


class _Stop(Exception):
    pass


def _row(adapter_id: str, step_index: int = 0) -> NewAdapterRow:
    # Each row of one parent has its own step index: a create refused for a duplicate step would hide a
    # scope violation.
    return NewAdapterRow(id=adapter_id, step_index=step_index, step_name="isolation-probe", adapter_type="probe",
                         operation="isolation-probe", vendor="fencepost", input={"probe": True})


def _scopes(tenant: str) -> tuple[AdapterScope, dict[str, AdapterScope]]:
    space = f"{PROBE_SPACE_PREFIX}{uuid.uuid4()}"
    own = AdapterScope(tenant, space, f"{space}:invocation")
    other = {"another tenant": replace(own, tenant_id=f"{tenant}-isolation-other"),
             "another space": replace(own, space_id=f"{space}-other"),
             "another invocation": replace(own, invocation_id=f"{space}:other-invocation")}
    return own, other


def _read(store: Any, adapter_id: str, scope: AdapterScope) -> Any:
    try:
        return store.get_adapter_invocation(adapter_id, scope)
    except NotFound:
        return None


class _Base:
    id = ""

    def run(self, subject: TenantIsolationSubject) -> CheckResult:
        """Run this check (V5). Never raises: a store error is a failure naming it."""
        if subject.reset is not None:
            subject.reset()
        evidence: list[str] = []
        try:
            self.body(subject.store, subject.tenant_id, evidence)
        except _Stop as stop:
            return CheckResult(self.id, "failed", "\n".join(evidence), str(stop))
        except Exception as error:  # a store error is a finding, not a crash of the suite
            return CheckResult(self.id, "failed", "\n".join(evidence), f"{type(error).__name__}: {error}")
        return CheckResult(self.id, "passed", "\n".join(evidence))

    def body(self, store: Any, tenant: str, evidence: list[str]) -> None:
        raise NotImplementedError


def _probe_row(store: Any, tenant: str, evidence: list[str]) -> tuple[AdapterScope, dict[str, AdapterScope],
                                                                      Any, str]:
    own, other = _scopes(tenant)
    lease = store.create_probe_parent(own)
    adapter_id = f"{own.space_id}:row"
    if not store.write_adapter_invocation(AdapterWrite(own, CreateAdapterRow(_row(adapter_id)), LeaseHeld(lease))):
        raise _Stop("the create of a row in its own parent's scope was refused")
    evidence.append(f"probe row {adapter_id} in scope {own.tenant_id}/{own.space_id}/{own.invocation_id}")
    return own, other, lease, adapter_id


class AdapterReadScope(_Base):
    """``adapter-read-scope``: reads outside the row's scope find nothing (V2, V5)."""

    id = "adapter-read-scope"

    def body(self, store: Any, tenant: str, evidence: list[str]) -> None:
        own, other, _lease, adapter_id = _probe_row(store, tenant, evidence)
        if _read(store, adapter_id, own) is None:
            raise _Stop("the row is not found under its own scope")
        for label, scope in other.items():
            if _read(store, adapter_id, scope) is not None:
                raise _Stop(f"ignoring scope: a read under {label} ({scope.tenant_id}/{scope.space_id}/"
                            f"{scope.invocation_id}) returned the row")
            evidence.append(f"read under {label}: nothing")


class AdapterWriteScope(_Base):
    """``adapter-write-scope``: scoped create and update refusals, and an admitted update in scope (V4, V5)."""

    id = "adapter-write-scope"

    def body(self, store: Any, tenant: str, evidence: list[str]) -> None:
        own, other, lease, adapter_id = _probe_row(store, tenant, evidence)
        for step, label in enumerate(("another tenant", "another space"), start=1):
            scope = other[label]
            stray = f"{own.space_id}:stray-{label.split()[1]}"
            if store.write_adapter_invocation(AdapterWrite(scope, CreateAdapterRow(_row(stray, step)),
                                                                LeaseHeld(lease))):
                raise _Stop(f"ignoring scope: a create under {label} was admitted with the parent's lease")
            if _read(store, stray, scope) is not None or _read(store, stray, own) is not None:
                raise _Stop(f"ignoring scope: a refused create under {label} still wrote row {stray}")
            evidence.append(f"create under {label}: refused")
        # A second parent of the same tenant and space: its lease and scope must not reach the first's row.
        neighbour = replace(own, invocation_id=f"{own.space_id}:neighbour")
        neighbour_lease = store.create_probe_parent(neighbour)
        before = snapshot(_read(store, adapter_id, own))
        if store.write_adapter_invocation(AdapterWrite(
                neighbour, UpdateAdapterRow(adapter_id, AdapterStatus.FAILED, error="isolation probe"),
                LeaseHeld(neighbour_lease))):
            raise _Stop("ignoring scope: an update of the row under another invocation's scope was admitted")
        if snapshot(_read(store, adapter_id, own)) != before:
            raise _Stop("ignoring scope: a refused update under another invocation's scope changed the row")
        evidence.append("update under another invocation: refused, row unchanged")
        if not store.write_adapter_invocation(AdapterWrite(
                own, UpdateAdapterRow(adapter_id, AdapterStatus.FAILED, error="isolation probe"), LeaseHeld(lease))):
            raise _Stop("an update within the probe's own scope was refused")
        after = _read(store, adapter_id, own)
        if after is None or snapshot(after).get("status") != "failed":
            raise _Stop("an admitted update within the probe's own scope did not change the row")
        evidence.append("update within its own scope: admitted")


def tenant_isolation_checks() -> list[Any]:
    """The two check objects in order: ``adapter-read-scope``, ``adapter-write-scope``."""
    return [AdapterReadScope(), AdapterWriteScope()]


def run_tenant_isolation_checks(subject: TenantIsolationSubject) -> SuiteResult:
    """Run both isolation checks (V5). Returns ``SuiteResult(passed, checks)``, the shape of the event
    checks (U22)."""
    return suite_result([check.run(subject) for check in tenant_isolation_checks()])
