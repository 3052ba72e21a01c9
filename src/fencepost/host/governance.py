"""Governance before the handler: policies, the mutation footprint, the deferral rule and obligations
(host-spec D1-D10, P1, P2, O; §1.Y-6; ADR 0043).

A ``Policy`` is an object with a ``name`` and ``evaluate(ctx) -> Allow | Deny | RequireApproval | Obligations``.
An action lists its own (``Action.policies``); a host may add policies for every action
(``Host(policies=...)``), evaluated first. The order of one governed execution (host-spec §G step 7, after the
ambiguity scan and the non-idempotent interruption gates, §1.Y-19):

1. **The retry region** (D1, D5, D6): the persisted decisions are read; the action's ``mutation_governance``
   callback runs only when no footprint is persisted yet, and its footprint is written as one record (reused
   by every later attempt); then **every** policy of the batch is evaluated, with nothing written in between.
   A ``TransientGovernanceError`` raised here defers the invocation when it is leased by a worker claim,
   declared idempotent, not an approval resume and below ``retryable_execution_max_attempts``: the execution
   stops, recording nothing, and leaves its lease to expire; the next claim (which increments
   ``attempt_count``) runs it again. No separate retry, no backoff (D1, D10). Otherwise the invocation ends
   ``failed`` with the reason retry was refused (D2, D3, P2). Any other error of a policy or of the
   mutation-governance callback (``PolicyDenied`` among them) is an application governance failure:
   ``failed``, never deferred (D4).
2. **Policy evidence** (D6, D7): only then one record per policy, under an id derived from the invocation and
   the policy's name without the attempt number (§1.Y-6), so that a later attempt's append is a no-op. A
   store error here keeps its own failure semantics: ``failed`` while no effect is recorded,
   ``RecoverableFinalization`` once one is (D7, G15, D11).
3. **Decisions**: a ``Deny`` ends ``failed`` with a ``ComplianceBlocked`` event in the verdict's unit; a
   ``RequireApproval`` without a persisted decision parks the invocation ``awaiting_approval``
   (``fencepost.host.approvals``); a persisted approval is reused (P1). ``Obligations`` are persisted and
   handed to the action's ``obligation_resolver``; any error of the resolver, retryable or not, fails the
   invocation terminally and keeps this attempt's policy records (D8).

``Host.preview`` evaluates the same batch outside the execution: its errors reach the caller as raised and
nothing is written (D9).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import InvalidInput, LeaseLost, RecoverableFinalization, StoreUnavailable
from fencepost.core.ids import derived_id
from fencepost.core.statuses import GovernanceRecordKind, InvocationStatus
from fencepost.host.finalization import SettlementRefused, lock_running
from fencepost.host.lifecycle import COMPLIANCE_BLOCKED, invocation_event
from fencepost.store.host_records import AdapterRecord, GovernanceRecord, InvocationRecord, NewGovernanceRecord
from fencepost.store.ports import FencedUnit

if TYPE_CHECKING:  # the execution hands itself in; this module never imports it at run time
    from fencepost.host.action import Action
    from fencepost.host.execution import Execution

#: The default of ``HostConfig.retryable_execution_max_attempts`` (host-spec H2).
DEFAULT_RETRYABLE_EXECUTION_MAX_ATTEMPTS = 5


class TransientGovernanceError(Exception):
    """A retryable pre-policy governance error (host-spec D1): a policy or the mutation-governance callback could
    not decide now (a rate-limited rules service, a timeout). Raised in the retry region it may defer the
    invocation; raised by an obligation resolver it fails it (D8)."""


class PolicyDenied(Exception):
    """An ordinary application governance error a policy may raise instead of returning ``Deny``: terminal,
    never deferred (host-spec D4)."""


class GovernanceDeferred(RecoverableFinalization):
    """The execution stopped in the governance retry region and recorded nothing (host-spec D1): the lease is
    left to expire and the next claim runs the invocation again. The worker treats it as any
    ``RecoverableFinalization``."""


# ── decisions ──

@dataclass(frozen=True)
class Allow:
    """The policy allows the invocation."""

    reason: str = ""


@dataclass(frozen=True)
class Deny:
    """The policy refuses the invocation: ``failed`` with ``ComplianceBlocked`` (no deferral, D4)."""

    reason: str


@dataclass(frozen=True)
class RequireApproval:
    """A human must approve before the handler runs (host-spec P, §1.Y-5; ADR 0044).

    Attributes:
        authority: who may approve: an approver must present exactly this authority string (1..200 chars).
        expires_in: how long the request stays open (1 second .. 366 days); afterwards it can no longer be
            approved and the approvals sweep ends the invocation ``failed``.
        reason: shown to the approver.
    """

    authority: str
    expires_in: timedelta = timedelta(hours=24)
    reason: str = ""

    def __post_init__(self) -> None:
        if not self.authority or len(self.authority) > 200:
            raise InvalidInput("an approval authority is 1 to 200 characters")
        if not timedelta(seconds=1) <= self.expires_in <= timedelta(days=366):
            raise InvalidInput("an approval expires after 1 second to 366 days")


@dataclass(frozen=True)
class Obligations:
    """The invocation may run, but each named obligation must be satisfied before it can succeed (host-spec O;
    ADR 0045): by the action's ``obligation_resolver`` before the handler, or by an execution attestation's
    ``satisfies_obligations`` after its step."""

    names: tuple[str, ...]
    reason: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        if not self.names or any(not n or len(n) > 100 for n in self.names):
            raise InvalidInput("obligations are 1 or more names of 1 to 100 characters")


Decision = Allow | Deny | RequireApproval | Obligations


@dataclass(frozen=True)
class PolicyContext:
    """What a policy, the mutation-governance callback and an obligation resolver are given.

    Attributes:
        invocation_id: the invocation (for a preview: the id a submission with the given key would get).
        tenant_id, space_id, action_id, action_version, actor, authority: the submission's identity.
        params: the validated params as stored (JSON). attempt: ``attempt_count`` now (0 inline or preview).
        approval_resume: this execution resumes an approved invocation. preview: ``Host.preview`` (nothing is
            written). footprint: the persisted (or just computed) mutation footprint, None without one.
    """

    invocation_id: str
    tenant_id: str
    space_id: str
    action_id: str
    action_version: int
    actor: str
    authority: str
    params: dict[str, Any]
    attempt: int
    approval_resume: bool = False
    preview: bool = False
    footprint: dict[str, Any] | None = None


@runtime_checkable
class Policy(Protocol):
    """A governance policy (host-spec §1.Y-6): ``name`` (1..100 chars, unique among an invocation's policies;
    it names the policy record) and ``evaluate``. It must have no effect outside its return value: it may be
    evaluated again on a later attempt, and by ``Host.preview``."""

    name: str

    def evaluate(self, ctx: PolicyContext) -> Decision:
        """Decide. Raises ``TransientGovernanceError`` to ask for a later attempt (D1), anything else to fail
        the invocation (D4)."""
        ...


MutationGovernance = Callable[[PolicyContext], Mapping[str, Any]]
ObligationResolver = Callable[[PolicyContext, tuple[str, ...]], Iterable[str]]


@dataclass(frozen=True)
class PolicyOutcome:
    """One policy's decision in a batch, in evaluation order."""

    policy: str
    decision: Decision

    def as_json(self) -> dict[str, Any]:
        decision = self.decision
        payload: dict[str, Any] = {"policy": self.policy, "decision": _decision_name(decision),
                                   "reason": decision.reason}
        if isinstance(decision, RequireApproval):
            payload.update(authority=decision.authority, expires_in_seconds=decision.expires_in.total_seconds())
        if isinstance(decision, Obligations):
            payload["obligations"] = list(decision.names)
        return payload


