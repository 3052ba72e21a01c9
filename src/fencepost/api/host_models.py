"""Request and response models of the action host's operator routes (``/v1/host/...``; ADR 0049).

A response is built by validating the host's plain JSON (``InvocationView.as_json``, ``operator.history``,
``QueueEntry.as_json``) against these models, so a view that drifts from its model fails in tests, not on a
client. Free-form JSON the application or a provider chose (params, results, evidence) stays an object.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

InvocationStatus = Literal["pending", "awaiting_approval", "running", "succeeded", "failed", "reconciliation_required"]
StepStatus = Literal["running", "succeeded", "failed", "ambiguous"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ── requests ──
class SubmitInvocation(_Model):
    """Submit an action, dispatched to the workers (host-spec A2, B1); the key is the ``Idempotency-Key`` header."""

    action_id: str = Field(min_length=1, max_length=200, description="The action id, e.g. shop.charge-order.")
    params: dict[str, Any] = Field(default_factory=dict, description="The action's params (validated by it).")
    actor: str = Field(min_length=1, max_length=200, description="Who submits (bound to the key).")
    authority: str = Field(default="", max_length=200, description="The authority binding (bound to the key).")
    tenant: str = Field(default="default", min_length=1, max_length=200)
    space: str = Field(default="default", min_length=1, max_length=200)
    version: int | None = Field(default=None, ge=1, le=1_000_000,
                                description="The action version (default: the highest registered).")


class ResolveInvocation(_Model):
    """An operator's resolution of a reconciliation_required invocation (host-spec §1.Y-13; ADR 0048)."""

    outcome: Literal["succeeded", "failed"] = Field(description="succeeded: the effect happened at the provider; "
                                                                "failed: it did not.")
    operator: str = Field(min_length=1, max_length=200, description="Who decides, e.g. ops:alice.")
    note: str = Field(min_length=1, max_length=2000, description="What was found at the provider.")
    evidence: dict[str, Any] | None = Field(default=None, description="What was found, e.g. the provider's charge.")


class DecideApproval(_Model):
    """An approver's decision on an awaiting_approval invocation (host-spec P; ADRs 0044, 0052). The approver and
    authority are declared by the caller and recorded; the API token authenticates the caller, not them."""

    approver: str = Field(min_length=1, max_length=200, description="Who decides, e.g. ops:alice (recorded).")
    authority: str = Field(min_length=1, max_length=200,
                           description="The authority presented: must equal the one the policy requires.")
    note: str = Field(default="", max_length=2000, description="Why (recorded with the decision).")


# ── responses ──
class Step(_Model):
    name: str
    adapter_invocation_id: str = Field(description="The provider's idempotency key for this step: look it up there.")
    status: StepStatus
    attempts: int
    error: str | None
    external_reference: str | None = Field(description="The provider's own id for the effect, when it gave one.")
    output: dict[str, Any] | None


class StateTransition(_Model):
    """The invocation's ``StateTransitioned`` fact (host-spec A17, A19; ADR 0077)."""

    event_id: str
    sequence: int
    occurred_at: str
    from_: str | None = Field(alias="from", description="The entity's state before this invocation changed it "
                                                       "(null: it had none).")
    to: str = Field(description="The binding's target.")
    set_by: Literal["host", "handler", "earlier"] = Field(
        description="host: the fact set it; handler: the handler had set it (kept); earlier: the entity already "
                    "had it before this invocation (kept).")
    at: Literal["finalization", "parking"]


class RecordedState(_Model):
    """The entity's recorded state now (ADR 0077)."""

    state: str
    previous_state: str | None = Field(description="Its state before the invocation that last changed it.")
    updated_by_invocation: str
    updated_at: str


