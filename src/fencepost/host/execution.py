"""One execution of an invocation under a lease: claim, recovery scan, handler, steps, finalization (host-spec
A, C, E, F, G, J; ADR 0022).

The order of work (host-spec §G; the budget check, H3, is the worker's, before ``handle`` runs):

1. **Credentials first** (C3). The lease is the one the command was claimed (or inline-inserted) with, captured
   in the ``CommandContext`` before the invocation is loaded; every write names it, never a token read back.
2. **Claim unit** (``host.claim``): lock the invocation, confirm it is ``running`` under this lease (``pending``
   -> ``running`` on a first claim) and read every step row: the checkpoints come before anything else.
3. **Resolve the action**; **ambiguity scan and non-idempotent gates** (``fencepost.host.recovery``, G1-G8).
4. **Handler** (``host.handler``): for a state-bound action its guard first, under the entity's lock (a refusal
   fails closed: ``failed``, no handler, no adapter; A13, A14); its domain writes commit in their own fenced
   unit, before any adapter (A17); ``DecisionRequired`` ends ``reconciliation_required`` (A11); any other error
   is a handler failure (A9, A10).
5. **Steps in order**. A ``succeeded`` checkpoint is reused, never called again (E7, G10, G13). Otherwise the
   row is written ``running`` **before** the provider is called (E5), each retry is preceded by a preparation
   write, the provider gets the stable ``adapter_invocation_id`` (E2, C5), and each reply is classified by
   ``fencepost.host.outcome`` alone (F). A success is checkpointed and the loop goes on; a failure, an unknown
   outcome or a handoff settles the invocation (``fencepost.host.finalization``).
6. **Finalization** (``host.finalize``): repaired step events, declared events, the state binding's
   ``StateTransitioned`` fact and the entity's state (A17, A19; ADR 0077), the verdict and the command's finish
   in one transaction, the fence last (J1, J3). Parking a handoff (``host.park``) records the fact the same way.

Anything that cannot be recorded truthfully raises ``RecoverableFinalization`` and records nothing more: a lost
lease (C8), a refused lease- or status-conditioned write (C4, C10), a store error (G15, J4). The lease is then
left to expire and the next claim recovers the invocation (C11).

Crash points (``FENCEPOST_CRASHPOINT``, host-spec §2.9): each named unit's ``<name>:before-commit`` and
``:after-commit``, and per step ``host.step:<step>:after-row``, ``host.step:<step>:after-provider-call`` and
``host.step:<step>:after-checkpoint``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from fencepost.core.canonical import canonical_json, storable_text
from fencepost.core.crashpoints import crashpoint
from fencepost.core.errors import (
    IntegrityViolation,
    LeaseLost,
    NotFound,
    RecoverableFinalization,
    StoreUnavailable,
    in_chain,
)
from fencepost.core.statuses import AdapterStatus, CommandStatus, InvocationStatus, ReconciliationKind
from fencepost.host import telemetry
from fencepost.host.action import (
    Action,
    ActionRegistry,
    AdapterStep,
    DecisionRequired,
    HandlerContext,
    StepInputContext,
)
from fencepost.host.adapter import Adapter, AdapterCall
from fencepost.host.attestation import Attesting
from fencepost.host.breakers import CIRCUIT_OPEN, CIRCUIT_OPEN_UNKNOWN, Breakers, Permit
from fencepost.host.finalization import (
    Settlement,
    SettlementRefused,
    Verdict,
    checkpoint,
    evidence_of,
    fallback_verdict,
    lock_running,
    record_transition,
    settlement,
    unknown_outcome,
    verdict_unit,
    write_evidence,
)
from fencepost.host.governance import DEFAULT_RETRYABLE_EXECUTION_MAX_ATTEMPTS, Governance, Policy
from fencepost.host.lifecycle import (
    HANDOFF_ACCEPTED,
    STARTED,
    STEP_AMBIGUOUS,
    STEP_FAILED,
    STEP_SUCCEEDED,
    adapter_invocation_id,
    adapter_subject,
    event_id,
    invocation_event,
    reconciliation_record,
    step_event,
)
from fencepost.host.outcome import StepOutcome, StepVerdict, classify_error, describe_error, interpret_reply
from fencepost.host.private_fields import strip_private
from fencepost.host.recovery import Proceed, Settle, applied_evidence, applied_summary, scan
from fencepost.host.redaction import (
    WITHHELD,
    ErrorSource,
    Redaction,
    RedactionFailed,
    error_context,
    redact_error,
    redact_input,
    redact_output,
)
from fencepost.host.state import BoundEntity, StateRefused, Transition, TransitionPoint, check_guard, entity_key
from fencepost.host.telemetry import NO_SPAN, LogTelemetry, SpanScope, Telemetry
from fencepost.outbox.context import CommandContext
from fencepost.store.host_records import (
    AdapterRecord,
    AdapterScope,
    AdapterWrite,
    CreateAdapterRow,
    Handoff,
    InvocationRecord,
    InvocationVerdict,
    LeaseHeld,
    NewAdapterRow,
    NewEvent,
    NewReconciliation,
    UpdateAdapterRow,
    VerdictHeld,
)
from fencepost.store.ports import FencedUnit

MAX_ERROR_CHARS = 2000
#: Why a reclaimed ``running`` step whose calls now did nothing is still unknown (ADR 0076).
EARLIER_MAY_APPLY = "an earlier attempt of this step may have reached the provider, so its outcome is unknown"
FINISH = CommandStatus.DELIVERED


@dataclass(frozen=True)
class Runtime:
    """What an execution needs from its host: the actions, the adapters by ``type``, a sleep for retries, the
    telemetry sink (host-spec S1), the adapter circuit breakers, None for none (R2, ADR 0050), and the redaction
    hooks (host-spec Q; ADR 0042)."""

    actions: ActionRegistry
    adapters: Mapping[str, Adapter]
    sleep: Callable[[float], None] = time.sleep
    telemetry: Telemetry = field(default_factory=LogTelemetry)
    breakers: Breakers | None = None
    redaction: Redaction = field(default_factory=Redaction)

    # Governance (ADRs 0043, 0044): the host's policies (before each action's), the deferral cap (D1, D10) and
    # the recovery budget an approval resume checks itself (P4, H14; workers check it before claiming).
    policies: tuple[Policy, ...] = ()
    retryable_execution_max_attempts: int = DEFAULT_RETRYABLE_EXECUTION_MAX_ATTEMPTS
    recovery_max_attempts: int = 5


def _handoff_id(invocation: InvocationRecord) -> str | None:
    """The adapter invocation id of the invocation's recorded handoff, if any."""
    return (invocation.pending_completion or {}).get("adapter_invocation_id") if invocation.handoff_reference else None


