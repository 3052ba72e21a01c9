"""The action host: submit an action dispatched or inline, execute, read (host-spec A, B, H; §2.4; ADRs 0022-0024).

``Host(store, actions=[...], adapters=[...], config=HostConfig())``:

- ``submit(action_id, params, actor=, authority=, idempotency_key=, tenant=, space=, mode=Dispatch())`` validates
  the params, binds the key (B), and in one transaction writes the invocation and its ``host.invoke`` command:
  ``pending`` for workers (``Dispatch``), or ``running`` under a lease the caller holds (``Inline``), which it
  then runs at once with a heartbeat (A2, A4). A replay of a key returns the existing invocation and runs
  nothing again (B2). With ``tx=`` it writes them in the caller's open unit of work instead, dispatched only,
  so that the caller's own rows and the invocation commit together or not at all (§1.Y-16, ADR 0033).
- ``execute(id)`` re-runs an inline invocation whose run raised ``RecoverableFinalization`` while this host
  still holds its caller lease (A3, A6: the caller caps its own retries); a settled invocation is returned.
- ``get(id)`` and ``list(...)`` read ``InvocationView``s (with a state-bound invocation's binding, its
  ``StateTransitioned`` fact and the entity's recorded state: ADR 0077); ``entity_state(subject, entity_id)``
  reads an entity's recorded state; ``register(registry)`` serves ``host.invoke`` on a worker with the recovery
  budget as the kind's delivery budget (H1, H12).
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import os
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from fencepost.core.canonical import WRAPPED_MAX_DEPTH, canonical_json, json_depth, require_storable_text
from fencepost.core.errors import Conflict, InvalidInput, NotFound, RecoverableFinalization, StoreUnavailable
from fencepost.core.statuses import (
    AdapterStatus,
    CompletionOutcome,
    InvocationMode,
    InvocationStatus,
)
from fencepost.host import telemetry
from fencepost.host.action import Action, ActionRegistry
from fencepost.host.adapter import Adapter
from fencepost.host.approvals import (
    DECIDE_UNIT,
    ApprovalRequest,
    approve_unit,
    check_decider,
    list_requests,
    reject_unit,
    sweep_expired_approvals,
)
from fencepost.host.breakers import Breakers
from fencepost.host.completion import Completion, CompletionReceipt, apply_completion
from fencepost.host.execution import Execution, Runtime
from fencepost.host.governance import (
    DEFAULT_RETRYABLE_EXECUTION_MAX_ATTEMPTS,
    Policy,
    PolicyContext,
    PolicyOutcome,
    check_policies,
    evaluate_batch,
)
from fencepost.host.handler import HostHandler, kind_of
from fencepost.host.idempotency import binding_digest, check_replay, invocation_id, params_digest
from fencepost.host.lifecycle import STARTED, invocation_event
from fencepost.host.operator import QueueEntry, history, lookups, resolution_json, state_json
from fencepost.host.redaction import Redaction, RedactionFailed, redact_params
from fencepost.host.resolution import apply_resolution, parse_request
from fencepost.host.sweep import sweep_overdue
from fencepost.host.telemetry import Fanout, LogTelemetry, Telemetry
from fencepost.outbox.context import CommandContext
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.heartbeat import Heartbeat
from fencepost.outbox.worker import Sweep
from fencepost.store.base import Store
from fencepost.store.host_records import AdapterRecord, EntityKey, EntityStateRecord, InvocationRecord, NewInvocation
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import ClaimedCommand

DEFAULT_RECOVERY_MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class HostConfig:
    """Host settings.

    Attributes:
        recovery_max_attempts: claims an invocation gets; the claim after the last settles it
            ``reconciliation_required`` with ``recovery attempts exhausted (n/max)`` (H1, H4). A positive int
            of at least ``retryable_execution_max_attempts``; None (the default) means
            ``max(5, retryable_execution_max_attempts)`` (the first run plus four recoveries by default, H12).
            Read the effective value as ``recovery_budget``.
        retryable_execution_max_attempts: the claims at which a transient governance error still defers the
            invocation to its next claim (host-spec D1, D10, H2); 1..1000, default 5.
        lease_seconds: the inline caller's lease (seconds, 0.1..3600); workers use their own. An approval
            resume holds a temporary lease of this length too (P4).
        params_digest_key: the secret (at least 16 bytes) that keys the stored digest of the unredacted params
            (``hk1``, HMAC-SHA-256; host-spec §1.Y-9, ADR 0053). Required with a ``redact_action_parameters``
            hook: an unkeyed digest of a low-entropy secret gives it back by brute force. Every process that
            submits needs the same key; without one, digests are ``cp1`` (plain SHA-256) as before.
    """

    recovery_max_attempts: int | None = None
    lease_seconds: float = 30.0
    retryable_execution_max_attempts: int = DEFAULT_RETRYABLE_EXECUTION_MAX_ATTEMPTS
    params_digest_key: bytes | None = dataclasses.field(default=None, repr=False)  # a secret: never in a repr

    def __post_init__(self) -> None:
        key = self.params_digest_key
        if key is not None and (not isinstance(key, bytes) or len(key) < 16):
            raise InvalidInput("params_digest_key must be bytes, at least 16 of them (a random secret)")
        retryable = self.retryable_execution_max_attempts
        if isinstance(retryable, bool) or not isinstance(retryable, int) or not 1 <= retryable <= 1000:
            raise InvalidInput("retryable_execution_max_attempts must be an integer between 1 and 1000")
        value = self.recovery_max_attempts
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                raise InvalidInput("recovery_max_attempts must be an integer between 1 and 1000")
            if value < retryable:
                raise InvalidInput(f"recovery_max_attempts ({value}) may not be below "
                                   f"retryable_execution_max_attempts ({retryable}): both count worker claims")
        if not (isinstance(self.lease_seconds, (int, float)) and math.isfinite(self.lease_seconds)
                and 0.1 <= self.lease_seconds <= 3600):
            raise InvalidInput("lease_seconds must be between 0.1 and 3600")

    @property
    def recovery_budget(self) -> int:
        """The effective recovery budget: ``recovery_max_attempts``, else ``max(5, retryable_...)`` (H1, H13)."""
        if self.recovery_max_attempts is not None:
            return self.recovery_max_attempts
        return max(DEFAULT_RECOVERY_MAX_ATTEMPTS, self.retryable_execution_max_attempts)


@dataclass(frozen=True)
class Dispatch:
    """Submission mode: hand the invocation to workers (leased, counted, recoverable; host-spec A2)."""


@dataclass(frozen=True)
class Inline:
    """Submission mode: run it now in this process under a caller lease that workers take over if this process
    dies (host-spec A2, A4, A8; ADR 0022)."""


@dataclass(frozen=True)
class StepView:
    """One adapter step of an invocation as an operator sees it."""

    name: str
    adapter_invocation_id: str
    status: AdapterStatus
    attempts: int
    error: str | None
    external_reference: str | None
    output: dict[str, Any] | None


@dataclass(frozen=True)
class InvocationView:
    """What ``Host.get`` returns: the verdict, its evidence, the attempt count and the steps (never the token)."""

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
    mode: InvocationMode
    status: InvocationStatus
    error: str | None
    result: Any
    reconciliation: dict[str, Any] | None
    attempt_count: int
    lease_owner: str | None
    created_at: datetime
    updated_at: datetime
    steps: tuple[StepView, ...]
    handoff: dict[str, Any] | None = None
    external_completion: dict[str, Any] | None = None
    #: The operator's resolution (ADR 0048; ``operator.resolution_json``), None when nobody resolved it.
    resolution: dict[str, Any] | None = None
    #: A state-bound invocation's binding, its ``StateTransitioned`` fact and the entity's recorded state now
    #: (ADR 0077; ``operator.state_json``), None when the action has no state binding.
    state: dict[str, Any] | None = None
    #: Set by ``submit`` only: the key named an invocation submitted earlier, which is returned as it is and ran
    #: nothing again (B2). Not part of ``as_json`` nor of equality: it describes the call, not the invocation.
    replayed: bool = dataclasses.field(default=False, compare=False)

    @property
    def parked(self) -> bool:
        """Whether it waits, unleased, for its handoff's external completion (host-spec N2)."""
        return self.handoff is not None and self.handoff.get("parked_at") is not None and \
            self.status is InvocationStatus.RUNNING

    def as_json(self) -> dict[str, Any]:
        """Plain JSON (instants as ISO 8601 text)."""
        return {"id": self.id, "tenant_id": self.tenant_id, "space_id": self.space_id, "action_id": self.action_id,
                "action_version": self.action_version, "idempotency_key": self.idempotency_key, "actor": self.actor,
                "authority": self.authority, "params": self.params, "params_digest": self.params_digest,
                "mode": str(self.mode), "status": str(self.status), "error": self.error, "result": self.result,
                "reconciliation": self.reconciliation, "attempt_count": self.attempt_count,
                "lease_owner": self.lease_owner, "created_at": self.created_at.isoformat(),
                "updated_at": self.updated_at.isoformat(),
                "steps": [{"name": s.name, "adapter_invocation_id": s.adapter_invocation_id, "status": str(s.status),
                           "attempts": s.attempts, "error": s.error, "external_reference": s.external_reference,
                           "output": s.output} for s in self.steps],
                "handoff": self.handoff, "parked": self.parked, "external_completion": self.external_completion,
                "resolution": self.resolution, "state": self.state}