class State(_Model):
    """A state-bound invocation's binding, its fact and its entity's recorded state (ADR 0077)."""

    subject: str = Field(description="The kind of entity, e.g. order.")
    entity_id: str
    target: str = Field(description="The state the invocation's success (or parked handoff) records.")
    transition: StateTransition | None = Field(description="The StateTransitioned fact; null when the host "
                                                           "recorded none (not finished, failed, "
                                                           "reconciliation_required, resolved by an operator).")
    recorded: RecordedState | None = Field(description="The entity's recorded state now (another invocation may "
                                                       "have changed it since); null when it has none.")


class Invocation(_Model):
    id: str
    tenant_id: str
    space_id: str
    action_id: str
    action_version: int
    idempotency_key: str
    actor: str
    authority: str
    params: dict[str, Any]
    params_digest: str
    mode: Literal["dispatch", "inline"]
    status: InvocationStatus
    error: str | None
    result: Any = Field(description="The handler's result once succeeded (any JSON), else null.")
    reconciliation: dict[str, Any] | None = Field(description="Why an operator is needed (kind, evidence).")
    attempt_count: int = Field(description="Worker claims, the first included (host-spec C1).")
    lease_owner: str | None
    created_at: str
    updated_at: str
    steps: list[Step]
    handoff: dict[str, Any] | None
    parked: bool
    external_completion: dict[str, Any] | None
    resolution: dict[str, Any] | None = Field(description="The operator's resolution (outcome, operator, note, "
                                                          "evidence, resolved_at, prior verdict), or null.")
    state: State | None = Field(description="A state-bound action's entity and its transition (ADR 0077); null "
                                            "for an action without a state binding.")


class InvocationPage(_Model):
    items: list[Invocation] = Field(description="Newest first; steps are omitted (read one invocation for them).")
    next_cursor: str | None = Field(description="Pass as cursor for the next page; null on the last page.")


class Event(_Model):
    id: str
    sequence: int
    type: str
    subject_type: str
    subject_id: str
    occurred_at: str
    payload: dict[str, Any]


class Reconciliation(_Model):
    id: str
    log: Literal["governance", "completion"]
    kind: str
    adapter_invocation_id: str | None
    payload: dict[str, Any]
    created_at: str


class Delivery(_Model):
    """One delivery of the invocation's command (``outbox.history.lease_history``)."""

    delivery: int
    owner: str | None
    claim: str
    claimed_at: str | None
    heartbeats: int
    last_heartbeat_at: str | None
    lease_until: str | None
    ended: str
    ended_at: str | None


class Lookup(_Model):
    """What to look up at a provider to judge one step."""

    step: str
    vendor: str
    operation: str
    status: str
    adapter_invocation_id: str
    external_reference: str | None


class InvocationDetail(Invocation):
    events: list[Event] = Field(description="The invocation's and its steps' events, in log order.")
    reconciliations: list[Reconciliation] = Field(description="Both reconciliation logs, oldest first.")
    lease_timeline: list[Delivery] = Field(description="One entry per delivery of its command, oldest first.")
    lookups: list[Lookup]


class QueueEntry(_Model):
    invocation: Invocation
    kind: str | None = Field(description="The reconciliation kind, e.g. adapter_outcome_ambiguous.")
    reason: str | None = Field(description="The verdict's error.")
    waiting_since: str
    lookups: list[Lookup]


class ReconciliationQueue(_Model):
    items: list[QueueEntry] = Field(description="Oldest verdict first.")


class ApprovalEntry(_Model):
    """One open approval request (``ApprovalRequest.as_json`` with the invocation; host-spec P; ADR 0052)."""

    invocation: Invocation
    action_id: str
    policy: str = Field(description="The policy that asked for the approval.")
    authority: str = Field(description="The authority an approver must present.")
    reason: str = Field(description="The policy's reason.")
    requested_at: str
    expires_at: str = Field(description="After this instant (the store's clock) the request can no longer be "
                                        "decided; the approvals sweep ends the invocation failed.")
    expired: bool = Field(description="expires_at has passed by the store's clock (the sweep has not run yet).")


class Approvals(_Model):
    items: list[ApprovalEntry] = Field(description="Oldest request first.")
