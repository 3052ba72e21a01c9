"""Approvals (human in the loop): request, approve, reject, expire (host-spec P1-P4, H14, D3; §1.Y-5; ADR 0044).

- **Request.** A policy returning ``RequireApproval(authority, expires_in, reason)`` with no persisted decision
  for it parks the invocation ``awaiting_approval`` in one fenced unit (``host.approval.request``): the
  request record (the HITL checkpoint: policy, authority, ``expires_at`` from the store's clock), an
  ``ApprovalRequested`` event, the status, and the command finished, which releases the lease. No worker
  claims an invocation that waits, so none spins on it; no verdict event is written (it is not a verdict).
- **Approve** (``host.approval.decide``): under the invocation's row lock, the approver must present exactly
  the request's authority (else ``NotAllowed``) before ``expires_at`` (else ``ApprovalExpired``). The decision
  record and ``ApprovalGranted`` commit with the resume: the invocation back to ``running`` and its command
  leased to the approving host for a *temporary* lease, its ``attempt_count`` raised to at least 1 and never
  incremented (P3). The approving host then runs the execution under that lease with a heartbeat, as an
  approval resume: a count above the recovery budget settles ``reconciliation_required`` before the action is
  resolved; a count equal to it is admitted (P4, H14); approval never resets the count. Governance on the
  resume reuses the persisted decision (P1) and refuses a deferral (D3, P2). If the approving process dies, the
  lease expires and a worker takes the invocation over as any recovery (its claim counts).
- **Reject**: the decision record, ``ApprovalRejected`` and the ``failed`` verdict (with its verdict event), in
  one unit; the reason names the approver, the authority and the note.
- **Expire**: ``sweep_expired_approvals`` (a worker sweep, ``Host.sweeps``) ends every request past its
  ``expires_at`` ``failed`` with ``ApprovalExpired``.

Who may approve is an authority *string* the policy names: fencepost checks that the approver presents it and
records who did; authenticating the approver is the caller's job (the CLI trusts its operator).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fencepost.core.canonical import require_storable_text
from fencepost.core.errors import Conflict, InvalidInput, NotAllowed, NotFound
from fencepost.core.statuses import CommandStatus, GovernanceRecordKind, InvocationStatus
from fencepost.host import telemetry
from fencepost.host.finalization import SettlementRefused, lock_running
from fencepost.host.governance import RequireApproval, record
from fencepost.host.lifecycle import (
    APPROVAL_EXPIRED,
    APPROVAL_GRANTED,
    APPROVAL_REJECTED,
    APPROVAL_REQUESTED,
    VERDICT_EVENTS,
    invocation_event,
)
from fencepost.host.telemetry import Telemetry
from fencepost.store.base import Store
from fencepost.store.host_records import GovernanceRecord, InvocationRecord, InvocationVerdict, UnleasedVerdict
from fencepost.store.ports import FencedUnit, UnitOfWork
from fencepost.store.records import Lease

if TYPE_CHECKING:
    from fencepost.host.execution import Execution


#: Unit names (crash windows: tests/crash/crash_flows.py).
REQUEST_UNIT = "host.approval.request"
DECIDE_UNIT = "host.approval.decide"
EXPIRE_UNIT = "host.approval.expire"


class ApprovalExpired(Conflict):
    """The approval request expired before this decision: nothing was recorded; the approvals sweep ends the
    invocation ``failed`` (ADR 0044)."""


@dataclass(frozen=True)
class ApprovalRequest:
    """An open approval request as an approver sees it.

    Attributes:
        invocation_id, tenant_id, space_id, action_id, actor: the waiting invocation. policy: the policy that
        asked. authority: what an approver must present. reason: the policy's text. requested_at, expires_at:
        aware UTC instants (the store's clock).
    """

    invocation_id: str
    tenant_id: str
    space_id: str
    action_id: str
    actor: str
    policy: str
    authority: str
    reason: str
    requested_at: datetime
    expires_at: datetime

    def as_json(self) -> dict[str, Any]:
        """Plain JSON (instants as ISO 8601 text)."""
        return {"invocation_id": self.invocation_id, "tenant_id": self.tenant_id, "space_id": self.space_id,
                "action_id": self.action_id, "actor": self.actor, "policy": self.policy,
                "authority": self.authority, "reason": self.reason, "requested_at": self.requested_at.isoformat(),
                "expires_at": self.expires_at.isoformat()}


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def open_request(records: list[GovernanceRecord]) -> GovernanceRecord | None:
    """The newest approval request without a decision, or None."""
    decided = {r.name for r in records if r.kind is GovernanceRecordKind.APPROVAL_DECISION}
    pending = [r for r in records if r.kind is GovernanceRecordKind.APPROVAL_REQUEST and r.name not in decided]
    return pending[-1] if pending else None


def request_view(invocation: InvocationRecord, request: GovernanceRecord) -> ApprovalRequest:
    """The ``ApprovalRequest`` of a stored request record."""
    payload = request.payload
    return ApprovalRequest(invocation_id=invocation.id, tenant_id=invocation.tenant_id,
                           space_id=invocation.space_id, action_id=invocation.action_id, actor=invocation.actor,
                           policy=request.name, authority=str(payload["authority"]),
                           reason=str(payload.get("reason", "")), requested_at=request.created_at,
                           expires_at=_instant(str(payload["expires_at"])))


# ── request (inside an execution) ──

def request(execution: Execution, invocation: InvocationRecord, policy: str,
            decision: RequireApproval) -> InvocationStatus:
    """Park the invocation ``awaiting_approval`` for ``policy``'s request (see the module docstring).

    Returns:
        ``InvocationStatus.AWAITING_APPROVAL``.
    Raises:
        SettlementRefused, LeaseLost, StoreUnavailable: the unit did not commit (the execution's usual paths).
    """

    def unit(tx: FencedUnit) -> None:
        lock_running(tx, invocation.id)
        expires_at = tx.now() + decision.expires_in
        payload = {"policy": policy, "authority": decision.authority, "reason": decision.reason,
                   "expires_at": expires_at.isoformat()}
        tx.host.append_governance_record(record(invocation, GovernanceRecordKind.APPROVAL_REQUEST, policy, payload))
        tx.events.append_event_with_outbox(invocation_event(invocation, APPROVAL_REQUESTED, payload, part=policy))
        if not tx.host.update_leased_invocation(invocation.id, tx.lease, InvocationVerdict(
                InvocationStatus.AWAITING_APPROVAL, expected=frozenset({InvocationStatus.RUNNING}))):
            raise SettlementRefused("the invocation could not await approval")

    execution.ctx.fenced(unit, name=REQUEST_UNIT, finish=CommandStatus.DELIVERED)
    execution._emit_status(InvocationStatus.AWAITING_APPROVAL)
    return InvocationStatus.AWAITING_APPROVAL


# ── decisions (outside any execution) ──

def check_decider(approver: str, authority: str, note: str) -> None:
    """Raises ``InvalidInput`` unless approver and authority are 1..200 chars and the note at most 2000, none
    of them with a NUL character (SQLite would record one and PostgreSQL refuse it: both refuse it here) or a
    lone surrogate (no UTF-8 form: it failed in the decision's digest), naming the field."""
    if not approver or len(approver) > 200 or not authority or len(authority) > 200:
        raise InvalidInput("approver and authority are 1 to 200 characters")
    if len(note) > 2000:
        raise InvalidInput("a note is at most 2000 characters")
    require_storable_text(approver=approver, authority=authority, note=note)


def _waiting(tx: UnitOfWork, invocation_id: str, authority: str) -> tuple[InvocationRecord, GovernanceRecord]:
    """The awaiting invocation, locked, and its open request, which ``authority`` may decide now.

    Raises:
        NotFound, Conflict (not awaiting approval), NotAllowed (another authority), ApprovalExpired.
    """
    invocation = tx.host.lock_invocation(invocation_id)
    if invocation is None:
        raise NotFound(f"no invocation {invocation_id}")
    if invocation.status is not InvocationStatus.AWAITING_APPROVAL:
        raise Conflict(f"invocation {invocation_id} is {invocation.status}, not awaiting approval")
    pending = open_request(tx.host.list_governance_records(invocation_id))
    if pending is None:  # pragma: no cover - the request commits with the status
        raise Conflict(f"invocation {invocation_id} awaits approval but holds no open request")
    required = str(pending.payload["authority"])
    if authority != required:
        raise NotAllowed(f"approval refused: policy {pending.name} requires authority {required!r}, not "
                         f"{authority!r}", guard="approval_authority")
    expires_at = _instant(str(pending.payload["expires_at"]))
    if tx.now() >= expires_at:
        raise ApprovalExpired(f"the approval request of policy {pending.name} expired at {expires_at.isoformat()}; "
                              "the approvals sweep ends the invocation failed")
    return invocation, pending


def _decision(invocation: InvocationRecord, pending: GovernanceRecord, decision: str, approver: str | None,
              authority: str | None, note: str, at: datetime) -> dict[str, Any]:
    return {"policy": pending.name, "decision": decision, "approver": approver, "authority": authority,
            "note": note, "decided_at": at.isoformat()}


def approve_unit(invocation_id: str, *, approver: str, authority: str, note: str, owner: str,
                 lease_seconds: float) -> Any:
    """The ``host.approval.decide`` unit of an approval: returns ``(invocation, lease)`` (see the module
    docstring)."""

    def unit(tx: UnitOfWork) -> tuple[InvocationRecord, Lease]:
        invocation, pending = _waiting(tx, invocation_id, authority)
        payload = _decision(invocation, pending, "approved", approver, authority, note, tx.now())
        tx.host.append_governance_record(record(invocation, GovernanceRecordKind.APPROVAL_DECISION, pending.name,
                                                payload))
        tx.events.append_event_with_outbox(invocation_event(invocation, APPROVAL_GRANTED, payload,
                                                            part=pending.name))
        lease = tx.host.resume_approved_invocation(invocation_id, owner=owner, lease_seconds=lease_seconds)
        if lease is None:
            raise Conflict(f"invocation {invocation_id} could not be resumed: its command is not finished")
        return invocation, lease

    return unit


def _fail_unleased(tx: UnitOfWork, invocation: InvocationRecord, error: str) -> None:
    tx.events.append_event_with_outbox(invocation_event(invocation, VERDICT_EVENTS[InvocationStatus.FAILED], {
        "status": "failed", "error": error}, part="approval"))
    if not tx.host.update_unleased_invocation(invocation.id, InvocationStatus.AWAITING_APPROVAL, UnleasedVerdict(
            InvocationStatus.FAILED, error, invocation.result, invocation.reconciliation,
            invocation.pending_completion, invocation.external_completion, invocation.parked_at,
            invocation.overdue_at)):
        raise Conflict(f"invocation {invocation.id} is no longer awaiting approval")


def reject_unit(invocation_id: str, *, approver: str, authority: str, note: str) -> Any:
    """The ``host.approval.decide`` unit of a rejection: the decision, ``ApprovalRejected`` and ``failed``."""

    def unit(tx: UnitOfWork) -> None:
        invocation, pending = _waiting(tx, invocation_id, authority)
        payload = _decision(invocation, pending, "rejected", approver, authority, note, tx.now())
        tx.host.append_governance_record(record(invocation, GovernanceRecordKind.APPROVAL_DECISION, pending.name,
                                                payload))
        tx.events.append_event_with_outbox(invocation_event(invocation, APPROVAL_REJECTED, payload,
                                                            part=pending.name))
        reason = f"approval rejected by {approver} (authority {authority})" + (f": {note}" if note else "")
        _fail_unleased(tx, invocation, reason[:2000])

    return unit


def expire_one(tx: UnitOfWork, invocation_id: str) -> bool:
    """End ``invocation_id`` ``failed`` if, under its row lock, it still awaits an approval whose request expired
    by the store's clock. True when it did."""
    invocation = tx.host.lock_invocation(invocation_id)
    if invocation is None or invocation.status is not InvocationStatus.AWAITING_APPROVAL:
        return False
    pending = open_request(tx.host.list_governance_records(invocation_id))
    if pending is None:
        return False
    expires_at = _instant(str(pending.payload["expires_at"]))
    now = tx.now()
    if now < expires_at:
        return False
    payload = _decision(invocation, pending, "expired", None, None, "", now)
    tx.host.append_governance_record(record(invocation, GovernanceRecordKind.APPROVAL_DECISION, pending.name,
                                            payload))
    tx.events.append_event_with_outbox(invocation_event(invocation, APPROVAL_EXPIRED, payload, part=pending.name))
    _fail_unleased(tx, invocation, f"approval of policy {pending.name} expired at {expires_at.isoformat()} "
                                   f"(authority {pending.payload['authority']} did not decide)")
    return True


def _expirer(invocation_id: str) -> Callable[[UnitOfWork], bool]:
    return lambda tx: expire_one(tx, invocation_id)


def sweep_expired_approvals(store: Store, sink: Telemetry, *, budget_seconds: float = 1.0, limit: int = 100) -> int:
    """End every expired approval request ``failed``, each in its own unit (``host.approval.expire``), for about
    ``budget_seconds`` (seconds). Returns how many it ended.

    Raises:
        StoreUnavailable: the store failed; what committed before stays.
    """
    deadline = time.monotonic() + budget_seconds
    waiting = store.read(lambda tx: tx.host.list_invocations(status=InvocationStatus.AWAITING_APPROVAL,
                                                             limit=limit))
    ended = 0
    for invocation in reversed(waiting):  # oldest first
        if store.transact(_expirer(invocation.id), name=EXPIRE_UNIT):
            ended += 1
            telemetry.emit(sink, telemetry.STATUS, invocation_id=invocation.id, status=str(InvocationStatus.FAILED))
        if time.monotonic() >= deadline:
            break
    return ended


def list_requests(store: Store, *, tenant: str | None = None, space: str | None = None,
                  limit: int = 100) -> list[ApprovalRequest]:
    """Open approval requests, newest first (expired ones too, until the sweep ends them)."""

    def read(tx: UnitOfWork) -> list[ApprovalRequest]:
        found = []
        for invocation in tx.host.list_invocations(tenant_id=tenant, space_id=space,
                                                   status=InvocationStatus.AWAITING_APPROVAL, limit=limit):
            pending = open_request(tx.host.list_governance_records(invocation.id))
            if pending is not None:
                found.append(request_view(invocation, pending))
        return found

    requests: list[ApprovalRequest] = store.read(read)
    return requests


__all__ = ["APPROVAL_EXPIRED", "APPROVAL_GRANTED", "APPROVAL_REJECTED", "APPROVAL_REQUESTED", "ApprovalExpired",
           "ApprovalRequest", "approve_unit", "check_decider", "list_requests", "reject_unit", "request",
           "sweep_expired_approvals"]