#: The deepest params may nest: canonical JSON's limit less the levels that the records and events carrying
#: them add (a step's event wraps its input twice), so that params accepted at submit can always be recorded
#: after the provider is called (a break-it trial found an invocation at exactly the limit ending
#: reconciliation_required once its step event could not be written).
PARAMS_MAX_DEPTH = WRAPPED_MAX_DEPTH


def _sets_in_order(native: Any, plain: Any) -> Any:
    """``plain`` (a model's JSON-mode dump) with the lists that were sets in ``native`` (its Python-mode dump)
    sorted by their canonical JSON. pydantic writes a set in its iteration order, which string hashing
    randomizes per process, so one request's idempotency digest differed from process to process and a true
    replay was refused as a conflict (a break-it trial)."""
    if isinstance(native, set | frozenset) and isinstance(plain, list):
        # Elements first (a set of frozensets): the dump lists them in the same order as iterating ``native``.
        plain = [_sets_in_order(n, p) for n, p in zip(native, plain, strict=False)] if len(native) == len(plain) \
            else plain
        try:
            return sorted(plain, key=canonical_json)
        except TypeError:  # not plain JSON: refused by the canonical check that follows
            return plain
    if isinstance(native, dict) and isinstance(plain, dict):
        return {key: _sets_in_order(native[key], value) if key in native else value for key, value in plain.items()}
    if isinstance(native, list | tuple) and isinstance(plain, list) and len(native) == len(plain):
        return [_sets_in_order(n, p) for n, p in zip(native, plain, strict=True)]
    return plain


