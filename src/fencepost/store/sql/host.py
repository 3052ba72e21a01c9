"""``HostPort`` over SQL: invocations, the conditional adapter-row write, the reconciliation logs, the external
completion handoffs and the recorded state of bound entities of ``host.sql``, written once.

Seed: platform-host-8.1-readme-excerpt.md; host-spec sections A (the state binding, ADR 0077), B, C, E, I and
N. Every write the lease protects names the lease it was given (``LeaseHeld``: the credentials the execution
captured before it loaded the invocation, C3), never a value read back from a row, and follows the host's lock
order: the invocation row, then the adapter row, then the bound entity's state, then the command, whose lease
check comes last (ADR 0002, ADR 0022, ADR 0077).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import fields
from datetime import timedelta
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, IntegrityViolation, LeaseLost
from fencepost.core.statuses import (
    AdapterStatus,
    CommandStatus,
    GovernanceRecordKind,
    InvocationMode,
    InvocationStatus,
    LeaseEventKind,
    ReconciliationKind,
    ReconciliationLog,
)
from fencepost.store.host_records import (
    AdapterRecord,
    AdapterScope,
    AdapterWrite,
    CreateAdapterRow,
    EntityBinding,
    EntityKey,
    EntityStateRecord,
    GovernanceRecord,
    Handoff,
    HostHealthCounts,
    InvocationRecord,
    InvocationVerdict,
    LeaseHeld,
    NewGovernanceRecord,
    NewInvocation,
    NewReconciliation,
    NewResolution,
    ReconciliationRecord,
    ResolutionRecord,
    UnleasedVerdict,
    UpdateAdapterRow,
    VerdictHeld,
)
from fencepost.store.records import Lease
from fencepost.store.sql.executor import Statements, stored_json
from fencepost.store.sql.lease import lease_held, lease_params


def _json_or_none(value: Any) -> str | None:
    return None if value is None else canonical_json(value)


def _parsed(row: dict[str, Any], column: str) -> Any:
    """``row[column]``, a stored JSON column, parsed (``stored_json``: unreadable is ``IntegrityViolation``)."""
    return stored_json(row[column], f"{column} of {row.get('id', '?')}")


def _statuses(values: frozenset[Any]) -> str:
    return json.dumps(sorted(str(v) for v in values))


class SqlHost:
    """The ``HostPort`` of one SQL unit of work."""

    def __init__(self, unit: Statements) -> None:
        self._unit = unit

    # ── invocations ──
    def insert_invocation(self, invocation: NewInvocation) -> bool:
        params = {"id": invocation.id, "tenant_id": invocation.tenant_id, "space_id": invocation.space_id,
                  "action_id": invocation.action_id, "action_version": invocation.action_version,
                  "idempotency_key": invocation.idempotency_key, "actor": invocation.actor,
                  "authority": invocation.authority, "binding_digest": invocation.binding_digest,
                  "params_digest": invocation.params_digest, "params": canonical_json(invocation.params),
                  "mode": str(invocation.mode), "status": str(invocation.status), "now": self._unit.now()}
        if not self._unit.run("insert_invocation", params).rows:
            return False
        binding = invocation.state_binding
        if binding is not None and self._unit.run("bind_invocation_state", {
                "id": invocation.id, "state_subject": binding.subject, "state_entity_id": binding.entity_id,
                "state_target": binding.target}).rowcount != 1:  # pragma: no cover - inserted unbound just above
            raise Conflict(f"invocation {invocation.id} could not be bound to its entity")
        return True

    def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        rows = self._unit.run("get_invocation", {"id": invocation_id}).rows
        return invocation_from_row(rows[0]) if rows else None

    def lock_invocation(self, invocation_id: str) -> InvocationRecord | None:
        rows = self._unit.run("lock_invocation", {"id": invocation_id}).rows
        return invocation_from_row(rows[0]) if rows else None

    def store_identity(self) -> str:
        rows = self._unit.run("get_store_identity", {}).rows
        if not rows:
            raise IntegrityViolation("the control database has no store identity (store_identity, migration 0017); "
                                     "it was deleted by hand: restore it from a backup")
        return str(rows[0]["id"])

    def find_invocation(self, *, tenant_id: str, space_id: str, action_id: str,
                        idempotency_key: str) -> InvocationRecord | None:
        rows = self._unit.run("find_invocation_by_key", {
            "tenant_id": tenant_id, "space_id": space_id, "action_id": action_id,
            "idempotency_key": idempotency_key}).rows
        return invocation_from_row(rows[0]) if rows else None

    def list_invocations(self, *, tenant_id: str | None = None, space_id: str | None = None,
                         status: InvocationStatus | None = None, action_id: str | None = None,
                         limit: int = 100) -> list[InvocationRecord]:
        if not 1 <= limit <= 10_000:
            raise ValueError("limit must be between 1 and 10000")
        rows = self._unit.run("list_invocations", {
            "tenant_id": tenant_id, "space_id": space_id, "status": None if status is None else str(status),
            "action_id": action_id, "limit": limit}).rows
        return [invocation_from_row(r) for r in rows]

    def update_leased_invocation(self, invocation_id: str, lease: Lease, verdict: InvocationVerdict) -> bool:
        if lease.command_id != invocation_id:
            return False  # an invocation's lease is its own command's (ADR 0022)
        params = {"id": invocation_id, "status": str(verdict.status), "error": verdict.error,
                  "result": _json_or_none(verdict.result), "reconciliation": _json_or_none(verdict.reconciliation),
                  "expected": _statuses(verdict.expected), "now": self._unit.now(), **lease_params(lease)}
        return self._unit.run("update_leased_invocation", params).rowcount == 1

    def update_settled_invocation(self, invocation_id: str, held: VerdictHeld, *, error: str | None,
                                  reconciliation: dict[str, Any] | None) -> bool:
        if held.completion_digest is not None:
            raise NotImplementedError("the completion-digest guard (host-spec I4) comes with issue 13")
        if not held.status.terminal:
            raise ValueError(f"a settled verdict is terminal, not {held.status}")
        return bool(self._unit.run("update_settled_invocation", {
            "id": invocation_id, "held_status": str(held.status), "held_error": held.error, "error": error,
            "reconciliation": _json_or_none(reconciliation), "now": self._unit.now()}).rows)

    # ── external completion handoffs (ADR 0034; host-spec N) ──
    def record_handoff(self, invocation_id: str, lease: Lease, handoff: Handoff) -> bool:
        if lease.command_id != invocation_id:
            return False  # an invocation's lease is its own command's (ADR 0022)
        return self._unit.run("record_handoff", {
            "id": invocation_id, "provider": handoff.provider, "reference": handoff.external_reference,
            "details": canonical_json(handoff.details), "due_at": handoff.due_at, "now": self._unit.now(),
            **lease_params(lease)}).rowcount == 1

    def park_invocation(self, invocation_id: str, lease: Lease, pending_completion: dict[str, Any]) -> bool:
        if lease.command_id != invocation_id:
            return False
        return self._unit.run("park_invocation", {
            "id": invocation_id, "pending_completion": canonical_json(pending_completion),
            "now": self._unit.now(), **lease_params(lease)}).rowcount == 1

    def find_handoffs(self, *, provider: str, external_reference: str) -> list[InvocationRecord]:
        return [invocation_from_row(r) for r in self._unit.run("find_handoffs", {
            "provider": provider, "reference": external_reference}).rows]

    def list_overdue_handoffs(self, *, limit: int = 100) -> list[InvocationRecord]:
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        return [invocation_from_row(r) for r in self._unit.run("list_overdue_handoffs", {
            "now": self._unit.now(), "limit": limit}).rows]

    def host_health(self, *, stuck_after: timedelta, window: timedelta) -> HostHealthCounts:
        if stuck_after < timedelta(0) or window <= timedelta(0):
            raise ValueError("stuck_after must not be negative and window must be positive")
        now = self._unit.now()
        row = self._unit.run("host_health", {"now": now, "stuck_before": now - stuck_after,
                                             "since": now - window}).rows[0]
        return HostHealthCounts(**{f.name: int(row[f.name]) for f in fields(HostHealthCounts)})

    def update_unleased_invocation(self, invocation_id: str, expected: InvocationStatus,
                                   verdict: UnleasedVerdict) -> bool:
        # Lock order (ADR 0022): the invocation row, then the command. Every step before the last UPDATE
        # changes nothing unless the command is finished, and a refusal after it is impossible, so False
        # always means nothing changed.
        rows = self._unit.run("lock_unleased_invocation", {"id": invocation_id}).rows
        if not rows or rows[0]["status"] != str(expected):
            return False
        now = self._unit.now()
        finished = self._unit.run("finish_unleased_command", {"id": invocation_id, "now": now}).rows
        if finished:
            # The heartbeat history ends like an operator's abort: no owner, the command's last delivery.
            self._unit.run("insert_lease_event", {
                "command_id": invocation_id, "event": str(LeaseEventKind.DELIVER), "owner": None,
                "delivery": int(finished[0]["delivery_count"]), "at": now, "lease_until": None})
        elif self._unit.run("command_leased", {"id": invocation_id, "now": now}).rows:
            return False  # a live lease holds the command: its execution writes the verdict
        return bool(self._unit.run("update_unleased_invocation", {
            "id": invocation_id, "expected": str(expected), "status": str(verdict.status), "error": verdict.error,
            "result": _json_or_none(verdict.result), "reconciliation": _json_or_none(verdict.reconciliation),
            "pending_completion": _json_or_none(verdict.pending_completion),
            "external_completion": _json_or_none(verdict.external_completion), "parked_at": verdict.parked_at,
            "overdue_at": verdict.overdue_at, "now": now}).rows)

    # ── the reconciliation logs (ADR 0032) ──
    def append_reconciliation(self, record: NewReconciliation) -> bool:
        return bool(self._unit.run("insert_reconciliation", {
            "id": record.id, "log": str(record.log), "tenant_id": record.tenant_id, "space_id": record.space_id,
            "invocation_id": record.invocation_id, "adapter_invocation_id": record.adapter_invocation_id,
            "kind": str(record.kind), "payload": canonical_json(record.payload), "now": self._unit.now()}).rows)

    def list_reconciliations(self, invocation_id: str) -> list[ReconciliationRecord]:
        return [reconciliation_from_row(r) for r in
                self._unit.run("list_reconciliations", {"invocation_id": invocation_id}).rows]

    # ── governance evidence (ADRs 0043-0045) ──
    def append_governance_record(self, record: NewGovernanceRecord) -> bool:
        return bool(self._unit.run("insert_governance_record", {
            "id": record.id, "kind": str(record.kind), "tenant_id": record.tenant_id, "space_id": record.space_id,
            "invocation_id": record.invocation_id, "name": record.name, "payload": canonical_json(record.payload),
            "fingerprint": record.fingerprint, "now": self._unit.now()}).rows)

    def list_governance_records(self, invocation_id: str) -> list[GovernanceRecord]:
        return [governance_from_row(r) for r in
                self._unit.run("list_governance_records", {"invocation_id": invocation_id}).rows]

    def resume_approved_invocation(self, invocation_id: str, *, owner: str, lease_seconds: float) -> Lease | None:
        if not 0 < lease_seconds <= 3600 or not owner or len(owner) > 200:
            raise ValueError("an approval resume lease has an owner of 1..200 chars and 0 < seconds <= 3600")
        now = self._unit.now()
        # Lock order (ADR 0022): the invocation row first, then the command.
        if not self._unit.run("resume_awaiting_invocation", {"id": invocation_id, "now": now}).rows:
            return None
        token = secrets.token_hex(16)
        rows = self._unit.run("lease_approved_command", {
            "id": invocation_id, "owner": owner, "token": token, "now": now,
            "lease_until": now + timedelta(seconds=lease_seconds)}).rows
        if not rows:  # pragma: no cover - resume_awaiting_invocation saw the command finished in this unit
            raise LeaseLost(f"the command of {invocation_id} could not be leased for the approval resume")
        delivery, until = int(rows[0]["delivery_count"]), rows[0]["lease_until"]
        self._unit.run("insert_lease_event", {
            "command_id": invocation_id, "event": str(LeaseEventKind.CLAIM), "owner": owner, "delivery": delivery,
            "at": now, "lease_until": until})
        return Lease(command_id=invocation_id, owner=owner, token=token, delivery=delivery, until=until)

    # ── adapter rows ──
    def write_adapter_invocation(self, write: AdapterWrite) -> bool:
        scope, condition = write.scope, write.condition
        parent = self._unit.run("lock_invocation_for_adapter_write", {
            "invocation_id": scope.invocation_id, "tenant_id": scope.tenant_id, "space_id": scope.space_id}).rows
        if not parent:
            return False  # no parent in this scope (I5)
        status, error = parent[0]["status"], parent[0]["error"]
        if isinstance(condition, LeaseHeld):
            if condition.lease.command_id != scope.invocation_id or status != InvocationStatus.RUNNING:
                return False  # I2: a running parent under this invocation's own lease
        elif isinstance(condition, VerdictHeld):
            if condition.completion_digest is not None:
                raise NotImplementedError("the completion-digest guard (host-spec I4) comes with issue 13")
            if status != condition.status or error != condition.error:
                return False  # I3: exact status and error, an absent error matching only an absent one
        else:  # pragma: no cover - the type says so
            raise TypeError(f"unknown condition {type(condition).__name__}")
        now = self._unit.now()
        mutation = write.mutation
        if isinstance(mutation, CreateAdapterRow):
            row = mutation.row
            created = self._unit.run("insert_adapter_invocation", {
                "id": row.id, "tenant_id": scope.tenant_id, "space_id": scope.space_id,
                "invocation_id": scope.invocation_id, "step_index": row.step_index, "step_name": row.step_name,
                "adapter_type": row.adapter_type, "operation": row.operation, "vendor": row.vendor,
                "input": canonical_json(row.input), "output": _json_or_none(row.output), "status": str(row.status),
                "error": row.error, "attempts": row.attempts, "external_reference": row.external_reference,
                "reconciliation": _json_or_none(row.reconciliation), "now": now}).rows
            if not created:
                return False  # I6: a duplicate id keeps the first row
        elif isinstance(mutation, UpdateAdapterRow):
            expected = write.expected_statuses
            if expected is not None and not expected:
                return False
            updated = self._unit.run("update_adapter_invocation", {
                "id": mutation.id, "tenant_id": scope.tenant_id, "space_id": scope.space_id,
                "invocation_id": scope.invocation_id, "status": str(mutation.status), "error": mutation.error,
                "output": _json_or_none(mutation.output), "external_reference": mutation.external_reference,
                "reconciliation": _json_or_none(mutation.reconciliation), "attempts": mutation.attempts,
                "expected": None if expected is None else _statuses(expected), "now": now}).rows
            if not updated:
                return False  # scope, expected status or I7's no-regression rule refused it
        else:  # pragma: no cover - the type says so
            raise TypeError(f"unknown mutation {type(mutation).__name__}")
        fence = self._unit.fenced_by
        if (isinstance(condition, LeaseHeld)
                and (fence is None or (fence.command_id, fence.token) != (condition.lease.command_id,
                                                                          condition.lease.token))
                and not lease_held(self._unit, condition.lease)):
            # Fence last (ADR 0002): the mutation above must not commit; the caller's unit rolls back. Inside a
            # unit that Store.fenced ends with this same lease's fence, that fence is the check (ADR 0079).
            lease = condition.lease
            raise LeaseLost(f"lease on command {lease.command_id} (delivery {lease.delivery}) was lost")
        return True

    def get_adapter_invocation(self, adapter_invocation_id: str) -> AdapterRecord | None:
        rows = self._unit.run("get_adapter_invocation", {"id": adapter_invocation_id}).rows
        return adapter_from_row(rows[0]) if rows else None

    def list_adapter_invocations(self, invocation_id: str) -> list[AdapterRecord]:
        return [adapter_from_row(r) for r in
                self._unit.run("list_adapter_invocations", {"invocation_id": invocation_id}).rows]

    # ADR 0040, tenant isolation checks (host-spec V2): a separate block.
    def get_adapter_invocation_in_scope(self, adapter_invocation_id: str, scope: AdapterScope) -> AdapterRecord | None:
        rows = self._unit.run("get_adapter_invocation_in_scope", {
            "id": adapter_invocation_id, "tenant_id": scope.tenant_id, "space_id": scope.space_id,
            "invocation_id": scope.invocation_id}).rows
        return adapter_from_row(rows[0]) if rows else None


    # ── the recorded state of bound entities (ADR 0077; host-spec A13, A17, A19) ──
    def lock_entity_state(self, key: EntityKey) -> EntityStateRecord | None:
        self._unit.run("lock_entity", _entity_params(key))
        return self.get_entity_state(key)

    def get_entity_state(self, key: EntityKey) -> EntityStateRecord | None:
        rows = self._unit.run("get_entity_state", _entity_params(key)).rows
        return entity_state_from_row(rows[0]) if rows else None

    def set_entity_state(self, key: EntityKey, state: str, *, invocation_id: str,
                         lease: Lease) -> EntityStateRecord | None:
        # Lock order (ADR 0022, ADR 0077): the invocation row, then the entity, then the command's lease, last.
        parent = self._unit.run("lock_invocation_for_adapter_write", {
            "invocation_id": invocation_id, "tenant_id": key.tenant_id, "space_id": key.space_id}).rows
        if (not parent or parent[0]["status"] != InvocationStatus.RUNNING or lease.command_id != invocation_id):
            return None  # not this scope's invocation, not running, or not its own lease
        self._unit.run("lock_entity", _entity_params(key))
        changed = self._unit.run("set_entity_state", {**_entity_params(key), "state": state,
                                                      "invocation_id": invocation_id, "now": self._unit.now()}).rows
        if not lease_held(self._unit, lease):
            # Fence last (ADR 0002): the write above must not commit; the caller's unit rolls back.
            raise LeaseLost(f"lease on command {lease.command_id} (delivery {lease.delivery}) was lost")
        if changed:
            return entity_state_from_row(changed[0])
        return self.get_entity_state(key)  # already in that state: kept as it was

    # ── operator resolutions and reads (ADRs 0048, 0049; resolutions.sql) ──
    def record_resolution(self, resolution: NewResolution) -> bool:
        if resolution.outcome not in (InvocationStatus.SUCCEEDED, InvocationStatus.FAILED):
            raise Conflict(f"a resolution's outcome is succeeded or failed, not {resolution.outcome}")
        now = self._unit.now()
        if self._unit.run("command_leased", {"id": resolution.invocation_id, "now": now}).rows:
            return False  # a live lease holds the command: its execution writes the verdict
        inserted = self._unit.run("insert_resolution", {
            "id": resolution.id, "invocation_id": resolution.invocation_id, "tenant_id": resolution.tenant_id,
            "space_id": resolution.space_id, "outcome": str(resolution.outcome), "operator": resolution.operator,
            "note": resolution.note, "evidence": _json_or_none(resolution.evidence),
            "request_digest": resolution.request_digest, "now": now}).rows
        if not inserted:
            return False
        moved = self._unit.run("resolve_invocation_status", {
            "invocation_id": resolution.invocation_id, "outcome": str(resolution.outcome), "now": now}).rowcount
        if moved != 1:  # pragma: no cover - the insert saw the row reconciliation_required in this unit
            raise Conflict(f"invocation {resolution.invocation_id} changed while it was resolved")
        return True

    def get_resolution(self, invocation_id: str) -> ResolutionRecord | None:
        rows = self._unit.run("get_resolution", {"invocation_id": invocation_id}).rows
        return resolution_from_row(rows[0]) if rows else None

    def page_invocations(self, *, tenant_id: str | None = None, space_id: str | None = None,
                         status: InvocationStatus | None = None, action_id: str | None = None,
                         after_id: str | None = None, limit: int = 50) -> list[InvocationRecord]:
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        rows = self._unit.run("page_invocations", {
            "tenant_id": tenant_id, "space_id": space_id, "status": None if status is None else str(status),
            "action_id": action_id, "after_id": after_id, "limit": limit}).rows
        return [invocation_from_row(r) for r in rows]

    def reconciliation_queue(self, *, tenant_id: str | None = None, space_id: str | None = None,
                             limit: int = 100) -> list[InvocationRecord]:
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        rows = self._unit.run("reconciliation_queue", {"tenant_id": tenant_id, "space_id": space_id,
                                                       "limit": limit}).rows
        return [invocation_from_row(r) for r in rows]


def invocation_from_row(row: dict[str, Any]) -> InvocationRecord:
    """An ``InvocationRecord`` from a row of the ``invocation_columns`` fragment."""
    command_status = row["command_status"]
    return InvocationRecord(
        id=row["id"], tenant_id=row["tenant_id"], space_id=row["space_id"], action_id=row["action_id"],
        action_version=int(row["action_version"]), idempotency_key=row["idempotency_key"], actor=row["actor"],
        authority=row["authority"], binding_digest=row["binding_digest"], params_digest=row["params_digest"],
        params=_parsed(row, "params"), mode=InvocationMode(row["mode"]), status=InvocationStatus(row["status"]),
        error=row["error"], result=_parsed(row, "result"), reconciliation=_parsed(row, "reconciliation"),
        pending_completion=_parsed(row, "pending_completion"), created_at=row["created_at"],
        updated_at=row["updated_at"], attempt_count=int(row["attempt_count"]), lease_owner=row["lease_owner"],
        lease_until=row["lease_until"],
        command_status=None if command_status is None else CommandStatus(command_status),
        handoff_provider=row["handoff_provider"], handoff_reference=row["handoff_reference"],
        completion_due_at=row["completion_due_at"], parked_at=row["parked_at"], overdue_at=row["overdue_at"],
        external_completion=_parsed(row, "external_completion"),
        state_binding=None if row["state_subject"] is None else EntityBinding(
            row["state_subject"], row["state_entity_id"], row["state_target"]))


def _entity_params(key: EntityKey) -> dict[str, Any]:
    return {"tenant_id": key.tenant_id, "space_id": key.space_id, "subject": key.subject, "entity_id": key.entity_id}


def entity_state_from_row(row: dict[str, Any]) -> EntityStateRecord:
    """An ``EntityStateRecord`` from a row of the ``entity_state_columns`` fragment."""
    return EntityStateRecord(
        key=EntityKey(row["tenant_id"], row["space_id"], row["subject"], row["entity_id"]), state=row["state"],
        previous_state=row["previous_state"], updated_by_invocation=row["updated_by_invocation"],
        updated_at=row["updated_at"])


def adapter_from_row(row: dict[str, Any]) -> AdapterRecord:
    """An ``AdapterRecord`` from a row of the ``adapter_columns`` fragment."""
    return AdapterRecord(
        id=row["id"], tenant_id=row["tenant_id"], space_id=row["space_id"], invocation_id=row["invocation_id"],
        step_index=int(row["step_index"]), step_name=row["step_name"], adapter_type=row["adapter_type"],
        operation=row["operation"], vendor=row["vendor"], input=_parsed(row, "input"),
        output=_parsed(row, "output"), status=AdapterStatus(row["status"]), error=row["error"],
        attempts=int(row["attempts"]), external_reference=row["external_reference"],
        reconciliation=_parsed(row, "reconciliation"), created_at=row["created_at"], updated_at=row["updated_at"])


def reconciliation_from_row(row: dict[str, Any]) -> ReconciliationRecord:
    """A ``ReconciliationRecord`` from a row of ``list_reconciliations``."""
    return ReconciliationRecord(
        id=row["id"], tenant_id=row["tenant_id"], space_id=row["space_id"], invocation_id=row["invocation_id"],
        adapter_invocation_id=row["adapter_invocation_id"], log=ReconciliationLog(row["log"]),
        kind=ReconciliationKind(row["kind"]), payload=_parsed(row, "payload"), created_at=row["created_at"])


def resolution_from_row(row: dict[str, Any]) -> ResolutionRecord:
    """A ``ResolutionRecord`` from a row of the ``resolution_columns`` fragment."""
    return ResolutionRecord(
        id=row["id"], tenant_id=row["tenant_id"], space_id=row["space_id"], invocation_id=row["invocation_id"],
        outcome=InvocationStatus(row["outcome"]), operator=row["operator"], note=row["note"],
        evidence=_parsed(row, "evidence"), prior_status=InvocationStatus(row["prior_status"]),
        prior_error=row["prior_error"], prior_reconciliation=_parsed(row, "prior_reconciliation"),
        request_digest=row["request_digest"], created_at=row["created_at"])

def governance_from_row(row: dict[str, Any]) -> GovernanceRecord:
    """A ``GovernanceRecord`` from a row of ``list_governance_records``."""
    return GovernanceRecord(
        id=row["id"], kind=GovernanceRecordKind(row["kind"]), tenant_id=row["tenant_id"], space_id=row["space_id"],
        invocation_id=row["invocation_id"], name=row["name"], payload=_parsed(row, "payload"),
        fingerprint=row["fingerprint"], created_at=row["created_at"])