class _HandlerRaised(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(describe_error(error))
        self.error = error


def _text(value: str) -> str:
    """Verdict text: at most 2,000 characters, storable on every backend (``storable_text``)."""
    value = storable_text(value)
    return value if len(value) <= MAX_ERROR_CHARS else value[:MAX_ERROR_CHARS - 1] + "…"


def _json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a plain JSON object (a pydantic model is dumped in JSON mode).

    Raises:
        TypeError: it is not one.
    """
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} is not a mapping")
    plain = dict(value)
    canonical_json(plain)  # raises TypeError on anything that is not plain JSON
    return plain


def _handler_error(error: BaseException) -> BaseException | None:
    """The handler's own exception when ``error`` is, or wraps, one raised inside the handler (A9)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, _HandlerRaised):
            return current.error
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class Execution:
    """One execution of the invocation ``ctx.command.id`` under ``ctx.lease`` (see the module docstring).

    Args:
        runtime: actions and adapters. ctx: the command's context (its lease, heartbeat, stop signals).
        fresh: True only for an inline caller's own first run: then a ``running`` invocation is not a reclaim.
        approval_resume: the run of an approved invocation under the approver's temporary lease (host-spec P4,
            D3; ``fencepost.host.approvals``).
    """

    def __init__(self, runtime: Runtime, ctx: CommandContext, *, fresh: bool = False,
                 approval_resume: bool = False) -> None:
        self.runtime = runtime
        self.ctx = ctx
        self.fresh = fresh
        self.approval_resume = approval_resume
        self.lease = ctx.lease  # C3: the credentials, captured before the invocation is loaded
        ctx.renew_at_fence = False  # units hold the lease until COMMIT; the heartbeat renews it (ADR 0079)
        ctx.group_units = True  # ... and share COMMITs with other slots' units, except the handler's (ADR 0079)
        self.invocation_id = ctx.command.id
        self.action: Action | None = None
        self.action_id = ""  # the claimed invocation's action id, for the error-text context (ADR 0042)
        self.handoff: dict[str, Any] | None = None  # the handoff this execution recorded (N1)
        # Steps an earlier attempt left ``running`` (an idempotent action's recovery re-sends them), while no step
        # of this execution has run yet: a definite failure then may not say "nothing was applied" (E5, G5, X1).
        self._in_flight: tuple[AdapterRecord, ...] = ()
        self._root: SpanScope = NO_SPAN  # the host.invocation span (S1)
        self._step_scope: SpanScope = NO_SPAN  # the current host.step span

    def _span(self, name: str, **attributes: Any) -> AbstractContextManager[SpanScope]:
        """A telemetry span for one unit of this execution (S1; ids, names and statuses only)."""
        return telemetry.span(self.runtime.telemetry, name, invocation_id=self.invocation_id, **attributes)

    # ── the whole execution ──
    def run(self) -> InvocationStatus:
        """Execute until a verdict commits; returns it (the stored one when the invocation was already settled).

        Raises:
            RecoverableFinalization: nothing more could be recorded truthfully (lease lost, write refused, store
                error); the lease is left to expire.
            StopRequested, TimeLimitExceeded: from the context's safe points, for the worker to handle.
        """
        with self._span(telemetry.INVOCATION_SPAN, attempt=self.lease.delivery) as self._root:
            status = self._run_reporting()
            self._root.set("status", str(status))
            return status

    def _run_reporting(self) -> InvocationStatus:
        invocation_id = self.invocation_id
        try:
            return self._run()
        except LeaseLost as error:
            raise RecoverableFinalization(str(error), error, invocation_id=invocation_id) from error
        except SettlementRefused as error:
            raise RecoverableFinalization(str(error), invocation_id=invocation_id) from error
        except StoreUnavailable as error:
            raise RecoverableFinalization(f"the store failed before the outcome was recorded: {error}",
                                          error, invocation_id=invocation_id) from error

    def _run(self) -> InvocationStatus:
        with self._span(telemetry.CLAIM_SPAN):
            claimed: tuple[InvocationRecord, bool, list[AdapterRecord]] = self.ctx.fenced(self._claim,
                                                                                          name="host.claim")
        invocation, was_running, rows = claimed
        self.action_id = invocation.action_id
        self._root.set("action_id", invocation.action_id)
        self._root.set("action_version", invocation.action_version)
        if invocation.status.terminal:
            self.ctx.fenced(lambda tx: None, name="host.claim", finish=FINISH)
            return invocation.status
        if not was_running:  # this claim moved it pending -> running (S3: one emission per change, after commit)
            self._emit_status(InvocationStatus.RUNNING)
        if self.approval_resume and invocation.attempt_count > self.runtime.recovery_max_attempts:
            return self._approval_budget_exhausted(invocation)  # P4, H14: before the action is even resolved
        reclaim = was_running and not self.fresh and not self.approval_resume
        try:
            action = self.runtime.actions.resolve(invocation.action_id, invocation.action_version)
        except NotFound:
            return self._unresolved(invocation, rows)
        decision = scan(rows, idempotent=action.idempotent, reclaim=reclaim)
        if isinstance(decision, Settle):
            return self._settle_scan(invocation, decision)
        return self._proceed(invocation, action, decision, reclaim)

    def _claim(self, tx: FencedUnit) -> tuple[InvocationRecord, bool, list[AdapterRecord]]:
        invocation = tx.host.lock_invocation(self.invocation_id)
        if invocation is None:
            raise IntegrityViolation(f"command {self.invocation_id} has no invocation")
        if invocation.status.terminal:
            return invocation, False, []
        was_running = invocation.status is InvocationStatus.RUNNING
        if invocation.status is InvocationStatus.PENDING:
            if not tx.host.update_leased_invocation(invocation.id, tx.lease, InvocationVerdict(
                    InvocationStatus.RUNNING, expected=frozenset({InvocationStatus.PENDING}))):
                raise SettlementRefused("Invocation is no longer pending")
            tx.events.append_event_with_outbox(invocation_event(invocation, STARTED, {"mode": str(invocation.mode)}))
        elif invocation.status is not InvocationStatus.RUNNING:
            raise SettlementRefused(f"Invocation is {invocation.status}, not runnable")
        return invocation, was_running, tx.host.list_adapter_invocations(invocation.id)

    def _approval_budget_exhausted(self, invocation: InvocationRecord) -> InvocationStatus:
        """An approval resume above the recovery budget settles ``reconciliation_required`` (host-spec P4, H14):
        approval never resets an exhausted budget."""
        count, budget = invocation.attempt_count, self.runtime.recovery_max_attempts
        return self._settle(invocation, Verdict(
            InvocationStatus.RECONCILIATION_REQUIRED, f"recovery attempts exhausted ({count}/{budget})",
            kind=ReconciliationKind.RECOVERY_BUDGET_EXHAUSTED,
            evidence={"attempts": count, "max": budget, "approval_resume": True}))

    def _governance_text(self, message: str, *, source: str = "execution") -> str:
        """The one place a governance, obligation or attestation verdict's error text passes before it is stored
        (host-spec D2, Q8): ``redact_error_text`` with source ``execution``, at the origin (ADR 0042)."""
        return redact_error(self.runtime.redaction, error_context(self.action_id, ErrorSource(source)), message)

    # ── committing a verdict ──
    def _emit_status(self, status: InvocationStatus, kind: ReconciliationKind | None = None) -> None:
        attributes = {} if kind is None else {"kind": str(kind)}
        telemetry.emit(self.runtime.telemetry, telemetry.STATUS, invocation_id=self.invocation_id,
                       status=str(status), **attributes)

    def _settle(self, invocation: InvocationRecord, verdict: Verdict, *, writes: tuple[AdapterWrite, ...] = (),
                events: tuple[NewEvent, ...] = (), records: tuple[NewReconciliation, ...] = (),
                final: bool = False, transition: Transition | None = None) -> InvocationStatus:
        """``_settle_verdict`` inside a ``host.finalize`` (a success) or ``host.settle`` span (S1)."""
        kind = None if verdict.kind is None else str(verdict.kind)
        with self._span(telemetry.FINALIZE_SPAN if final else telemetry.SETTLE_SPAN, status=str(verdict.status),
                        kind=kind):
            return self._settle_verdict(invocation, verdict, writes=writes, events=events, records=records,
                                        final=final, transition=transition)

    def _settle_verdict(self, invocation: InvocationRecord, verdict: Verdict, *,
                        writes: tuple[AdapterWrite, ...] = (), events: tuple[NewEvent, ...] = (),
                        records: tuple[NewReconciliation, ...] = (), final: bool = False,
                        transition: Transition | None = None) -> InvocationStatus:
        """Commit ``verdict`` with its evidence (host-spec J4, K3-K9, L1-L3; ADR 0031):

        - a success (``final``, ``host.finalize``): one atomic attempt; a store error raises
          ``RecoverableFinalization`` and the next claim finishes it without calling a succeeded step again (J4);
        - any other verdict (``host.settle``): the atomic unit, retried once on a store error (K3); lease loss or
          a refused check raises at once, with no retry and no fallback (K4);
        - ``reconciliation_required`` after a second store error: the verdict-first fallback (K5-K9);
        - ``failed`` after a second store error: ``RecoverableFinalization``; a failed verdict without its
          evidence would claim "the provider did nothing" with nothing to show for it, so the row stays as a
          crash would leave it and recovery decides (K10).

        ``transition`` (a success of a state-bound action only) commits the ``StateTransitioned`` fact in the same
        unit; a guard that no longer allows it raises ``StateRefused`` out of here, nothing written.
        """
        plan = Settlement(invocation, verdict, writes, events, records, transition)
        tries = 1 if verdict.status is InvocationStatus.SUCCEEDED else 2
        error: StoreUnavailable | None = None
        for _ in range(tries):
            try:
                if final:
                    self.ctx.fenced(settlement(plan), name="host.finalize", finish=FINISH)
                else:
                    self.ctx.fenced(settlement(plan), name="host.settle", finish=FINISH)
            except (StoreUnavailable, LeaseLost, SettlementRefused) as raised:
                if self._landed(verdict):  # the COMMIT went through; only its acknowledgement was lost
                    return verdict.status
                if not isinstance(raised, StoreUnavailable):
                    raise
                error = raised
                continue
            self._emit_status(verdict.status, verdict.kind)
            return verdict.status
        assert error is not None
        if verdict.status is InvocationStatus.RECONCILIATION_REQUIRED:
            return self._fallback(plan, error)
        raise RecoverableFinalization(f"the {verdict.status} verdict could not be recorded: {error}", error,
                                      invocation_id=self.invocation_id) from error

    def _landed(self, verdict: Verdict, *, emit: bool = True) -> bool:
        """Whether ``verdict`` is stored although its unit raised: a COMMIT whose acknowledgement was lost (a
        dropped connection after the server committed; ``Store.transact`` may even have re-run the unit, which
        then found the row settled). Read back: the invocation holds exactly this verdict and its command is
        finished. Then the context is marked finished, as the unit would have left it. A read that fails is
        "not known to have landed"."""
        try:
            stored = self.ctx.store.read(lambda tx: tx.host.get_invocation(self.invocation_id))
        except StoreUnavailable:
            return False
        if (stored is None or stored.status is not verdict.status or stored.error != verdict.error
                or stored.command_status is not FINISH):
            return False
        self.ctx.finished = True
        self.ctx.finished_status = FINISH
        if emit:
            self._emit_status(verdict.status, verdict.kind)
        return True

    def _fallback(self, plan: Settlement, cause: StoreUnavailable) -> InvocationStatus:
        """The verdict-first fallback (K5-K9): the fenced verdict, retried once except on lease loss; then every
        evidence write under ``VerdictHeld``; the first raised error after all of them."""
        verdict = fallback_verdict(plan, cause)
        unit = verdict_unit(plan.invocation, verdict)
        last = cause
        for _ in range(2):
            try:
                self.ctx.fenced(unit, name="host.settle.verdict", finish=FINISH)
                break
            except (StoreUnavailable, LeaseLost, SettlementRefused) as raised:
                if self._landed(verdict, emit=False):  # committed, acknowledgement lost: go on to the evidence
                    break
                if not isinstance(raised, StoreUnavailable):
                    raise  # LeaseLost and refusals leave at once (K4, K9)
                last = raised
        else:  # K9: nothing more is written, above all no unfenced checkpoint
            raise RecoverableFinalization(
                f"the reconciliation_required verdict could not be recorded (atomic settlement and fallback "
                f"verdict failed): {last}", last, invocation_id=self.invocation_id) from last
        self._emit_status(verdict.status, verdict.kind)
        held = VerdictHeld(verdict.status, verdict.error)
        errors = write_evidence(self.ctx.store, self.invocation_id, evidence_of(plan, held), self.runtime.telemetry)
        if errors:  # K7, K8: the verdict stands; the gap is final and audit reports it
            raise RecoverableFinalization(
                f"the reconciliation_required verdict is recorded but {len(errors)} evidence write(s) failed "
                f"(the gap is final): {errors[0]}", errors[0], invocation_id=self.invocation_id,
                verdict_durable=True) from errors[0]
        return verdict.status

    def _scope(self, invocation: InvocationRecord) -> AdapterScope:
        return AdapterScope(invocation.tenant_id, invocation.space_id, invocation.id)

    # ── redaction at the origins (host-spec Q4, Q5, F19; ADR 0042) ──
    def _error_text(self, invocation: InvocationRecord, source: ErrorSource, message: str) -> str:
        """``message`` through ``redact_error_text`` (``source`` handler or execution); every later use of the
        text (verdict, events, records, the returned view) is built from what this returns."""
        return redact_error(self.runtime.redaction, error_context(invocation.action_id, source), message)

    def _redacted_reason(self, invocation: InvocationRecord, step: AdapterStep, adapter: Adapter, adapter_id: str,
                         outcome: StepOutcome) -> StepOutcome:
        """F19: a provider's result error or ambiguity reason, redacted where the reply is classified."""
        if outcome.reason is None or self.runtime.redaction.redact_error_text is None:
            return outcome
        context = error_context(invocation.action_id, ErrorSource.ADAPTER, adapter_type=adapter.type,
                                operation=step.operation, vendor=adapter.vendor, adapter_invocation_id=adapter_id)
        return replace(outcome, reason=redact_error(self.runtime.redaction, context, outcome.reason))

    def _unknown_writes(self, invocation: InvocationRecord, rows: tuple[AdapterRecord, ...],
                        reason: str) -> tuple[tuple[AdapterWrite, ...], tuple[NewEvent, ...],
                                              tuple[NewReconciliation, ...]]:
        """Unknown-outcome settlement of ``running`` rows: checkpoint ``ambiguous`` with the reconciliation
        metadata, the ``AdapterInvocationAmbiguous`` event, the reconciliation record (K1 order, G7, E10)."""
        return unknown_outcome(invocation, rows, reason, LeaseHeld(self.lease))

    def _settle_scan(self, invocation: InvocationRecord, decision: Settle) -> InvocationStatus:
        writes, events, records = self._unknown_writes(invocation, decision.unknown,
                                                       "running step without handoff: outcome unknown")
        evidence: dict[str, Any] = {}
        if decision.reason_row is not None:
            evidence = {"step": decision.reason_row.step_name, "adapter_invocation_id": decision.reason_row.id,
                        **(decision.reason_row.reconciliation or {})}
        if decision.unknown:
            evidence["unknown_steps"] = [r.step_name for r in decision.unknown]
        if decision.applied:
            evidence["applied"] = [{"step": r.step_name, "adapter_invocation_id": r.id,
                                    "external_reference": r.external_reference} for r in decision.applied]
            if decision.status is InvocationStatus.RECONCILIATION_REQUIRED:  # G8: each applied effect to resolve
                records = records + tuple(reconciliation_record(
                    invocation, r.id, ReconciliationKind.APPLIED_EFFECT,
                    {"step": r.step_name, "reason": "applied, not continued by recovery",
                     "external_reference": r.external_reference}) for r in decision.applied)
        return self._settle(invocation, Verdict(decision.status, _text(decision.error), kind=decision.kind,
                                                evidence=evidence or None), writes=writes, events=events,
                            records=records)

    def _unresolved(self, invocation: InvocationRecord, rows: list[AdapterRecord]) -> InvocationStatus:
        """The action no longer resolves (A18): recorded rows settle as for a non-idempotent reclaim, so nothing
        recorded is called ``failed``; with no effect recorded the verdict is the unknown-action failure."""
        decision = scan(rows, idempotent=False, reclaim=True)
        if isinstance(decision, Settle) and decision.status is not InvocationStatus.FAILED:
            return self._settle_scan(invocation, decision)
        return self._settle(invocation, Verdict(InvocationStatus.FAILED, _text(
            f"unknown action {invocation.action_id} version {invocation.action_version}")))

    def _fail(self, invocation: InvocationRecord, error: str, applied: list[AdapterRecord], *,
              writes: tuple[AdapterWrite, ...] = (), events: tuple[NewEvent, ...] = (),
              evidence: dict[str, Any] | None = None) -> InvocationStatus:
        """A definite failure; earlier applied steps are named so ``failed`` is not read as "nothing happened"
        (X1, G16). ``evidence``: more of what the failure is about (a refused state guard's transition).

        Before any step of this execution ran, a step that an earlier attempt left ``running`` may have reached its
        provider (an idempotent action's recovery would have sent it again): ``failed`` would deny that, so the
        step is settled unknown and the verdict is ``reconciliation_required`` instead (``_unknown_in_flight``)."""
        if self._in_flight:
            return self._unknown_in_flight(invocation, error, applied, events, evidence)
        evidence = dict(evidence) if evidence else None
        if applied:
            error = f"{error}; applied before it: {applied_summary(applied)}"
            evidence = {**(evidence or {}), "applied": applied_evidence(applied)}
        return self._settle(invocation, Verdict(InvocationStatus.FAILED, _text(error), evidence=evidence),
                            writes=writes, events=events)

    # ── handler, steps, finalization ──
    def _proceed(self, invocation: InvocationRecord, action: Action, decision: Proceed,
                 reclaim: bool) -> InvocationStatus:
        self._in_flight = tuple(sorted((r for r in decision.rows.values() if r.status is AdapterStatus.RUNNING),
                                       key=lambda r: r.step_index))
        try:
            params = action.params.model_validate(invocation.params)
        except ValidationError as error:
            return self._fail(invocation, _text(f"invalid params: {error.error_count()} error(s)"),
                              [r for r in decision.rows.values() if r.status is AdapterStatus.SUCCEEDED])
        self.action = action
        governed = Governance(self, self.runtime.policies + action.policies).run(  # §G step 7, after step 8
            invocation, action, [r for r in decision.rows.values() if r.status is AdapterStatus.SUCCEEDED])
        if isinstance(governed, InvocationStatus):
            return governed
        try:
            handled = self._handler(invocation, action, params, reclaim)
        except StateRefused as refused:  # A13, A14: fails closed before the handler and any adapter
            return self._refused_before_handler(invocation, refused, decision)
        if isinstance(handled, InvocationStatus):
            return handled
        handler_output, declared = handled
        self._in_flight = ()  # from here the steps run: each settles its own recorded row (E5, F4)
        outputs: dict[str, dict[str, Any]] = {}
        applied: list[AdapterRecord] = []
        repaired: list[AdapterRecord] = []
        for index, step in enumerate(action.steps_for(params)):
            self.ctx.check()
            adapter_id = adapter_invocation_id(invocation.id, index, step.name)
            row = decision.rows.get(index)
            if row is not None and (row.id != adapter_id or row.step_name != step.name):
                raise IntegrityViolation(f"step {index} of {invocation.id} is stored as {row.step_name}")
            if row is not None and row.status is AdapterStatus.SUCCEEDED:  # E7, G10, G13: never called again
                outputs[step.name] = dict(row.output or {})
                applied.append(row)
                repaired.append(row)
                continue
            with self._step_span(step, index, adapter_id) as self._step_scope:
                done = self._step(invocation, step, index, adapter_id, row, params, handler_output, outputs,
                                  applied)
            if isinstance(done, InvocationStatus):
                return done
            outputs[step.name] = dict(done.output or {})
            applied.append(done)
        attested = Attesting(self).run(invocation, action, applied, governed)  # G17-G22, O1-O3
        if attested is not None:
            return attested
        return self._finalize(invocation, action, params, handler_output, outputs, declared, repaired, applied)

    def _handler(self, invocation: InvocationRecord, action: Action, params: Any,
                 reclaim: bool) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]] | InvocationStatus:
        def unit(tx: FencedUnit) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
            lock_running(tx, invocation.id)
            bound = self._guarded(tx, invocation, action, params)  # A13: raises StateRefused, fail closed
            hctx = HandlerContext(invocation_id=invocation.id, tenant_id=invocation.tenant_id,
                                  space_id=invocation.space_id, actor=invocation.actor,
                                  attempt=self.lease.delivery, is_recovery=reclaim, tx=tx, bound_entity=bound)
            try:
                output = _json_object(action.handler(hctx, params), "the handler's output")
            except Exception as error:  # a handler outcome (A9): its writes roll back with this unit
                raise _HandlerRaised(error) from error
            return output, hctx.declared_events

        try:
            with self._span(telemetry.HANDLER_SPAN, reclaim=reclaim):
                result: tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]] = self.ctx.fenced(
                    unit, name="host.handler", group=False)  # user code: never inside another unit's commit
            return result
        except Exception as error:
            raised = _handler_error(error)
            if raised is None:
                refused = in_chain(error, StateRefused)  # a store may wrap what its unit raised
                if refused is not None:
                    raise refused from None
                raise
            if isinstance(raised, DecisionRequired):  # A11: an operator decides; no adapter, no retry
                reason = self._error_text(invocation, ErrorSource.HANDLER, raised.reason)
                return self._settle(invocation, Verdict(
                    InvocationStatus.RECONCILIATION_REQUIRED, _text(f"handler: {reason}"),
                    kind=ReconciliationKind.HANDLER_DECISION_REQUIRED))
            text = f"handler: {self._error_text(invocation, ErrorSource.HANDLER, describe_error(raised))}"
            return self._fail(invocation, _text(text), [])  # reconciliation_required if a step is in flight

    @staticmethod
    def _guarded(tx: FencedUnit, invocation: InvocationRecord, action: Action, params: Any) -> BoundEntity | None:
        """The state guard, in the handler's unit before the handler (host-spec A13; ADR 0077): the entity locked
        and read, the guard given the state before this invocation changed it. None for an unbound invocation.

        Raises:
            StateRefused: the guard did not allow the transition (the unit rolls back; the invocation fails).
        """
        binding = invocation.state_binding
        if binding is None:
            return None
        row = tx.host.lock_entity_state(entity_key(invocation))
        before = check_guard(action.state.guard if action.state is not None else None, invocation, row, params)
        return BoundEntity(binding.subject, binding.entity_id, binding.target, before,
                           None if row is None else row.state)

    def _transition(self, invocation: InvocationRecord, action: Action, params: Any,
                    at: TransitionPoint) -> Transition | None:
        """The fact a success (or parking) of ``invocation`` records, or None when it is unbound. The binding is
        the one stored at submission; the guard is the action's."""
        if invocation.state_binding is None:
            return None
        return Transition(invocation, action.state.guard if action.state is not None else None, params, at)

    def _refused_before_handler(self, invocation: InvocationRecord, refused: StateRefused,
                                decision: Proceed) -> InvocationStatus:
        """The guard refused before the handler (host-spec A13, A14: fail closed, terminal on recovery too):
        ``failed`` with no handler and no adapter call, naming any step an earlier attempt applied (X1); with a step
        an earlier attempt left ``running``, ``reconciliation_required`` (``_fail``)."""
        text = _text(self._error_text(invocation, ErrorSource.EXECUTION, str(refused)))
        succeeded = sorted((r for r in decision.rows.values() if r.status is AdapterStatus.SUCCEEDED),
                           key=lambda r: r.step_index)
        return self._fail(invocation, text, succeeded, evidence={"state_refused": refused.evidence()})

    def _unknown_in_flight(self, invocation: InvocationRecord, error: str, applied: list[AdapterRecord],
                           events: tuple[NewEvent, ...], evidence: dict[str, Any] | None) -> InvocationStatus:
        """A definite failure before any step of this execution ran, while an earlier attempt's step is still
        recorded ``running``: that step may have reached its provider, so it is checkpointed ``ambiguous`` with
        its event and reconciliation record, and the verdict is ``reconciliation_required`` naming it (K1 order,
        G7, X1). The failure's own reason, events and evidence are kept."""
        running = self._in_flight
        writes, unknown_events, records = self._unknown_writes(
            invocation, running, "running step of an interrupted attempt, not sent again: this attempt failed "
                                 "before any call; outcome unknown")
        found: dict[str, Any] = {**(evidence or {}), "unknown_steps": [r.step_name for r in running]}
        if applied:
            found["applied"] = applied_evidence(applied)
        return self._settle(invocation, Verdict(
            InvocationStatus.RECONCILIATION_REQUIRED,
            _text(f"{error}; steps that may have reached their provider: {applied_summary([*applied, *running])}"),
            kind=ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS, evidence=found),
            writes=writes, events=events + unknown_events, records=records)

    def _state_refused_after(self, invocation: InvocationRecord, refused: StateRefused, at: TransitionPoint,
                             applied: list[AdapterRecord]) -> InvocationStatus:
        """The guard no longer allows the transition when the fact is to be recorded (another invocation moved the
        entity while the steps ran; ADR 0077). Nothing of the fact is written. With a step's effect applied (a
        success, an accepted handoff) it cannot fail closed any more: ``reconciliation_required``, kind
        ``applied_effect``, naming the refusal and the effects; with none, ``failed``."""
        text = self._error_text(invocation, ErrorSource.EXECUTION, f"{refused} (at {at})")
        evidence: dict[str, Any] = {"state_refused": {**refused.evidence(), "at": at}}
        if not applied:
            return self._fail(invocation, _text(text), [], evidence=evidence)
        evidence["applied"] = applied_evidence(applied)
        return self._settle(invocation, Verdict(
            InvocationStatus.RECONCILIATION_REQUIRED,
            _text(f"{text}; the steps' effects stand: {applied_summary(applied)}; an operator decides"),
            kind=ReconciliationKind.APPLIED_EFFECT, evidence=evidence))

    def _step(self, invocation: InvocationRecord, step: AdapterStep, index: int, adapter_id: str,
              row: AdapterRecord | None, params: Any, handler_output: dict[str, Any],
              outputs: dict[str, dict[str, Any]], applied: list[AdapterRecord]) -> AdapterRecord | InvocationStatus:
        """Run one step; returns its succeeded row, or the verdict that settled the invocation."""
        scope = self._scope(invocation)
        adapter = self.runtime.adapters.get(step.adapter)
        if row is None:
            try:
                step_input = self._step_input(invocation, step, params, handler_output, outputs)
            except Exception as error:  # before any call of this step: a definite failure (A12)
                message = self._error_text(invocation, ErrorSource.EXECUTION, f"{type(error).__name__}: {error}")
                return self._fail(invocation, _text(f"step {step.name}: input failed: {message}"), applied)
            if adapter is None:  # F18: refused before any call
                return self._fail(invocation, f"step {step.name}: no adapter {step.adapter!r} is registered", applied)
            try:  # Q2: the row and its events keep the redacted input; the provider is sent the input itself
                row_input = redact_input(self.runtime.redaction, invocation.action_id, adapter.type, step.operation,
                                         step_input)
            except RedactionFailed as error:  # fails closed before the row and any call (ADR 0042)
                return self._fail(invocation, _text(f"step {step.name}: {error}"), applied)
            new = NewAdapterRow(id=adapter_id, step_index=index, step_name=step.name, adapter_type=adapter.type,
                                operation=step.operation, vendor=adapter.vendor, input=row_input, attempts=1)
            # E5: the row is durable `running` BEFORE the provider is called; it prepares attempt 1.
            self.ctx.fenced(lambda tx: checkpoint(tx, AdapterWrite(scope, CreateAdapterRow(new), LeaseHeld(tx.lease))),
                            name="host.step.row")
            crashpoint(f"host.step:{step.name}:after-row")
            attempts, call_input, from_status = 1, step_input, AdapterStatus.RUNNING
            prepared = True
        else:
            if adapter is None:  # a recorded row whose adapter is gone: its outcome cannot be re-sent
                writes, events, records = self._unknown_writes(
                    invocation, (row,), "adapter no longer registered: outcome unknown") \
                    if row.status is AdapterStatus.RUNNING else ((), (), ())
                status = (InvocationStatus.RECONCILIATION_REQUIRED if row.status is AdapterStatus.RUNNING
                          else InvocationStatus.FAILED)
                return self._settle(invocation, Verdict(status, f"step {step.name}: no adapter {step.adapter!r}",
                                                        kind=ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS
                                                        if status is InvocationStatus.RECONCILIATION_REQUIRED
                                                        else None), writes=writes, events=events,
                                    records=records)
            attempts, call_input, from_status = row.attempts, dict(row.input), row.status
            row_input = dict(row.input)
            prepared = False
            if self.runtime.redaction.redact_adapter_input is not None:
                # The row holds the redacted input: a re-send recomputes the input the provider needs (ADR 0042).
                try:
                    call_input = self._step_input(invocation, step, params, handler_output, outputs)
                except Exception as error:
                    return self._unresendable(invocation, step, row, self._error_text(
                        invocation, ErrorSource.EXECUTION, f"{type(error).__name__}: {error}"))
        started = time.monotonic()
        outcome, attempts = self._call(invocation, step, adapter, adapter_id, call_input, attempts, prepared,
                                       from_status)
        self._observe_step(step, adapter, outcome, attempts, time.monotonic() - started)
        return self._checkpoint(invocation, step, adapter, adapter_id, row_input, outcome, attempts, applied)

    @staticmethod
    def _step_input(invocation: InvocationRecord, step: AdapterStep, params: Any, handler_output: dict[str, Any],
                    outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The step's input: its ``input`` callable's, or the params (raises what the callable raises)."""
        if step.input is None:
            return _json_object(params, "the params")
        return _json_object(step.input(StepInputContext(
            invocation.id, step.name, dict(handler_output), dict(outputs)), params), "the step input")

    def _unresendable(self, invocation: InvocationRecord, step: AdapterStep, row: AdapterRecord,
                      message: str) -> InvocationStatus:
        """A recorded row whose input cannot be recomputed for its re-send: a ``running`` row may have reached
        its provider (unknown outcome); any other had not (failed)."""
        reason = _text(f"step {step.name}: its input could not be recomputed for the re-send: {message}")
        if row.status is AdapterStatus.RUNNING:
            writes, events, records = self._unknown_writes(invocation, (row,), reason)
            return self._settle(invocation, Verdict(InvocationStatus.RECONCILIATION_REQUIRED, reason,
                                                    kind=ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS),
                                writes=writes, events=events, records=records)
        return self._settle(invocation, Verdict(InvocationStatus.FAILED, reason))

    def _step_span(self, step: AdapterStep, index: int, adapter_id: str) -> AbstractContextManager[SpanScope]:
        """The ``host.step`` span of one adapter step (S1): its adapter's type and vendor, the operation, the step
        and its stable ``adapter_invocation_id``; ``_observe_step`` adds the outcome."""
        adapter = self.runtime.adapters.get(step.adapter)
        return self._span(telemetry.STEP_SPAN, step=step.name, step_index=index, adapter_invocation_id=adapter_id,
                          adapter_type=step.adapter, vendor=None if adapter is None else adapter.vendor,
                          operation=step.operation)

    def _observe_step(self, step: AdapterStep, adapter: Adapter, outcome: StepOutcome, attempts: int,
                      seconds: float) -> None:
        """The step's classified outcome on its span and its latency (seconds, every attempt and wait) in the
        step-duration histogram (S5)."""
        self._step_scope.set("outcome", str(outcome.verdict))
        self._step_scope.set("attempts", attempts)
        telemetry.record(self.runtime.telemetry, telemetry.STEP_DURATION, seconds, outcome=str(outcome.verdict),
                         adapter_type=adapter.type, vendor=adapter.vendor, operation=step.operation)

    def _prepare(self, scope: AdapterScope, adapter_id: str, attempts: int, from_status: AdapterStatus) -> None:
        """The attempt-preparation write before each call (E5): the row `running` with this attempt's number."""
        write = AdapterWrite(scope, UpdateAdapterRow(adapter_id, AdapterStatus.RUNNING, attempts=attempts),
                             LeaseHeld(self.lease), frozenset({from_status, AdapterStatus.RUNNING}))
        self.ctx.fenced(lambda tx: checkpoint(tx, write), name="host.step.attempt")

    def _call(self, invocation: InvocationRecord, step: AdapterStep, adapter: Adapter, adapter_id: str,
              call_input: dict[str, Any], attempts: int, prepared: bool,
              from_status: AdapterStatus) -> tuple[StepOutcome, int]:
        """The retry helper (E8): calls until a non-RETRY outcome or the policy is spent; the step's deadline
        spans its attempts, and an attempt it would start past the deadline is a failure without a call (F18)."""
        admitted: list[Permit] = []  # the step's circuit-breaker permit, once admitted (R2, ADR 0050)
        try:
            outcome, attempts = self._calls(invocation, step, adapter, adapter_id, call_input, attempts, prepared,
                                            from_status, admitted)
        except BaseException:
            for permit in admitted:  # the step ended without an outcome: its breaker turn is given back
                permit.release()
            raise
        for permit in admitted:
            permit.report(outcome)
        return outcome, attempts

    def _calls(self, invocation: InvocationRecord, step: AdapterStep, adapter: Adapter, adapter_id: str,
               call_input: dict[str, Any], attempts: int, prepared: bool, from_status: AdapterStatus,
               admitted: list[Permit]) -> tuple[StepOutcome, int]:
        scope = self._scope(invocation)
        deadline = time.monotonic() + step.timeout.total_seconds() if step.timeout is not None else None
        outcome = StepOutcome(StepVerdict.FAILED, reason="not called")
        earlier_unknown = not prepared and from_status is AdapterStatus.RUNNING  # a reclaimed row: sent before?
        for call_number in range(1, step.retry.max_attempts + 1):
            self.ctx.check()
            if deadline is not None and time.monotonic() >= deadline:
                reason = "the step's deadline expired before the call"
                if earlier_unknown:  # ADR 0076: no call now, but the reclaimed row's earlier one may still apply
                    return StepOutcome(StepVerdict.AMBIGUOUS, reason=f"{reason}; {EARLIER_MAY_APPLY}",
                                       outcome=outcome.outcome), attempts
                return StepOutcome(StepVerdict.FAILED, reason=reason), attempts
            if not prepared:
                attempts += 1
                self._prepare(scope, adapter_id, attempts, from_status)
            prepared = False
            call = AdapterCall(adapter_invocation_id=adapter_id, operation=step.operation, input=dict(call_input),
                               attempt=call_number, deadline=deadline)
            if not admitted and self.runtime.breakers is not None:  # R1: refused before any provider call
                permit = self.runtime.breakers.admit(adapter.type, adapter.vendor, self.runtime.telemetry)
                if permit is None:  # "failed" would deny what an earlier, unrecorded attempt may have done
                    return (StepOutcome(StepVerdict.AMBIGUOUS, reason=CIRCUIT_OPEN_UNKNOWN) if earlier_unknown
                            else StepOutcome(StepVerdict.FAILED, reason=CIRCUIT_OPEN)), attempts
                admitted.append(permit)
            try:
                outcome = interpret_reply(adapter.execute(call))
            except (Exception, GeneratorExit) as error:  # GeneratorExit: not the caller's to receive
                outcome = classify_error(error, deadline_fired=deadline is not None and time.monotonic() >= deadline)
            outcome = self._redacted_reason(invocation, step, adapter, adapter_id, outcome)
            crashpoint(f"host.step:{step.name}:after-provider-call")
            if earlier_unknown and outcome.verdict is StepVerdict.FAILED and not outcome.sent:
                # ADR 0113: this re-send reached nothing, so it cannot deny what the earlier call did (a recovery
                # that could not open the target recorded "nothing was applied" for a task committed there)
                return StepOutcome(StepVerdict.AMBIGUOUS, reason=f"{outcome.reason}; {EARLIER_MAY_APPLY}",
                                   outcome=outcome.outcome), attempts
            if outcome.verdict is not StepVerdict.RETRY:
                return outcome, attempts
            if call_number < step.retry.max_attempts:
                wait = outcome.retry_after if outcome.retry_after is not None else step.retry.wait_before(
                    call_number + 1)
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                self.runtime.sleep(wait)
        reason = f"exhausted after {step.retry.max_attempts} attempt(s): {outcome.reason}"
        if earlier_unknown:  # each retry did nothing, but the reclaimed row's earlier call may still apply (F4):
            # a frozen worker past its lease can hold the provider (a target's write lock) and commit later
            return StepOutcome(StepVerdict.AMBIGUOUS, reason=f"{reason}; {EARLIER_MAY_APPLY}",
                               outcome=outcome.outcome), attempts
        return StepOutcome(StepVerdict.FAILED, reason=reason, outcome=outcome.outcome), attempts

    def _checkpoint(self, invocation: InvocationRecord, step: AdapterStep, adapter: Adapter, adapter_id: str,
                    call_input: dict[str, Any], outcome: StepOutcome, attempts: int,
                    applied: list[AdapterRecord]) -> AdapterRecord | InvocationStatus:
        scope = self._scope(invocation)
        running = frozenset({AdapterStatus.RUNNING})
        reason = _text(outcome.reason or "")
        if outcome.verdict in (StepVerdict.SUCCEEDED, StepVerdict.ACCEPTED):  # Q3: once, before handoff handling
            try:
                redacted = redact_output(self.runtime.redaction, invocation.action_id, adapter.type, step.operation,
                                         dict(outcome.output or {}))
            except RedactionFailed as failed:  # fails closed: treated as withheld (ADR 0042)
                return self._withheld(invocation, step, adapter, adapter_id, call_input, outcome, attempts, applied,
                                      str(failed))
            if redacted is WITHHELD or not isinstance(redacted, dict):
                return self._withheld(invocation, step, adapter, adapter_id, call_input, outcome, attempts, applied,
                                      "the redact_adapter_output hook withheld it")
            outcome = replace(outcome, output=redacted)
        if outcome.verdict is StepVerdict.SUCCEEDED:
            output = dict(outcome.output or {})
            write = AdapterWrite(scope, UpdateAdapterRow(adapter_id, AdapterStatus.SUCCEEDED, output=output,
                                                         attempts=attempts), LeaseHeld(self.lease), running)
            event = step_event(invocation, adapter_id, STEP_SUCCEEDED, {
                "step": step.name, "adapter_type": adapter.type, "operation": step.operation, "vendor": adapter.vendor,
                "input": call_input, "output": output, "recovered": False})

            def unit(tx: FencedUnit) -> AdapterRecord:
                lock_running(tx, invocation.id)
                checkpoint(tx, write)
                tx.events.append_event_with_outbox(event)
                stored = tx.host.get_adapter_invocation(adapter_id)
                assert stored is not None
                return stored

            error: StoreUnavailable | None = None
            for _ in range(2):  # L1: the marker write is retried once on a store error
                try:
                    stored: AdapterRecord = self.ctx.fenced(unit, name="host.step.checkpoint")
                except StoreUnavailable as raised:  # LeaseLost and refusals leave at once (C8, C4)
                    error = raised
                    continue
                crashpoint(f"host.step:{step.name}:after-checkpoint")
                return stored
            assert error is not None
            # L2: the provider succeeded and its marker could not be recorded twice. The effect is applied but
            # unrecorded; continuing would build on a checkpoint that does not exist, so an operator decides.
            reference = outcome.external_reference
            marker_evidence: dict[str, Any] = {"step": step.name, "adapter_invocation_id": adapter_id,
                                               "external_reference": reference, "output": output}
            if applied:
                marker_evidence["applied"] = applied_evidence(applied)
            record = reconciliation_record(invocation, adapter_id, ReconciliationKind.APPLIED_EFFECT, {
                "step": step.name, "reason": "provider succeeded; its checkpoint could not be recorded",
                "external_reference": reference})
            return self._settle(invocation, Verdict(
                InvocationStatus.RECONCILIATION_REQUIRED,
                _text(f"step {step.name} succeeded at the provider but its checkpoint could not be recorded "
                      f"({type(error).__name__}: {error}); an operator decides"),
                kind=ReconciliationKind.APPLIED_EFFECT, evidence=marker_evidence),
                writes=(write,), events=(event,), records=(record,))
        if outcome.verdict is StepVerdict.FAILED:  # the provider definitely did nothing (F12-F14, F18)
            write = AdapterWrite(scope, UpdateAdapterRow(adapter_id, AdapterStatus.FAILED, error=reason,
                                                         attempts=attempts), LeaseHeld(self.lease), running)
            event = step_event(invocation, adapter_id, STEP_FAILED, {"step": step.name, "reason": reason})
            return self._fail(invocation, f"step {step.name} failed: {reason}", applied, writes=(write,),
                              events=(event,))
        if outcome.verdict is StepVerdict.ACCEPTED:  # a handoff (host-spec N1, N2; ADR 0035)
            return self._handoff_accepted(invocation, step, adapter, adapter_id, outcome, attempts, applied)
        # AMBIGUOUS: checkpoint -> event -> verdict, one unit (K1, F2-F11, F17)
        meta = {"reason": reason, "external_reference": None,
                "event_subject": {"subject_type": adapter_subject(adapter_id).subject_type, "subject_id": adapter_id}}
        write = AdapterWrite(scope, UpdateAdapterRow(adapter_id, AdapterStatus.AMBIGUOUS, error=reason,
                                                     reconciliation=meta, attempts=attempts),
                             LeaseHeld(self.lease), running)
        event = step_event(invocation, adapter_id, STEP_AMBIGUOUS, {"step": step.name, "reason": reason,
                                                                    "outcome": outcome.outcome})
        evidence: dict[str, Any] = {"step": step.name, "adapter_invocation_id": adapter_id, "reason": reason}
        if applied:
            evidence["applied"] = applied_evidence(applied)
        record = reconciliation_record(invocation, adapter_id, ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS, {
            "step": step.name, "reason": reason, "external_reference": None})
        return self._settle(invocation, Verdict(InvocationStatus.RECONCILIATION_REQUIRED,
                                                _text(f"step {step.name}: {reason}"),
                                                kind=ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS, evidence=evidence),
                            writes=(write,), events=(event,), records=(record,))

    def _withheld(self, invocation: InvocationRecord, step: AdapterStep, adapter: Adapter, adapter_id: str,
                  row_input: dict[str, Any], outcome: StepOutcome, attempts: int, applied: list[AdapterRecord],
                  why: str) -> InvocationStatus:
        """Withheld output (host-spec §1.Y-18, L5, L6; ADR 0042): the provider succeeded or accepted a handoff, but
        its output may not be stored. The invocation's result carries every step's output, so it cannot be
        proven: the marker (no output), ``AdapterInvocationSucceeded`` (``output_withheld``), the applied-effect
        record and the ``reconciliation_required`` verdict commit together; no later step runs."""
        reference = outcome.external_reference
        marker = AdapterWrite(self._scope(invocation), UpdateAdapterRow(
            adapter_id, AdapterStatus.SUCCEEDED, external_reference=reference, attempts=attempts),
            LeaseHeld(self.lease), frozenset({AdapterStatus.RUNNING}))
        event = step_event(invocation, adapter_id, STEP_SUCCEEDED, {
            "step": step.name, "adapter_type": adapter.type, "operation": step.operation, "vendor": adapter.vendor,
            "input": row_input, "output": None, "output_withheld": True, "external_reference": reference,
            "recovered": False})
        reason = (f"step {step.name} succeeded at the provider but its output was withheld ({why}), so the "
                  "result cannot be proven; an operator decides")
        record = reconciliation_record(invocation, adapter_id, ReconciliationKind.APPLIED_EFFECT, {
            "step": step.name, "reason": reason, "external_reference": reference})
        evidence: dict[str, Any] = {"step": step.name, "adapter_invocation_id": adapter_id,
                                    "external_reference": reference, "output_withheld": True}
        if applied:
            evidence["applied"] = applied_evidence(applied)
        return self._settle(invocation, Verdict(InvocationStatus.RECONCILIATION_REQUIRED, _text(reason),
                                                kind=ReconciliationKind.APPLIED_EFFECT, evidence=evidence),
                            writes=(marker,), events=(event,), records=(record,))

    def _handoff_accepted(self, invocation: InvocationRecord, step: AdapterStep, adapter: Adapter, adapter_id: str,
                          outcome: StepOutcome, attempts: int,
                          applied: list[AdapterRecord]) -> AdapterRecord | InvocationStatus:
        """A step answered ``Accepted``. With the action's ``completion_deadline``, the handoff and the step's
        marker commit in one unit, the handoff written first (N1, E6: no state has the marker without the
        handoff), and the remaining steps run; finalization parks. Without a deadline, or for a second handoff in
        one invocation (a refused handoff, L5), it settles ``reconciliation_required`` as an applied effect."""
        scope = self._scope(invocation)
        reference = str(outcome.external_reference)
        output = dict(outcome.output or {})
        marker = AdapterWrite(scope, UpdateAdapterRow(adapter_id, AdapterStatus.SUCCEEDED, output=output,
                                                      external_reference=reference, attempts=attempts),
                              LeaseHeld(self.lease), frozenset({AdapterStatus.RUNNING}))
        event = step_event(invocation, adapter_id, HANDOFF_ACCEPTED, {
            "step": step.name, "external_reference": reference, "provider": adapter.vendor})
        deadline = self.action.completion_deadline if self.action is not None else None
        earlier = self.handoff or (invocation.pending_completion if invocation.handoff_reference else None)
        if deadline is None or earlier is not None:
            if earlier is not None:
                reason = (f"step {step.name} handed off ({reference}) after step {earlier.get('step')} already "
                          f"had ({earlier.get('external_reference')}): a second handoff is refused; an operator "
                          "decides")
            else:
                reason = (f"step {step.name} handed off ({reference}) but the action declares no "
                          "completion_deadline, so it cannot park; an operator decides")
            record = reconciliation_record(invocation, adapter_id, ReconciliationKind.APPLIED_EFFECT, {
                "step": step.name, "reason": reason, "external_reference": reference})
            evidence: dict[str, Any] = {"step": step.name, "adapter_invocation_id": adapter_id,
                                        "external_reference": reference}
            if earlier is not None:
                evidence["handoffs"] = [earlier.get("external_reference"), reference]
            if applied:
                evidence["applied"] = applied_evidence(applied)
            return self._settle(invocation, Verdict(InvocationStatus.RECONCILIATION_REQUIRED, _text(reason),
                                                    kind=ReconciliationKind.APPLIED_EFFECT, evidence=evidence),
                                writes=(marker,), events=(event,), records=(record,))
        details = {"step": step.name, "adapter_invocation_id": adapter_id, "external_reference": reference,
                   "provider": adapter.vendor, "accepted_output": output}

        def unit(tx: FencedUnit) -> AdapterRecord:
            lock_running(tx, invocation.id)
            handoff = Handoff(provider=adapter.vendor, external_reference=reference, details=details,
                              due_at=tx.now() + deadline)
            if not tx.host.record_handoff(invocation.id, tx.lease, handoff):
                raise SettlementRefused(f"the handoff of step {step.name} was refused")
            checkpoint(tx, marker)
            tx.events.append_event_with_outbox(event)
            stored = tx.host.get_adapter_invocation(adapter_id)
            assert stored is not None
            return stored

        stored: AdapterRecord = self.ctx.fenced(unit, name="host.step.handoff")
        crashpoint(f"host.step:{step.name}:after-handoff")
        self.handoff = details
        return stored

    def _park(self, invocation: InvocationRecord, result: dict[str, Any], events: tuple[NewEvent, ...],
              details: dict[str, Any], transition: Transition | None = None) -> InvocationStatus:
        """Parking (N2): after the remaining steps, the result and ``parked_at`` on the handoff, the declared and
        repaired events, the state binding's fact (A17: "or accept a parked external handoff"; ADR 0077), and the
        command finished: the invocation stays ``running`` with no lease, outside the recovery budget, until its
        completion or the deadline sweep settles it. A guard that no longer allows the transition raises
        ``StateRefused`` out of here, nothing written."""

        def unit(tx: FencedUnit) -> None:
            lock_running(tx, invocation.id)
            for event in events:
                tx.events.append_event_with_outbox(event)
            if transition is not None:
                record_transition(tx, transition)
            if not tx.host.park_invocation(invocation.id, tx.lease, {**details, "result": result}):
                raise SettlementRefused("the invocation could not park")

        try:
            with self._span(telemetry.PARK_SPAN):
                self.ctx.fenced(unit, name="host.park", finish=FINISH)
        except (StoreUnavailable, LeaseLost, SettlementRefused):
            if not self._parked():  # a lost acknowledgement of a COMMIT that landed is not a failure
                raise
        return InvocationStatus.RUNNING

    def _parked(self) -> bool:
        """Whether this invocation is parked with its command finished although the park unit raised (its COMMIT
        landed, the acknowledgement was lost); then the context is marked finished, as the unit leaves it."""
        try:
            stored = self.ctx.store.read(lambda tx: tx.host.get_invocation(self.invocation_id))
        except StoreUnavailable:
            return False
        if stored is None or stored.parked_at is None or stored.command_status is not FINISH:
            return False
        self.ctx.finished = True
        self.ctx.finished_status = FINISH
        return True

    def _finalize(self, invocation: InvocationRecord, action: Action, params: Any, handler_output: dict[str, Any],
                  outputs: dict[str, dict[str, Any]], declared: list[tuple[str, dict[str, Any]]],
                  repaired: list[AdapterRecord], applied: list[AdapterRecord]) -> InvocationStatus:
        # A16: private result fields are stripped before the result is parked, validated or stored
        result: dict[str, Any] = strip_private(action.result, {**handler_output, "steps": outputs}) or {}
        parked = self.handoff or (invocation.pending_completion if invocation.handoff_reference else None)
        if parked is not None:  # the result is validated when the completion settles it, merged (N9)
            try:
                return self._park(invocation, result, self._final_events(invocation, repaired, declared), parked,
                                  self._transition(invocation, action, params, "parking"))
            except StateRefused as refused:
                return self._state_refused_after(invocation, refused, "parking", applied)
        if action.result is not None:
            try:
                result = strip_private(action.result,
                                       action.result.model_validate(result).model_dump(mode="json")) or {}
            except ValidationError as error:
                text = f"the result does not match the action's result schema ({error.error_count()} error(s))"
                if applied:
                    return self._settle(invocation, Verdict(
                        InvocationStatus.RECONCILIATION_REQUIRED, _text(f"{text} after applied effects: "
                                                                        f"{applied_summary(applied)}"),
                        kind=ReconciliationKind.APPLIED_EFFECT))
                return self._fail(invocation, text, [])
        try:
            return self._settle(invocation, Verdict(InvocationStatus.SUCCEEDED, result=result),
                                events=self._final_events(invocation, repaired, declared), final=True,
                                transition=self._transition(invocation, action, params, "finalization"))
        except StateRefused as refused:  # A19 after the steps: the entity moved under this invocation
            return self._state_refused_after(invocation, refused, "finalization", applied)

    @staticmethod
    def _final_events(invocation: InvocationRecord, repaired: list[AdapterRecord],
                      declared: list[tuple[str, dict[str, Any]]]) -> tuple[NewEvent, ...]:
        """G11, G12: a success recorded before this execution is repaired from the stored row (its stable id keeps
        the first event if it was written, else this one, ``recovered``); then the action's declared events."""
        events = [step_event(invocation, row.id, STEP_SUCCEEDED, {
            "step": row.step_name, "adapter_type": row.adapter_type, "operation": row.operation, "vendor": row.vendor,
            "input": row.input, "output": row.output or {}, "recovered": True})
            for row in repaired if row.external_reference is None or row.id != _handoff_id(invocation)]
        events += [NewEvent(id=event_id(invocation.id, event_type, f"declared:{position}"),
                            tenant_id=invocation.tenant_id, space_id=invocation.space_id,
                            subject=invocation_event(invocation, event_type, {}).subject, type=event_type,
                            payload=payload) for position, (event_type, payload) in enumerate(declared)]
        return tuple(events)