def _unstorable(value: Any, path: str) -> str | None:
    """Where ``value`` (a model's Python-mode dump) holds a float that is not finite, which pydantic's JSON mode
    would silently turn into null (so NaN, Infinity and None would share one idempotency digest; a break-it
    trial); None when it holds none."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path}: {value!r} is not a finite number (it has no JSON form)"
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple | set | frozenset):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _unstorable(item, f"{path}.{key}")
        if found is not None:
            return found
    return None


def read_view(tx: UnitOfWork, record: InvocationRecord) -> InvocationView:
    """``record``'s view with its steps, resolution and state, read in ``tx`` (what ``Host.get`` returns)."""
    return view(record, tx.host.list_adapter_invocations(record.id),
                resolution_json(tx.host.get_resolution(record.id)), state_json(tx, record))


def view(record: InvocationRecord, rows: Iterable[AdapterRecord],
         resolution: dict[str, Any] | None = None, state: dict[str, Any] | None = None) -> InvocationView:
    """An ``InvocationView`` of a stored invocation, its adapter rows, its resolution and its state (plain JSON or
    None; ``operator.resolution_json``, ``operator.state_json``)."""
    steps = tuple(StepView(r.step_name, r.id, r.status, r.attempts, r.error, r.external_reference, r.output)
                  for r in sorted(rows, key=lambda r: r.step_index))
    return InvocationView(id=record.id, tenant_id=record.tenant_id, space_id=record.space_id,
                          action_id=record.action_id, action_version=record.action_version,
                          idempotency_key=record.idempotency_key, actor=record.actor, authority=record.authority,
                          params=record.params, params_digest=record.params_digest, mode=record.mode,
                          status=record.status, error=record.error, result=record.result,
                          reconciliation=record.reconciliation, attempt_count=record.attempt_count,
                          lease_owner=record.lease_owner, created_at=record.created_at,
                          updated_at=record.updated_at, steps=steps, handoff=_handoff(record, steps),
                          external_completion=record.external_completion, resolution=resolution, state=state)