def _decision_name(decision: Decision) -> str:
    return {Allow: "allow", Deny: "deny", RequireApproval: "require_approval", Obligations: "obligations"}[
        type(decision)]


# ── ids ──

def governance_record_id(kind: GovernanceRecordKind, invocation_id: str, name: str) -> str:
    """The stable id of one governance record: the invocation, the kind and what it is about (a policy, an
    obligation, a step), never the attempt number, so every attempt dedups on it (host-spec §1.Y-6)."""
    return derived_id("gov", "host.governance-record/v1", {"invocation": invocation_id, "kind": str(kind),
                                                          "name": name})


def policy_record_id(invocation_id: str, policy: str) -> str:
    """The id of ``policy``'s record for the invocation (host-spec §1.Y-6: per invocation and policy)."""
    return governance_record_id(GovernanceRecordKind.POLICY_RECORD, invocation_id, policy)


def record(invocation: InvocationRecord, kind: GovernanceRecordKind, name: str, payload: dict[str, Any],
           fingerprint: str | None = None) -> NewGovernanceRecord:
    """A ``NewGovernanceRecord`` of ``invocation`` under its stable id."""
    return NewGovernanceRecord(id=governance_record_id(kind, invocation.id, name), kind=kind,
                               tenant_id=invocation.tenant_id, space_id=invocation.space_id,
                               invocation_id=invocation.id, name=name, payload=payload, fingerprint=fingerprint)


