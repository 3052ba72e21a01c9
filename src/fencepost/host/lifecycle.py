"""The host's lifecycle events and checkpoint ids: every id derived from the invocation and step identity, so a
retry or recovery re-appends under the same id and the first write wins (host-spec E1, E3, T1, T2).

Event names: ``ActionInvocationStarted``, ``AdapterInvocationSucceeded``, ``AdapterInvocationFailed``,
``AdapterInvocationAmbiguous``, ``ExternalOperationAccepted``, ``ActionInvocationSucceeded``,
``ActionInvocationFailed``, ``ActionInvocationReconciliationRequired``, the governance events ``ComplianceBlocked``,
``ApprovalRequested``, ``ApprovalGranted``, ``ApprovalRejected`` and ``ApprovalExpired`` (ADRs 0043, 0044), the
action's declared events (ADR 0025) and an operator's ``InvocationResolved`` (``fencepost.host.resolution``,
ADR 0048). Subjects: ``("ActionInvocation", invocation_id)`` and ``("AdapterInvocation", adapter_invocation_id)``
(E10's default subject).
"""

from __future__ import annotations

from typing import Any

from fencepost.core.ids import derived_id
from fencepost.core.statuses import InvocationStatus, ReconciliationKind, ReconciliationLog
from fencepost.store.host_records import InvocationRecord, NewEvent, NewReconciliation, Subject

STARTED = "ActionInvocationStarted"
STEP_SUCCEEDED = "AdapterInvocationSucceeded"
STEP_FAILED = "AdapterInvocationFailed"
STEP_AMBIGUOUS = "AdapterInvocationAmbiguous"
HANDOFF_ACCEPTED = "ExternalOperationAccepted"
# Governance and approvals (ADRs 0043, 0044): stable ids from the invocation, the type and the policy's name.
COMPLIANCE_BLOCKED = "ComplianceBlocked"
APPROVAL_REQUESTED = "ApprovalRequested"
APPROVAL_GRANTED = "ApprovalGranted"
APPROVAL_REJECTED = "ApprovalRejected"
APPROVAL_EXPIRED = "ApprovalExpired"
VERDICT_EVENTS = {
    InvocationStatus.SUCCEEDED: "ActionInvocationSucceeded",
    InvocationStatus.FAILED: "ActionInvocationFailed",
    InvocationStatus.RECONCILIATION_REQUIRED: "ActionInvocationReconciliationRequired",
}


def adapter_invocation_id(invocation_id: str, step_index: int, step_name: str) -> str:
    """The step's stable ``adapter_invocation_id``: its row id and the provider's idempotency key (E1, E2)."""
    return derived_id("ai", "host.adapter-invocation/v1", {"invocation": invocation_id, "index": step_index,
                                                          "step": step_name})


def invocation_subject(invocation_id: str) -> Subject:
    return Subject("ActionInvocation", invocation_id)


def adapter_subject(adapter_id: str) -> Subject:
    return Subject("AdapterInvocation", adapter_id)


def event_id(invocation_id: str, event_type: str, part: str | int | None = None) -> str:
    """The stable id of one lifecycle (or declared) event of an invocation."""
    return derived_id("evt", "host.event/v1", {"invocation": invocation_id, "type": event_type, "part": part})


def invocation_event(invocation: InvocationRecord, event_type: str, payload: dict[str, Any],
                     part: str | int | None = None) -> NewEvent:
    """An event about the invocation itself, under its stable id."""
    return NewEvent(id=event_id(invocation.id, event_type, part), tenant_id=invocation.tenant_id,
                    space_id=invocation.space_id, subject=invocation_subject(invocation.id), type=event_type,
                    payload=payload)


def step_event(invocation: InvocationRecord, adapter_id: str, event_type: str, payload: dict[str, Any]) -> NewEvent:
    """An event about one adapter invocation, under its stable id."""
    return NewEvent(id=event_id(invocation.id, event_type, adapter_id), tenant_id=invocation.tenant_id,
                    space_id=invocation.space_id, subject=adapter_subject(adapter_id), type=event_type,
                    payload=payload)


def reconciliation_id(invocation_id: str, adapter_id: str | None) -> str:
    """The stable id of the governance reconciliation record of one adapter invocation (or of the invocation
    itself): every attempt to append it, atomic or fallback, dedups on it (host-spec K1, L13)."""
    return derived_id("rec", "host.reconciliation/v1", {"invocation": invocation_id, "adapter": adapter_id})


def reconciliation_record(invocation: InvocationRecord, adapter_id: str | None, kind: ReconciliationKind,
                          payload: dict[str, Any]) -> NewReconciliation:
    """The ``ExternalReconciliation`` record an operator resolves: one per adapter invocation whose outcome is
    unknown or whose recorded effect was not continued (host-spec K1, H8; ADR 0031)."""
    return NewReconciliation(id=reconciliation_id(invocation.id, adapter_id), tenant_id=invocation.tenant_id,
                             space_id=invocation.space_id, invocation_id=invocation.id,
                             adapter_invocation_id=adapter_id, log=ReconciliationLog.GOVERNANCE, kind=kind,
                             payload=payload)