def _handoff(record: InvocationRecord, steps: tuple[StepView, ...] = ()) -> dict[str, Any] | None:
    """The invocation's handoff as an operator reads it: provider, reference, step, deadline, parked, swept. Once
    its completion is taken the pending details are gone: the step is then the one whose adapter row carries the
    reference (a break-it trial read "step None" after a late completion)."""
    if record.handoff_reference is None:
        return None
    details = record.pending_completion or next(
        ({"step": s.name, "adapter_invocation_id": s.adapter_invocation_id} for s in steps
         if s.external_reference == record.handoff_reference), {})

    def instant(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return {"provider": record.handoff_provider, "external_reference": record.handoff_reference,
            "step": details.get("step"), "adapter_invocation_id": details.get("adapter_invocation_id"),
            "due_at": instant(record.completion_due_at), "parked_at": instant(record.parked_at),
            "overdue_at": instant(record.overdue_at), "pending": record.pending_completion is not None}


class Host:
    """The action host over one control store (see the module docstring).

    Args:
        store: a migrated store. actions: the ``Action`` definitions. adapters: adapter instances, by their
            ``type`` (unique). config: ``HostConfig``. telemetry: the lifecycle sink (host-spec S1;
            default ``LogTelemetry``: log records under ``fencepost.host``; a ``TelemetrySink`` also receives
            spans, counters and the step histogram, ``fencepost.host.otel.OtelTelemetry``; ADR 0046). breakers:
            the adapter circuit breakers (host-spec R; ``Breakers(failure_threshold=5, reset_timeout=30.0)``);
            None, the default, refuses no step (ADR 0050). redaction: the redaction hooks (host-spec Q; default
            none: every value is stored as given; ADR 0042).
    Raises:
        InvalidInput: two adapters with one type, a duplicate action ``(id, version)``, or a
            ``redact_action_parameters`` hook without ``HostConfig(params_digest_key=...)`` (ADR 0053).
    """

    def __init__(self, store: Store, *, actions: Iterable[Action] = (), adapters: Iterable[Adapter] = (),
                 config: HostConfig | None = None, telemetry: Telemetry | None = None,
                 breakers: Breakers | None = None, redaction: Redaction | None = None,
                 policies: Iterable[Policy] = ()) -> None:
        self.store = store
        self.config = config or HostConfig()
        self.actions = ActionRegistry(actions)
        by_type: dict[str, Adapter] = {}
        for adapter in adapters:
            if adapter.type in by_type:
                raise InvalidInput(f"two adapters of type {adapter.type!r}")
            by_type[adapter.type] = adapter
        if redaction is not None and redaction.redact_action_parameters is not None \
                and self.config.params_digest_key is None:
            # ADR 0053: the stored digest covers the unredacted params; unkeyed, it gives a card number back.
            raise InvalidInput("a redact_action_parameters hook needs HostConfig(params_digest_key=...): the stored "
                               "digest of the unredacted params is otherwise a plain SHA-256, and a low-entropy "
                               "secret (a card number) is recovered from it by brute force")
        self.runtime = Runtime(actions=self.actions, adapters=by_type, telemetry=telemetry or LogTelemetry(),
                               breakers=breakers, redaction=redaction or Redaction(),
                               policies=check_policies(policies),
                               retryable_execution_max_attempts=self.config.retryable_execution_max_attempts,
                               recovery_max_attempts=self.config.recovery_budget)
        self.owner = f"inline:{socket.gethostname()}:{os.getpid()}"
        self._held: dict[str, CommandContext] = {}
        self._lock = threading.Lock()
        self._identity: str | None = None  # the store's identity, read once (it never changes; ADR 0108)

    def invocation_id(self, tenant: str, space: str, action_id: str, idempotency_key: str,
                      tx: UnitOfWork | None = None) -> str:
        """The id a new invocation of ``idempotency_key`` gets in this host's control database (``idempotency.
        invocation_id``; ADR 0108). It names an existing invocation only when that one was submitted to this
        database at version 17 or later: find an invocation by its key (``HostPort.find_invocation``).

        Args:
            tx: a unit to read the store's identity in when it is not known yet (the caller's own unit:
                submissions in the caller's transaction); None reads it in a unit of its own.
        Raises:
            IntegrityViolation: the store has no identity (its row was deleted by hand).
        """
        identity = self._identity
        if identity is None:
            identity = tx.host.store_identity() if tx is not None else self.store.read(
                lambda read: read.host.store_identity())
            self._identity = identity
        return invocation_id(identity, tenant, space, action_id, idempotency_key)

    def add_telemetry(self, sink: Telemetry) -> None:
        """Send this host's telemetry to ``sink`` too, after the sink it already has (host-spec S1): ``fencepost
        serve`` adds its ``/metrics`` sink, ``--telemetry otel`` the OpenTelemetry one. Call it before
        ``handler()`` or ``register``: a handler keeps the sinks it was made with."""
        self.runtime = replace(self.runtime, telemetry=Fanout(self.runtime.telemetry, sink))

    # ── workers ──
    def handler(self) -> HostHandler:
        """The ``host.invoke`` handler for a worker's ``HandlerRegistry``."""
        return HostHandler(self.runtime)

    def register(self, registry: HandlerRegistry) -> None:
        """Serve the invocations of every action version of this host on ``registry`` (one command kind each,
        ``kind_of``), with the recovery budget as their delivery budget (H1, H12)."""
        handler = self.handler()
        for action in self.actions:
            registry.register(kind_of(action.id, action.version), handler,
                              max_deliveries=self.config.recovery_budget)

    def sweeps(self) -> list[Sweep]:
        """The housekeeping a worker serving this host runs before it claims (N13): the completion-deadline
        sweep and the approval-expiry sweep (ADR 0044), each at most once a second, about a second at a time."""
        return [Sweep(name="host.completion-deadline",
                      run=lambda store, budget: sweep_overdue(store, self.runtime.telemetry, budget_seconds=budget)),
                Sweep(name="host.approval-expiry",
                      run=lambda store, budget: sweep_expired_approvals(store, self.runtime.telemetry,
                                                                        budget_seconds=budget))]

    # ── external completions (host-spec N; ADR 0035) ──
    def complete(self, provider: str, external_reference: str, outcome: CompletionOutcome | str, *,
                 result: dict[str, Any] | None = None, error: str | None = None,
                 evidence: dict[str, Any] | None = None) -> CompletionReceipt:
        """Record a provider's completion of a handoff and settle what it proves (the decision table of
        host-spec N; ``fencepost.host.completion``).

        Args:
            provider: the handing-off adapter's ``vendor``. external_reference: the reference its ``Accepted``
                reply carried (the only way a completion finds its invocation, N30). outcome: ``completed`` or
                ``failed``. result, evidence: JSON objects or None. error: the provider's error text or None.
        Returns:
            A ``CompletionReceipt``: ``settled``, ``still_executing`` (retry after parking), ``absorbed`` (an
            identical repeat), ``contradicted``, ``evidence_only`` or ``not_found`` (retry later, N33).
        Raises:
            InvalidInput: malformed arguments. Conflict: two invocations hold this reference.
            StoreUnavailable: the store failed; nothing was recorded, the provider should retry.
            RedactionFailed: the completion-result hook failed (N28); nothing was recorded.
        """
        try:
            parsed = CompletionOutcome(outcome)
        except ValueError:
            raise InvalidInput("outcome is 'completed' or 'failed'") from None
        completion = Completion(provider, external_reference, parsed, result, error, evidence)

        def unit(tx: UnitOfWork) -> CompletionReceipt:
            return apply_completion(tx, self.runtime.actions, completion, self.runtime.redaction)

        receipt: CompletionReceipt = self.store.transact(unit, name="host.complete")
        if receipt.changed and receipt.status is not None:  # S3: once per status change, after the commit
            kind = {} if receipt.kind is None else {"kind": str(receipt.kind)}
            telemetry.emit(self.runtime.telemetry, telemetry.STATUS, invocation_id=receipt.invocation_id,
                           status=str(receipt.status), **kind)
        return receipt

    def reconcile_overdue_completions(self, *, budget_seconds: float = 5.0) -> int:
        """Settle every handoff past its completion deadline ``reconciliation_required`` (N12-N15; the worker's
        sweep runs this too). Returns how many it settled."""
        return sweep_overdue(self.store, self.runtime.telemetry, budget_seconds=budget_seconds)

    # ── submission ──
    def submit(self, action_id: str, params: Any, *, actor: str, idempotency_key: str, authority: str = "",
               tenant: str = "default", space: str = "default", version: int | None = None,
               mode: Dispatch | Inline | None = None, tx: UnitOfWork | None = None) -> InvocationView:
        """Submit an action (host-spec A2, B1-B7), in its own unit of work or in the caller's (§1.Y-16, ADR 0033).

        Args:
            action_id, version: the action (default: its highest registered version). params: validated by the
                action's params model; what is digested is ``model_dump(mode="json")`` (B6, §1.Y-9), what is
                stored and executed is that after ``redact_action_parameters`` (Q1), validated again.
            actor, authority: who submits, under which authority binding (B1). idempotency_key: 1..255 chars,
                no outer whitespace (ADR 0104), unique per tenant, space and action (B10). mode: ``Dispatch()``
                (default) or ``Inline()``.
            tx: the caller's open unit of work (``store.transaction()``, or ``PostgresStore.unit_on(conn)`` over
                the application's own psycopg connection): the invocation and its command are written in it and
                commit with it, or not at all; nothing is committed, retried or run here. Dispatched only.
        Returns:
            The invocation: ``pending`` when dispatched; its verdict after an inline run; the existing one on a
            replay of the key with the same binding (nothing runs again, B2; its ``replayed`` is True). With
            ``tx``, the record as that unit sees it (written, not yet committed, when new).
        Raises:
            InvalidInput: unknown action, invalid params or arguments (an identifier holding a NUL character
            or a lone surrogate among them, on every backend); ``Inline()`` with ``tx`` (an inline run
            would call the provider before the caller commits). IdempotencyConflict: the key is bound to
            another action version, actor, authority or params (B3, B4); with ``tx``, nothing of this call
            was written and the caller's transaction is still usable. RecoverableFinalization: an inline run
            could not record its outcome; ``execute(id)`` retries it while this host holds its lease (A3, A6).
            RedactionFailed: the params hook raised, or its result is no JSON object or no longer validates
            against the action's params model; nothing was stored (Q1, ADR 0042).
            StoreBusy, StoreUnavailable, Conflict: with ``tx``, raised as is (no retry: the caller owns the
            transaction and retries it whole). StoreUnavailable after an inline run: its outcome is stored but
            could not be read back; the message names the invocation, read it with ``get``.
        """
        # Before anything reads the store: PostgreSQL refused a NUL as a schema conflict (exit 3, HTTP 409) where
        # SQLite stored it, and a lone surrogate failed in the driver (a break-it trial).
        require_storable_text(action_id=action_id, actor=actor, authority=authority,
                              idempotency_key=idempotency_key, tenant=tenant, space=space)
        try:
            action = self.actions.resolve(action_id, version)
        except NotFound as error:
            raise InvalidInput(str(error)) from None
        if not actor or len(actor) > 200 or len(authority) > 200:
            raise InvalidInput("actor is 1 to 200 characters and authority at most 200")
        if not idempotency_key or len(idempotency_key) > 255:
            raise InvalidInput("an idempotency key is 1 to 255 characters")
        if idempotency_key != idempotency_key.strip():  # HTTP strips a header's outer spaces: ADR 0104
            raise InvalidInput("an idempotency key may not begin or end with whitespace: the API's header cannot "
                               "carry it, so the same key would name another invocation there")
        if not tenant or not space or len(tenant) > 200 or len(space) > 200:
            raise InvalidInput("tenant and space are 1 to 200 characters")
        try:
            validated = action.params.model_validate(params)
        except ValidationError as error:
            raise InvalidInput(f"invalid params for {action.id}: {error.error_count()} error(s): "
                               + "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                           for e in error.errors()[:5])) from None
        try:
            native, plain = validated.model_dump(), validated.model_dump(mode="json")
        except (ValueError, UnicodeError) as error:  # bytes that are not text, a serializer that raised
            raise InvalidInput(f"invalid params for {action.id}: they have no JSON form "
                               f"({type(error).__name__}: {str(error)[:200]})") from None
        plain = _sets_in_order(native, plain)
        refused = _unstorable(native, "params")
        if refused is None and json_depth(plain) > PARAMS_MAX_DEPTH:
            refused = f"params nest deeper than {PARAMS_MAX_DEPTH} levels"
        if refused is None:
            try:
                digest = params_digest(plain, key=self.config.params_digest_key)
            except TypeError as error:  # canonical JSON refused it (A14): bad input, not a crash
                refused = str(error)
            except UnicodeEncodeError:
                refused = "a string holds a lone surrogate, which has no UTF-8 form"
        if refused is not None:
            raise InvalidInput(f"invalid params for {action.id}: {refused}")
        bound = action.state.bind(validated) if action.state is not None else None  # A19: fixed from here on
        stored = self._redacted_params(action, plain)
        inline = isinstance(mode, Inline)
        if inline and tx is not None:
            # The inline run calls the provider at once, before the caller's transaction commits: a rollback
            # would then leave a provider effect with no invocation that records it (ADR 0033).
            raise InvalidInput("Inline() cannot run in the caller's transaction: submit with Dispatch() "
                               "(workers run it once the transaction commits), or without tx")
        draft = NewInvocation(  # its id is derived in the unit, from the store's identity (ADR 0108)
            id="", tenant_id=tenant, space_id=space,
            action_id=action.id, action_version=action.version, idempotency_key=idempotency_key, actor=actor,
            authority=authority, binding_digest=binding_digest(action.version, actor, authority),
            params_digest=digest, params=stored,
            mode=InvocationMode.INLINE if inline else InvocationMode.DISPATCH,
            status=InvocationStatus.RUNNING if inline else InvocationStatus.PENDING, state_binding=bound)

        kind = kind_of(action.id, action.version)

        def unit(tx: UnitOfWork) -> tuple[InvocationRecord, ClaimedCommand | None, InvocationView | None]:
            existing = tx.host.find_invocation(tenant_id=tenant, space_id=space, action_id=action.id,
                                               idempotency_key=idempotency_key)
            new = replace(draft, id=self.invocation_id(tenant, space, action.id, idempotency_key, tx))
            if existing is None and tx.host.insert_invocation(new):
                if inline:
                    lease = tx.outbox.insert_leased(command_id=new.id, kind=kind, payload={"invocation_id": new.id},
                                                    owner=self.owner, lease_seconds=self.config.lease_seconds)
                    stored = tx.host.get_invocation(new.id)
                    assert stored is not None
                    tx.events.append_event_with_outbox(invocation_event(stored, STARTED, {"mode": "inline"}))
                    return stored, ClaimedCommand(new.id, kind, {"invocation_id": new.id}, lease), None
                tx.outbox.insert(command_id=new.id, kind=kind, payload={"invocation_id": new.id})
                stored = tx.host.get_invocation(new.id)
                assert stored is not None
                # Written by this unit: no steps and no resolution yet. The view is read here rather than in a
                # transaction of its own after COMMIT (one unit per submit, not two).
                return stored, None, view(stored, (), state=state_json(tx, stored))
            winner = existing or tx.host.find_invocation(tenant_id=tenant, space_id=space, action_id=action.id,
                                                         idempotency_key=idempotency_key)
            if winner is None:  # pragma: no cover - the insert lost to a row this unit cannot see
                raise Conflict("the idempotency key is being written concurrently; submit again")
            check_replay(winner, action_version=action.version, actor=actor, authority=authority, params=plain,
                         key=self.config.params_digest_key)
            return winner, None, replace(read_view(tx, winner), replayed=True)

        if tx is not None:
            # The caller's unit: no retry (a busy retry would replay the caller's own writes, which only the
            # caller can do) and no read through a unit of ours, which could not see this uncommitted row.
            _, _, shown = unit(tx)
            assert shown is not None  # Inline() was refused above
            return shown
        record, claimed, shown = self.store.transact(unit, name="host.submit")
        if shown is not None:
            return shown
        assert claimed is not None  # the unit shows what it wrote or found unless it started an inline run
        # Inserted running under this caller's lease: its status change (S3), then the run, then its outcome.
        telemetry.emit(self.runtime.telemetry, telemetry.STATUS, invocation_id=record.id,
                       status=str(InvocationStatus.RUNNING))
        ctx = CommandContext(self.store, claimed, self.config.lease_seconds)
        self._run_inline(ctx, fresh=True)
        try:
            return self.get(record.id)
        except StoreUnavailable as error:  # the run's outcome is stored; only reading it back failed
            raise StoreUnavailable(f"invocation {record.id} ran; reading its outcome back failed ({error}): "
                                   "read it again with get()") from error

    def _redacted_params(self, action: Action, plain: dict[str, Any]) -> dict[str, Any]:
        """Q1: the params as stored and executed, redacted once; they must still validate, since every run
        (dispatched, recovered, inline) executes on the stored params (ADR 0042)."""
        if self.runtime.redaction.redact_action_parameters is None:
            return plain
        redacted = redact_params(self.runtime.redaction, action.id, plain)
        try:
            return action.params.model_validate(redacted).model_dump(mode="json")
        except ValidationError:
            raise RedactionFailed(f"the redact_action_parameters hook returned params that do not validate for "
                                  f"{action.id}; nothing was stored") from None

    def _run_inline(self, ctx: CommandContext, *, fresh: bool) -> None:
        heartbeat = Heartbeat(self.config.lease_seconds)
        heartbeat.track(ctx)
        heartbeat.start()
        try:
            Execution(self.runtime, ctx, fresh=fresh).run()
        except RecoverableFinalization:
            if not ctx.lost and not ctx.finished:  # a durable verdict (K8) leaves no lease to retry under
                with self._lock:
                    self._held[ctx.command.id] = ctx  # the caller may retry under its lease (A6)
            raise
        finally:
            heartbeat.untrack(ctx)
            heartbeat.stop()
        with self._lock:
            self._held.pop(ctx.command.id, None)

    def execute(self, invocation_id: str) -> InvocationView:
        """Direct execution (host-spec A3, A6): re-run an inline invocation whose run raised
        ``RecoverableFinalization``, under the caller lease this host still holds. It counts no attempt (A4);
        the caller caps its own retries. Once the lease is gone, a worker takes the invocation over (A8).

        Returns:
            The invocation after the run, or as stored when it is already settled.
        Raises:
            NotFound: no such invocation. Conflict: it is not settled and this host holds no lease on it (a
            worker runs it). RecoverableFinalization: again nothing could be recorded.
        """
        with self._lock:
            ctx = self._held.pop(invocation_id, None)
        if ctx is not None:
            self._run_inline(ctx, fresh=False)
            return self.get(invocation_id)
        current = self.get(invocation_id)
        if current.status.terminal:
            return current
        if current.status is InvocationStatus.AWAITING_APPROVAL:
            raise Conflict(f"invocation {invocation_id} awaits approval: approve or reject it (ADR 0044)")
        raise Conflict(f"invocation {invocation_id} is {current.status} and held by no lease of this host; "
                       "workers run it")

    # ── governance (ADRs 0043-0045) ──
    def preview(self, action_id: str, params: Any, *, actor: str, authority: str = "", tenant: str = "default",
                space: str = "default", version: int | None = None,
                idempotency_key: str = "preview") -> list[PolicyOutcome]:
        """Evaluate the host's and the action's policies for a would-be submission, outside any execution
        (host-spec D9): nothing is written, and whatever a policy (or the mutation-governance callback) raises,
        ``TransientGovernanceError`` included, reaches the caller as raised.

        Args:
            as ``submit``; ``idempotency_key`` only names the invocation id the policies see.
        Returns:
            Each policy's decision, in evaluation order.
        Raises:
            InvalidInput: unknown action or invalid params. Any error a policy raises.
        """
        try:
            action = self.actions.resolve(action_id, version)
        except NotFound as error:
            raise InvalidInput(str(error)) from None
        try:
            plain = action.params.model_validate(params).model_dump(mode="json")
        except ValidationError as error:
            raise InvalidInput(f"invalid params for {action.id}: {error.error_count()} error(s)") from None
        ctx = PolicyContext(invocation_id=self.invocation_id(tenant, space, action.id, idempotency_key),
                            tenant_id=tenant,
                            space_id=space, action_id=action.id, action_version=action.version, actor=actor,
                            authority=authority, params=plain, attempt=0, preview=True)
        if action.mutation_governance is not None:
            ctx = dataclasses.replace(ctx, footprint=dict(action.mutation_governance(ctx)))
        return evaluate_batch(self.runtime.policies + action.policies, ctx)

    def approvals(self, *, tenant: str | None = None, space: str | None = None,
                  limit: int = 100) -> list[ApprovalRequest]:
        """Open approval requests, newest first (host-spec P; ADR 0044), expired ones until the sweep ends them."""
        return list_requests(self.store, tenant=tenant, space=space, limit=limit)

    def approve(self, invocation_id: str, *, approver: str, authority: str, note: str = "") -> InvocationView:
        """Approve an ``awaiting_approval`` invocation and resume it now under a temporary lease this host holds
        (host-spec P3, P4, H14; ADR 0044): ``attempt_count`` becomes at least 1 and is not incremented; above
        the recovery budget the resume settles ``reconciliation_required`` before the handler.

        Args:
            approver: who approves (1..200 chars; recorded). authority: must equal the request's authority.
            note: recorded with the decision (at most 2000 chars).
        Returns:
            The invocation after the resume (its verdict, or ``awaiting_approval`` again for a later policy).
        Raises:
            InvalidInput: bad arguments, or this host does not define the invocation's action and version
            (the resume would settle it ``failed`` as an unknown action; nothing is recorded). NotFound.
            Conflict: it does not await approval. NotAllowed: another authority. ApprovalExpired: the request
            expired (the sweep ends it ``failed``).
            RecoverableFinalization: the resume could not record its outcome; its lease expires and a worker
            takes it over.
        """
        check_decider(approver, authority, note)
        current = self.get(invocation_id)  # NotFound; the action and version of an invocation never change
        try:
            self.actions.resolve(current.action_id, current.action_version)
        except NotFound:
            raise InvalidInput(f"this host does not define action {current.action_id} version "
                               f"{current.action_version}: approve {invocation_id} from the app that serves it "
                               "(the resume runs in the approving process)") from None
        record, lease = self.store.transact(approve_unit(
            invocation_id, approver=approver, authority=authority, note=note, owner=self.owner,
            lease_seconds=self.config.lease_seconds), name=DECIDE_UNIT)
        telemetry.emit(self.runtime.telemetry, telemetry.STATUS, invocation_id=invocation_id,
                       status=str(InvocationStatus.RUNNING))
        kind = kind_of(record.action_id, record.action_version)
        ctx = CommandContext(self.store, ClaimedCommand(invocation_id, kind, {"invocation_id": invocation_id}, lease),
                             self.config.lease_seconds)
        heartbeat = Heartbeat(self.config.lease_seconds)
        heartbeat.track(ctx)
        heartbeat.start()
        try:
            Execution(self.runtime, ctx, approval_resume=True).run()
        finally:
            heartbeat.untrack(ctx)
            heartbeat.stop()
        return self.get(invocation_id)

    def reject(self, invocation_id: str, *, approver: str, authority: str, note: str = "") -> InvocationView:
        """Reject an ``awaiting_approval`` invocation: ``failed`` with the reason (ADR 0044).

        Raises:
            as ``approve`` (no resume runs).
        """
        check_decider(approver, authority, note)
        self.store.transact(reject_unit(invocation_id, approver=approver, authority=authority, note=note),
                            name=DECIDE_UNIT)
        telemetry.emit(self.runtime.telemetry, telemetry.STATUS, invocation_id=invocation_id,
                       status=str(InvocationStatus.FAILED))
        return self.get(invocation_id)

    def expire_approvals(self, *, budget_seconds: float = 5.0) -> int:
        """End every expired approval request ``failed`` now (the worker's sweep runs this too); how many."""
        return sweep_expired_approvals(self.store, self.runtime.telemetry, budget_seconds=budget_seconds)

    # ── reads ──
    def get(self, invocation_id: str) -> InvocationView:
        """The invocation with its steps. Raises ``NotFound``."""

        def read(tx: UnitOfWork) -> InvocationView | None:
            record = tx.host.get_invocation(invocation_id)
            return None if record is None else read_view(tx, record)

        found = self.store.read(read)
        if found is None:
            raise NotFound(f"no invocation {invocation_id}")
        return found

    def entity_state(self, subject: str, entity_id: str, *, tenant: str = "default",
                     space: str = "default") -> EntityStateRecord | None:
        """An entity's recorded state (host-spec A19; ADR 0077): ``state``, ``previous_state`` (before the
        invocation that last changed it), ``updated_by_invocation`` and ``updated_at``; None when no invocation
        recorded one. The entity's ``StateTransitioned`` facts are its history in the event log (subject
        ``(subject, entity_id)``)."""
        key = EntityKey(tenant, space, subject, entity_id)
        found: EntityStateRecord | None = self.store.read(lambda tx: tx.host.get_entity_state(key))
        return found

    def list(self, *, tenant: str | None = None, space: str | None = None, status: InvocationStatus | None = None,
             action_id: str | None = None, limit: int = 100) -> list[InvocationView]:
        """Invocations newest first (steps omitted, an operator's resolution included), filtered by what is
        given."""
        def read(tx: UnitOfWork) -> builtins.list[InvocationView]:
            records = tx.host.list_invocations(tenant_id=tenant, space_id=space, status=status,
                                               action_id=action_id, limit=limit)
            # A resolved invocation says so in a list too, not just "succeeded" beside its ambiguity error.
            return [view(r, (), resolution_json(tx.host.get_resolution(r.id)) if r.status.terminal else None,
                         state_json(tx, r)) for r in records]

        found: builtins.list[InvocationView] = self.store.read(read)
        return found

    # ── the operator (host-spec §1.Y-13, §2.7; ADRs 0048, 0049) ──
    def resolve(self, invocation_id: str, outcome: str, *, operator: str, note: str,
                evidence: dict[str, Any] | None = None) -> InvocationView:
        """Settle a ``reconciliation_required`` invocation ``succeeded`` or ``failed`` on an operator's word
        (host-spec §1.Y-13; ADR 0048), in one unit ``host.resolve``: the resolution row (with a copy of the
        settled verdict), the status move and an ``InvocationResolved`` event with its outbox row. The earlier
        verdict event, error, reconciliation, adapter rows and reconciliation log stay as they were.

        Args:
            invocation_id: the invocation. outcome: ``"succeeded"`` or ``"failed"``. operator: who decides
                (1..200 chars). note: what was found (1..2000 chars). evidence: a JSON object (e.g. the charge
                found at the provider, at most 64 KiB) or None.
        Returns:
            The invocation after the resolution, its ``resolution`` set. The identical request again returns
            it unchanged and writes nothing.
        Raises:
            InvalidInput: bad arguments. NotFound: no such invocation. Conflict: not ``reconciliation_required``
            (the message names its status), already resolved with another request, or held by a live lease.
        """
        request = parse_request(invocation_id, outcome, operator, note, evidence)
        resolved: bool = self.store.transact(lambda tx: apply_resolution(tx, request), name="host.resolve")
        if resolved:
            telemetry.emit(self.runtime.telemetry, telemetry.STATUS, invocation_id=invocation_id,
                           status=str(request.outcome))
        return self.get(invocation_id)

    def reconciliation_queue(self, *, tenant: str | None = None, space: str | None = None,
                             limit: int = 100) -> builtins.list[QueueEntry]:
        """The invocations awaiting an operator, oldest verdict first (host-spec §2.7): each with its kind,
        reason and what to look up at the provider. ``limit`` 1..1000 (``InvalidInput`` otherwise)."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000")

        def read(tx: UnitOfWork) -> builtins.list[QueueEntry]:
            entries = []
            for record in tx.host.reconciliation_queue(tenant_id=tenant, space_id=space, limit=limit):
                rows = tx.host.list_adapter_invocations(record.id)
                entries.append(QueueEntry(
                    invocation=view(record, rows, state=state_json(tx, record)).as_json(),
                    kind=(record.reconciliation or {}).get("kind"),
                    reason=record.error, waiting_since=record.updated_at.isoformat(),
                    lookups=tuple(lookups(record, rows))))
            return entries

        found: builtins.list[QueueEntry] = self.store.read(read)
        return found

    def history(self, invocation_id: str) -> tuple[InvocationView, dict[str, Any]]:
        """The invocation and its history (``operator.history``: events in log order, both reconciliation logs,
        the resolution, the lease timeline, the provider lookups), read in one unit. Raises ``NotFound``."""

        def read(tx: UnitOfWork) -> tuple[InvocationView, dict[str, Any]] | None:
            record = tx.host.get_invocation(invocation_id)
            if record is None:
                return None
            rows = tx.host.list_adapter_invocations(invocation_id)
            told = history(tx, record, rows)
            return view(record, rows, told["resolution"], state_json(tx, record)), told

        found = self.store.read(read)
        if found is None:
            raise NotFound(f"no invocation {invocation_id}")
        return found

    def page(self, *, tenant: str | None = None, space: str | None = None, status: InvocationStatus | None = None,
             action_id: str | None = None, after: str | None = None, limit: int = 50) -> builtins.list[InvocationView]:
        """Invocations newest first (steps omitted, resolution included) after the cursor ``after`` (an
        invocation id from the previous page; None from the newest). ``limit`` 1..1000 (``InvalidInput`` otherwise)."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000")
        def read(tx: UnitOfWork) -> builtins.list[InvocationView]:
            records = tx.host.page_invocations(tenant_id=tenant, space_id=space, status=status, action_id=action_id,
                                               after_id=after, limit=limit)
            # A resolved invocation's row says so in a list too (one keyed read each: pages are small).
            return [view(r, (), resolution_json(tx.host.get_resolution(r.id)) if r.status.terminal else None,
                         state_json(tx, r)) for r in records]

        found: builtins.list[InvocationView] = self.store.read(read)
        return found