# ── evaluation ──

def evaluate_batch(policies: Sequence[Policy], ctx: PolicyContext) -> list[PolicyOutcome]:
    """Evaluate every policy in order and return the whole batch (host-spec D6): nothing is written here.

    Raises:
        whatever a policy raises (``TransientGovernanceError``, ``PolicyDenied``, any error), at once.
        TypeError: a policy returned something that is not a ``Decision``.
    """
    outcomes = []
    for policy in policies:
        decision = policy.evaluate(ctx)
        if not isinstance(decision, Allow | Deny | RequireApproval | Obligations):
            raise TypeError(f"policy {policy.name} returned {type(decision).__name__}, not a Decision")
        outcomes.append(PolicyOutcome(policy.name, decision))
    return outcomes


def check_policies(policies: Iterable[Any]) -> tuple[Policy, ...]:
    """``policies`` as a tuple, each a ``Policy`` with a unique name of 1..100 chars.

    Raises:
        InvalidInput: one is not a policy, or two share a name.
    """
    checked = tuple(policies)
    names = []
    for policy in checked:
        name = getattr(policy, "name", None)
        if not isinstance(policy, Policy) or not isinstance(name, str) or not 1 <= len(name) <= 100:
            raise InvalidInput(f"{policy!r} is not a policy: it needs a name (1 to 100 chars) and evaluate(ctx)")
        names.append(name)
    if len(set(names)) != len(names):
        raise InvalidInput("policy names must be unique: they name the policy records")
    return checked


def refusal_reason(*, leased: bool, idempotent: bool, approval_resume: bool, attempt: int, cap: int) -> str | None:
    """Why a transient governance error may not defer the invocation (host-spec D1-D3, P2), or None when it may.

    Args:
        leased: the execution runs under a worker claim (an inline caller's own run is not one: its lease proves
            no recovery worker exists). idempotent: the action's flag. approval_resume: this execution resumes an
            approval under its temporary lease (D3). attempt: ``attempt_count`` now. cap:
            ``retryable_execution_max_attempts``.
    """
    if approval_resume:
        return "approval resume: its temporary lease does not establish that a recovery worker exists"
    if not leased:
        return "unleased: an inline run has no worker claim to defer to"
    if not idempotent:
        return "not idempotent: the action is not declared idempotent"
    if attempt >= cap:
        return f"at the cap: attempt {attempt} of retryable_execution_max_attempts {cap}"
    return None


# ── the governance step of an execution ──

@dataclass(frozen=True)
class Governed:
    """What governance lets the execution go on with: the obligations attached, and those already satisfied."""

    obligations: tuple[str, ...] = ()
    satisfied: frozenset[str] = field(default_factory=frozenset)


def policy_context(invocation: InvocationRecord, *, attempt: int, approval_resume: bool = False,
                   footprint: dict[str, Any] | None = None, preview: bool = False) -> PolicyContext:
    """The ``PolicyContext`` of a stored invocation."""
    return PolicyContext(invocation_id=invocation.id, tenant_id=invocation.tenant_id, space_id=invocation.space_id,
                         action_id=invocation.action_id, action_version=invocation.action_version,
                         actor=invocation.actor, authority=invocation.authority, params=dict(invocation.params),
                         attempt=attempt, approval_resume=approval_resume, preview=preview, footprint=footprint)


