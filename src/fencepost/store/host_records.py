"""Typed rows and write inputs of the action host's ports (``HostPort``, ``EventsPort``; host-spec §0.4, §I, T7).

Frozen dataclasses; instants are aware UTC datetimes; JSON columns are plain dicts. No record carries a lease
token: a lease-conditioned write takes the ``Lease`` itself (``LeaseHeld``), whose token stays private.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fencepost.core.statuses import (
    AdapterStatus,
    CommandStatus,
    EventOutboxStatus,
    GovernanceRecordKind,
    InvocationMode,
    InvocationStatus,
    ReconciliationKind,
    ReconciliationLog,
)
from fencepost.store.records import Lease


@dataclass(frozen=True)
class NewInvocation:
    """An invocation row to insert (host-spec B1: the key bound to version, actor/authority and a versioned
    params digest, all NOT NULL).

    Attributes:
        id: the derived invocation id (ADRs 0023, 0108). tenant_id, space_id: its scope.
        action_id, action_version: the action definition (A1). idempotency_key: 1..255 chars.
        actor, authority: who submits and under which authority binding; binding_digest covers both and the
            action version. params_digest: ``<version>:<hex>`` (``cp1:...``, B5). params: the validated params.
        mode: dispatch or inline (A2). status: ``pending`` (dispatch) or ``running`` (inline, leased by the caller).
        state_binding: the entity whose recorded state a success moves to its target (host-spec A19; ADR 0077),
            fixed at submission from the validated params; None for an action without a state binding.
    """

    id: str
    tenant_id: str
    space_id: str
    action_id: str
    action_version: int
    idempotency_key: str
    actor: str
    authority: str
    binding_digest: str
    params_digest: str
    params: dict[str, Any]
    mode: InvocationMode
    status: InvocationStatus
    state_binding: EntityBinding | None = None


@dataclass(frozen=True)
class InvocationRecord:
    """An invocation as stored, with what its command says about its lease.

    Attributes:
        attempt_count: the command's ``delivery_count`` (host-spec C1, H16): worker claims, including the first;
            0 for an inline run that no worker took over (A4).
        lease_owner: who holds the command's lease now (None when none does); the token never leaves the store.
        lease_until: when that lease expires. command_status: the command's status (None without a command).
        error, result, reconciliation, pending_completion: the verdict and its evidence (None until written).
        handoff_provider, handoff_reference: the external completion handoff a step recorded (host-spec N1,
            E6): both set or both None. completion_due_at: its deadline (None: no deadline). parked_at: when
            the host parked the invocation after its remaining steps and finalization (N2). overdue_at: when
            the deadline sweep moved it to ``reconciliation_required`` (N12). external_completion: the first
            completion recorded for the handoff (N6, N7), a plain JSON object. Instants are aware UTC.
        state_binding: the bound entity and its target (host-spec A19; ADR 0077), None when unbound.
    """

    id: str
    tenant_id: str
    space_id: str
    action_id: str
    action_version: int
    idempotency_key: str
    actor: str
    authority: str
    binding_digest: str
    params_digest: str
    params: dict[str, Any]
    mode: InvocationMode
    status: InvocationStatus
    error: str | None
    result: Any
    reconciliation: dict[str, Any] | None
    pending_completion: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    attempt_count: int
    lease_owner: str | None
    lease_until: datetime | None
    command_status: CommandStatus | None
    handoff_provider: str | None = None
    handoff_reference: str | None = None
    completion_due_at: datetime | None = None
    parked_at: datetime | None = None
    overdue_at: datetime | None = None
    external_completion: dict[str, Any] | None = None
    state_binding: EntityBinding | None = None


@dataclass(frozen=True)
class EntityBinding:
    """The entity an invocation is bound to and the state its success records (host-spec A17, A19; ADR 0077).

    Attributes:
        subject: the entity's kind, e.g. ``order`` (1..100 chars). entity_id: which one (1..200 chars).
        target: the state the invocation's success (or parking) records for it (1..100 chars).
    """

    subject: str
    entity_id: str
    target: str


@dataclass(frozen=True)
class EntityKey:
    """One entity whose state the host records: its scope, its kind (``subject``) and its id (ADR 0077)."""

    tenant_id: str
    space_id: str
    subject: str
    entity_id: str


@dataclass(frozen=True)
class EntityStateRecord:
    """An entity's recorded state (``entity_states``; host-spec A19; ADR 0077).

    Attributes:
        key: which entity. state: its recorded state. updated_by_invocation: the invocation that last changed it
            (a handler through ``HostPort.set_entity_state``, or the host's ``StateTransitioned`` fact).
        previous_state: the state it had before that invocation first changed it (None: it had none), so the
            state an invocation moves the entity *from* stays the same however often it changes it.
        updated_at: when it last changed (aware UTC).
    """

    key: EntityKey
    state: str
    previous_state: str | None
    updated_by_invocation: str
    updated_at: datetime

    def state_before(self, invocation_id: str) -> str | None:
        """The state the entity had before ``invocation_id`` changed it: ``previous_state`` when that
        invocation made the last change, else the current ``state`` (it has not changed it since)."""
        return self.previous_state if self.updated_by_invocation == invocation_id else self.state


@dataclass(frozen=True)
class Handoff:
    """An external completion handoff to record on a running invocation: ``HostPort.record_handoff`` (host-spec
    N1, E6: durable before the step's marker).

    Attributes:
        provider: the adapter's vendor, 1..100 chars: with ``external_reference``, how a callback is matched
            (N30). external_reference: the provider's reference for the operation, 1..500 chars.
        details: a plain JSON object, stored as the invocation's ``pending_completion`` (the step, its
            ``adapter_invocation_id``, whatever the host keeps about the pending operation).
        due_at: the completion deadline (aware UTC), or None for none (the sweep never marks it overdue).
    """

    provider: str
    external_reference: str
    details: dict[str, Any]
    due_at: datetime | None


@dataclass(frozen=True)
class UnleasedVerdict:
    """Full new values for an unleased invocation row, written under its row lock (N8):
    ``HostPort.update_unleased_invocation``. Every field is written as given (None stores NULL): the caller
    read the row under ``lock_invocation`` and passes the values it decided from it, including those it keeps.

    Attributes:
        status: the new status. error, result, reconciliation: the verdict and its evidence.
        pending_completion: the handoff's pending details (None clears them, N20). external_completion: the
            recorded completion (N6). parked_at, overdue_at: aware UTC instants, or None; either needs the
            row's handoff (a CHECK refuses them without one).
    """

    status: InvocationStatus
    error: str | None
    result: Any
    reconciliation: dict[str, Any] | None
    pending_completion: dict[str, Any] | None
    external_completion: dict[str, Any] | None
    parked_at: datetime | None
    overdue_at: datetime | None


@dataclass(frozen=True)
class InvocationVerdict:
    """A lease-conditioned write of an invocation's status (host-spec C3, C4, J1): ``update_leased_invocation``.

    Attributes:
        status: the new status. error, result, reconciliation: its evidence (None stores NULL).
        expected: the statuses the row may be in now (default: ``running`` only, C10).
    """

    status: InvocationStatus
    error: str | None = None
    result: Any = None
    reconciliation: dict[str, Any] | None = None
    expected: frozenset[InvocationStatus] = frozenset({InvocationStatus.RUNNING})


@dataclass(frozen=True)
class AdapterScope:
    """Where an adapter row lives: its invocation and that invocation's tenant and space (host-spec I5)."""

    tenant_id: str
    space_id: str
    invocation_id: str


@dataclass(frozen=True)
class NewAdapterRow:
    """An adapter row to create, ``running`` before the provider is called (host-spec E5, E13).

    Attributes:
        id: the step's ``adapter_invocation_id`` (E2). step_index: from 0, in declared order. step_name,
        adapter_type, operation, vendor: what is called. input: the (redacted) step input. attempts: provider
        calls prepared so far (0 before the first).
    """

    id: str
    step_index: int
    step_name: str
    adapter_type: str
    operation: str
    vendor: str
    input: dict[str, Any]
    status: AdapterStatus = AdapterStatus.RUNNING
    attempts: int = 0
    output: dict[str, Any] | None = None
    error: str | None = None
    external_reference: str | None = None
    reconciliation: dict[str, Any] | None = None


@dataclass(frozen=True)
class CreateAdapterRow:
    """Mutation: insert ``row`` in the write's scope; a duplicate id is refused (host-spec I6)."""

    row: NewAdapterRow


@dataclass(frozen=True)
class UpdateAdapterRow:
    """Mutation: move row ``id`` to ``status`` with its evidence (host-spec E4).

    ``error`` is written as given (None clears it: the error belongs to the status it explains);
    ``output``, ``external_reference``, ``reconciliation`` and ``attempts`` keep their stored value when None.
    """

    id: str
    status: AdapterStatus
    error: str | None = None
    output: dict[str, Any] | None = None
    external_reference: str | None = None
    reconciliation: dict[str, Any] | None = None
    attempts: int | None = None


@dataclass(frozen=True)
class LeaseHeld:
    """Condition: the parent is ``running`` and ``lease`` is its command's current lease (host-spec I2, C3).

    The lease is the one the execution captured before it loaded the invocation, never one read back."""

    lease: Lease


@dataclass(frozen=True)
class VerdictHeld:
    """Condition: the parent still holds the verdict this execution wrote: exact ``status`` and ``error``, NULL-safe
    (host-spec I3). For verdict-first fallbacks and budget enrichment (sections K, L, H17; issue 13). The
    completion-digest guard (I4) needs the external-completion columns of issue 13: a non-None
    ``completion_digest`` is refused with ``NotImplementedError`` until then."""

    status: InvocationStatus
    error: str | None
    completion_digest: str | None = None
    completion_adapter_invocation_id: str | None = None


@dataclass(frozen=True)
class NewReconciliation:
    """An entry to append to a reconciliation log (host-spec K1 step 3, L13): ``HostPort.append_reconciliation``.

    Attributes:
        id: stable (derived from the fact it records): the first write of ``(id, log)`` wins, so the governance
            and the completion entry of one fact share it and a repeated attempt is a no-op (L13).
        tenant_id, space_id, invocation_id: the parent invocation and its scope (V: a parent in another scope
            refuses the entry). adapter_invocation_id: the adapter step it is about, when it is about one.
        log: which of the two logs. kind: why an operator's decision is needed. payload: a plain JSON object.
    """

    id: str
    tenant_id: str
    space_id: str
    invocation_id: str
    adapter_invocation_id: str | None
    log: ReconciliationLog
    kind: ReconciliationKind
    payload: dict[str, Any]


@dataclass(frozen=True)
class ReconciliationRecord:
    """A reconciliation log entry as stored (append-only: never updated nor deleted)."""

    id: str
    tenant_id: str
    space_id: str
    invocation_id: str
    adapter_invocation_id: str | None
    log: ReconciliationLog
    kind: ReconciliationKind
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class NewGovernanceRecord:
    """A governance evidence record to append (``HostPort.append_governance_record``; ADRs 0043-0045).

    Attributes:
        id: stable, derived from the invocation and what the record is about (a policy, an obligation, a step),
            never the attempt number: the first write of an id wins (host-spec §1.Y-6).
        kind: what it is. tenant_id, space_id, invocation_id: the parent and its scope (V1). name: the policy,
            obligation or step it is about (1..200 chars). payload: a plain JSON object, stored as the
            application gave it (host-spec P5: Host does not redact policy or HITL evidence).
        fingerprint: ``cp1:`` digest of the payload's deterministic part (attestations, G19), or None.
    """

    id: str
    kind: GovernanceRecordKind
    tenant_id: str
    space_id: str
    invocation_id: str
    name: str
    payload: dict[str, Any]
    fingerprint: str | None = None


@dataclass(frozen=True)
class GovernanceRecord:
    """A governance evidence record as stored (append-only: never updated nor deleted)."""

    id: str
    kind: GovernanceRecordKind
    tenant_id: str
    space_id: str
    invocation_id: str
    name: str
    payload: dict[str, Any]
    fingerprint: str | None
    created_at: datetime


@dataclass(frozen=True)
class AdapterWrite:
    """One conditional adapter-row write: ``HostPort.write_adapter_invocation`` (host-spec §I, I1).

    Attributes:
        scope: the parent's scope; both parent and row must match it (I5).
        mutation: ``CreateAdapterRow`` or ``UpdateAdapterRow``.
        condition: ``LeaseHeld`` or ``VerdictHeld``.
        expected_statuses: the row statuses an update may start from (None: any, still subject to I7).
    """

    scope: AdapterScope
    mutation: CreateAdapterRow | UpdateAdapterRow
    condition: LeaseHeld | VerdictHeld
    expected_statuses: frozenset[AdapterStatus] | None = None


@dataclass(frozen=True)
class AdapterRecord:
    """An adapter row as stored (host-spec E13)."""

    id: str
    tenant_id: str
    space_id: str
    invocation_id: str
    step_index: int
    step_name: str
    adapter_type: str
    operation: str
    vendor: str
    input: dict[str, Any]
    output: dict[str, Any] | None
    status: AdapterStatus
    error: str | None
    attempts: int
    external_reference: str | None
    reconciliation: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime

    @property
    def scope(self) -> AdapterScope:
        return AdapterScope(self.tenant_id, self.space_id, self.invocation_id)


@dataclass(frozen=True)
class Subject:
    """What an event is about (host-spec T7): e.g. ``("ActionInvocation", invocation_id)``."""

    subject_type: str
    subject_id: str


@dataclass(frozen=True)
class NewEvent:
    """An event to append (host-spec T7). ``id`` is stable (derived): the first append of an id wins (T1, T4).

    Attributes:
        occurred_at: when it happened (default: the store's now at append). actor: an opt-in disclosure.
    """

    id: str
    tenant_id: str
    space_id: str
    subject: Subject
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    occurred_at: datetime | None = None
    actor: dict[str, Any] | None = None


@dataclass(frozen=True)
class EventSpace:
    """One (tenant, space) of the event log and the last sequence given in it (``host_event_sequences``): an
    operator's way in to ``list_events``, which reads one space at a time."""

    tenant_id: str
    space_id: str
    last_sequence: int


@dataclass(frozen=True)
class EventRecord:
    """An event as stored: ``sequence`` per (tenant, space), assigned in the appending transaction, at the
    latest as it commits (T7; ADR 0096)."""

    id: str
    tenant_id: str
    space_id: str
    sequence: int
    subject: Subject
    type: str
    occurred_at: datetime
    recorded_at: datetime
    payload: dict[str, Any]
    actor: dict[str, Any] | None


@dataclass(frozen=True)
class EventOutboxRecord:
    """An event's publication row (host-spec T3, T8); the relay of issue 15 moves it."""

    event_id: str
    destination: str
    headers: dict[str, Any]
    status: EventOutboxStatus
    attempts: int
    available_at: datetime
    created_at: datetime
    #: The relay's columns (issue 15, ADR 0038); the lease token is never read out.
    lease_owner: str | None = None
    lease_until: datetime | None = None
    published_at: datetime | None = None
    last_error: str | None = None
    updated_at: datetime | None = None
    #: The event's scope and type, so that an operator's listing needs no second read.
    tenant_id: str | None = None
    space_id: str | None = None
    event_type: str | None = None
    #: Why the stored headers cannot be read back (``headers`` is then empty): a row written past the events
    #: port. None for every row the port wrote. The relay sets such a row aside (ADR 0101); listings show it.
    unreadable: str | None = None


#: Spaces the conformance probes write to (host-spec U30): the relay never claims nor requeues their rows.
PROBE_SPACE_PREFIX = "event-append-probe-"


def is_probe_space(space_id: str) -> bool:
    """True when ``space_id`` is a conformance probe's space (starts with ``PROBE_SPACE_PREFIX``, case-sensitive)."""
    return space_id.startswith(PROBE_SPACE_PREFIX)


@dataclass(frozen=True)
class EventLease:
    """A relay's claim on one publication row: ``token`` fences every write (private, ``repr=False``).

    ``attempts`` is the row's attempt count including this claim (1 on the first).
    """

    event_id: str
    owner: str
    token: str = field(repr=False)
    until: datetime
    attempts: int


@dataclass(frozen=True)
class ClaimedEvent:
    """What a claim hands the relay: the lease, the event as stored and its publication row.

    ``unreadable``: why the event's or its row's stored JSON (payload, actor, headers) cannot be read back, a
    row written past the events port; the unreadable values are then empty (``{}``, or None for the actor).
    None for every row the port wrote. The relay dead-letters such a row unpublished instead of failing the
    whole claim, which stopped every relay at it (ADR 0101).
    """

    lease: EventLease
    event: EventRecord
    outbox: EventOutboxRecord
    unreadable: str | None = None


@dataclass(frozen=True)
class EventOutboxSummary:
    """The relay's backlog by the store's clock ``now``: rows per status, and each status's oldest creation."""

    now: datetime
    counts: dict[str, int]
    oldest: dict[str, datetime]

    @property
    def backlog(self) -> int:
        """Rows not yet published nor dead-lettered (pending, retry_pending, processing)."""
        return sum(self.counts.get(s, 0) for s in ("pending", "retry_pending", "processing"))

    @property
    def oldest_unpublished_at(self) -> datetime | None:
        """When the oldest row of the backlog was created, or None when the backlog is empty."""
        times = [self.oldest[s] for s in ("pending", "retry_pending", "processing") if s in self.oldest]
        return min(times) if times else None

    @property
    def oldest_unpublished_age_seconds(self) -> float | None:
        """Seconds since the oldest row of the backlog was created, or None when the backlog is empty."""
        oldest = self.oldest_unpublished_at
        return None if oldest is None else (self.now - oldest).total_seconds()


@dataclass(frozen=True)
class HostHealthCounts:
    """The host's health counts, read in one snapshot (host-spec W2, §1.Y-15; ADR 0051). Every field is a count
    of rows as of the reading unit's ``now()``.

    Attributes:
        open_reconciliations: invocations ``reconciliation_required`` (open work for an operator).
        overdue_handoffs: running handoffs past their completion deadline that the deadline sweep has not
            settled yet (``list_overdue_handoffs``' candidates: no live lease, ``overdue_at`` unset).
        stuck_runs: running invocations that are neither parked nor leased (no command, a finished one, or a
            lease expired before ``now - stuck_after``) and unchanged since before ``now - stuck_after``: an
            inline caller or worker that died and that no worker has taken over. Parked handoffs never count.
        budget_exhaustions: invocations still ``reconciliation_required`` with kind
            ``recovery_budget_exhausted`` whose verdict was written in the last ``window`` (H4).
        dead_letters: event outbox rows ``dead_lettered`` outside conformance probe spaces (T9, U29, U30).
        probe_dead_letters: the same in probe spaces (``event-append-probe-...``), which are expected: the
            conformance checks dead-letter their own rows at cleanup.
    """

    open_reconciliations: int
    overdue_handoffs: int
    stuck_runs: int
    budget_exhaustions: int
    dead_letters: int
    probe_dead_letters: int


# ── operator resolutions (migration 0007, ADR 0048; host-spec §1.Y-13) ──
@dataclass(frozen=True)
class NewResolution:
    """An operator's resolution of a ``reconciliation_required`` invocation: ``HostPort.record_resolution``.

    Attributes:
        id: stable, derived from the invocation (one resolution per invocation). tenant_id, space_id,
            invocation_id: the invocation and its scope. outcome: ``succeeded`` or ``failed``. operator: who
            decided (1..200 chars). note: why (1..2000 chars). evidence: a plain JSON object (what was found at
            the provider) or None. request_digest: the digest of the request, so that a repeat of the identical
            request is recognised (ADR 0048).
    """

    id: str
    tenant_id: str
    space_id: str
    invocation_id: str
    outcome: InvocationStatus
    operator: str
    note: str
    evidence: dict[str, Any] | None
    request_digest: str


@dataclass(frozen=True)
class ResolutionRecord:
    """A resolution as stored (append-only), with the verdict it settled: ``prior_status`` (always
    ``reconciliation_required``), ``prior_error`` and ``prior_reconciliation`` as the invocation held them."""

    id: str
    tenant_id: str
    space_id: str
    invocation_id: str
    outcome: InvocationStatus
    operator: str
    note: str
    evidence: dict[str, Any] | None
    prior_status: InvocationStatus
    prior_error: str | None
    prior_reconciliation: dict[str, Any] | None
    request_digest: str
    created_at: datetime