def _by_kind(records: Iterable[GovernanceRecord], kind: GovernanceRecordKind) -> dict[str, GovernanceRecord]:
    return {r.name: r for r in records if r.kind is kind}


def _append_all(items: Sequence[NewGovernanceRecord]) -> Callable[[FencedUnit], None]:
    def unit(tx: FencedUnit) -> None:
        lock_running(tx, items[0].invocation_id)
        for item in items:
            tx.host.append_governance_record(item)
    return unit


class Governance:
    """The governance step of one execution (see the module docstring); ``run`` is its only entry.

    Args:
        execution: the running ``Execution`` (its lease, context, settlement and error-text hook).
        policies: the host's policies, then the action's.
    """

    def __init__(self, execution: Execution, policies: Sequence[Policy]) -> None:
        self.execution = execution
        self.policies = tuple(policies)

    def run(self, invocation: InvocationRecord, action: Action,
            applied: list[AdapterRecord]) -> Governed | InvocationStatus:
        """Govern the invocation before its handler.

        Returns:
            ``Governed`` to go on; otherwise the status it settled (``failed``), parked (``awaiting_approval``).
        Raises:
            GovernanceDeferred: a transient error deferred it (D1). RecoverableFinalization: a store error once an
            effect is recorded (D7, G15). StoreUnavailable, LeaseLost: from the store, as any execution unit.
        """
        ex = self.execution
        if not self.policies and action.mutation_governance is None:
            return Governed()
        records = ex.ctx.store.read(lambda tx: tx.host.list_governance_records(invocation.id))
        attempt = ex.lease.delivery
        try:
            footprint = self._footprint(invocation, action, records, attempt)
            ctx = policy_context(invocation, attempt=attempt, approval_resume=ex.approval_resume,
                                 footprint=footprint)
            outcomes = evaluate_batch(self.policies, ctx)
        except TransientGovernanceError as error:
            reason = refusal_reason(leased=ex.lease.delivery >= 1, idempotent=action.idempotent,
                                    approval_resume=ex.approval_resume, attempt=attempt,
                                    cap=ex.runtime.retryable_execution_max_attempts)
            if reason is None:
                raise GovernanceDeferred(f"governance deferred on attempt {attempt}: {error}; the lease is left to "
                                         "expire and the next claim evaluates again",
                                         invocation_id=invocation.id) from error
            return ex._fail(invocation, ex._governance_text(
                f"governance retry refused ({reason}): {type(error).__name__}: {error}", source="execution"),
                applied)
        except (StoreUnavailable, LeaseLost, SettlementRefused, RecoverableFinalization):
            raise  # the store's, not governance's (D7, D11)
        except Exception as error:  # an application governance error (D4): terminal
            return ex._fail(invocation, ex._governance_text(f"governance: {type(error).__name__}: {error}",
                                                       source="execution"), applied)
        stored = self._write_policy_records(invocation, outcomes, applied)
        if isinstance(stored, InvocationStatus):
            return stored
        return self._decide(invocation, action, outcomes, records, ctx, applied)

    # ── the retry region ──
    def _footprint(self, invocation: InvocationRecord, action: Action, records: list[GovernanceRecord],
                   attempt: int) -> dict[str, Any] | None:
        """The persisted mutation footprint, else the callback's, written as one record (D5)."""
        persisted = _by_kind(records, GovernanceRecordKind.MUTATION_FOOTPRINT).get(action.id)
        if persisted is not None:
            return dict(persisted.payload.get("footprint") or {})
        if action.mutation_governance is None:
            return None
        ex = self.execution
        ctx = policy_context(invocation, attempt=attempt, approval_resume=ex.approval_resume)
        footprint = dict(action.mutation_governance(ctx))
        canonical_json(footprint)  # TypeError on anything that is not plain JSON: an application error
        item = record(invocation, GovernanceRecordKind.MUTATION_FOOTPRINT, action.id, {"footprint": footprint})
        ex.ctx.fenced(_append_all([item]), name="host.governance.footprint")
        return footprint

    # ── policy evidence ──
    def _write_policy_records(self, invocation: InvocationRecord, outcomes: list[PolicyOutcome],
                              applied: list[AdapterRecord]) -> InvocationStatus | None:
        """One record per policy, only after the whole batch evaluated (D6); a store error is never a deferral
        (D7): ``failed`` with no effect recorded, ``RecoverableFinalization`` with one (G15)."""
        if not outcomes:
            return None
        ex = self.execution
        items = [record(invocation, GovernanceRecordKind.POLICY_RECORD, o.policy, o.as_json()) for o in outcomes]
        try:
            ex.ctx.fenced(_append_all(items), name="host.governance.policy")
        except StoreUnavailable as error:
            if applied:
                raise RecoverableFinalization(f"the policy records could not be written after an applied effect: "
                                              f"{error}", error, invocation_id=invocation.id) from error
            return ex._fail(invocation, ex._governance_text(f"the policy records could not be written: {error}",
                                                       source="execution"), applied)
        return None

    # ── decisions ──
    def _decide(self, invocation: InvocationRecord, action: Action, outcomes: list[PolicyOutcome],
                records: list[GovernanceRecord], ctx: PolicyContext,
                applied: list[AdapterRecord]) -> Governed | InvocationStatus:
        from fencepost.host import approvals  # approvals builds on this module

        ex = self.execution
        denied = [o for o in outcomes if isinstance(o.decision, Deny)]
        if denied:
            first = denied[0]
            text = ex._governance_text(f"policy {first.policy} denied: {first.decision.reason}", source="execution")
            event = invocation_event(invocation, COMPLIANCE_BLOCKED, {
                "policies": [o.as_json() for o in denied]}, part="policy")
            return ex._fail(invocation, text, applied, events=(event,))
        decisions = _by_kind(records, GovernanceRecordKind.APPROVAL_DECISION)
        for outcome in outcomes:
            if not isinstance(outcome.decision, RequireApproval):
                continue
            decided = decisions.get(outcome.policy)
            if decided is None:  # P1: no persisted HITL decision yet: ask for one
                return approvals.request(ex, invocation, outcome.policy, outcome.decision)
            if decided.payload.get("decision") != "approved":
                return ex._fail(invocation, ex._governance_text(
                    f"approval of policy {outcome.policy} was {decided.payload.get('decision')}",
                    source="execution"), applied)
        names: list[str] = []
        for outcome in outcomes:
            if isinstance(outcome.decision, Obligations):
                names += [n for n in outcome.decision.names if n not in names]
        if not names:
            return Governed()
        return self._obligations(invocation, action, tuple(names), records, ctx, applied)

    def _obligations(self, invocation: InvocationRecord, action: Action, names: tuple[str, ...],
                     records: list[GovernanceRecord], ctx: PolicyContext,
                     applied: list[AdapterRecord]) -> Governed | InvocationStatus:
        """Persist the obligations, then resolve the open ones (D7, D8)."""
        ex = self.execution
        satisfied = set(_by_kind(records, GovernanceRecordKind.OBLIGATION_SATISFIED))
        items = [record(invocation, GovernanceRecordKind.OBLIGATION, n, {"obligation": n}) for n in names]
        try:
            ex.ctx.fenced(_append_all(items), name="host.governance.obligations")
        except StoreUnavailable as error:
            if applied:
                raise RecoverableFinalization(f"the obligations could not be written after an applied effect: "
                                              f"{error}", error, invocation_id=invocation.id) from error
            return ex._fail(invocation, ex._governance_text(f"the obligations could not be written: {error}",
                                                       source="execution"), applied)
        open_names = tuple(n for n in names if n not in satisfied)
        if open_names and action.obligation_resolver is not None:
            try:
                resolved = [n for n in action.obligation_resolver(ctx, open_names) if n in open_names]
            except Exception as error:  # D8: retryable or not, terminal, with this attempt's policy records
                return ex._fail(invocation, ex._governance_text(
                    f"obligation resolver failed: {type(error).__name__}: {error}", source="execution"), applied)
            if resolved:
                found = [record(invocation, GovernanceRecordKind.OBLIGATION_SATISFIED, n,
                                {"obligation": n, "by": "resolver"}) for n in resolved]
                ex.ctx.fenced(_append_all(found), name="host.governance.obligations")
                satisfied.update(resolved)
        return Governed(obligations=names, satisfied=frozenset(satisfied))
