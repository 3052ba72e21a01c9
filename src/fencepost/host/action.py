"""Action definitions and their registry (host-spec A1, A11, A13, A17, A19, E8; §2.2).

An ``Action`` is an id and version, a pydantic params model, an optional result model, an ``idempotent``
flag (default False), a handler and an **ordered** tuple of ``AdapterStep``s. Recovery depends on exactly
that definition and order (A1, G): a recovered invocation is matched to its steps by index and name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel

from fencepost.core.canonical import WRAPPED_MAX_DEPTH, canonical_json, json_depth
from fencepost.core.errors import InvalidInput, LeaseLost, NotFound
from fencepost.host.governance import check_policies
from fencepost.host.private_fields import check_private_fields
from fencepost.host.state import BoundEntity, StateBinding, check_state
from fencepost.store.host_records import EntityKey

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")  # with the version, the command kind fits 100 chars
_STEP = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")


class DecisionRequired(Exception):
    """The handler's operator-decision signal (host-spec A11): no adapter runs after it, no retry follows, and
    the invocation ends ``reconciliation_required`` with kind ``handler_decision_required`` and ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RetryPolicy:
    """The retry helper of one step (host-spec E8): only a definite ``transient_failure`` (or a raised
    non-timeout error) is retried, within the step, at most ``max_attempts`` calls in all.

    Attributes:
        max_attempts: provider calls in all, 1..20 (1: no retry).
        initial: the wait before the second call; ``factor`` multiplies it for each later one. A
            provider's ``retry_after`` (seconds) replaces it when given.
    """

    max_attempts: int = 1
    initial: timedelta = timedelta(seconds=0.1)
    factor: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not 1 <= self.max_attempts <= 20:
            raise InvalidInput("a retry policy makes 1 to 20 attempts")
        if self.initial < timedelta(0) or not 1.0 <= self.factor <= 10.0:
            raise InvalidInput("a retry policy waits >= 0 and grows by a factor of 1 to 10")

    def wait_before(self, attempt: int) -> float:
        """Seconds to wait before call ``attempt`` (2 for the first retry)."""
        return float(self.initial.total_seconds() * self.factor ** max(0, attempt - 2))


@dataclass(frozen=True)
class HandlerContext:
    """What an action's handler is given (host-spec §2.2).

    Attributes:
        invocation_id, tenant_id, space_id, actor: the invocation. attempt: its ``attempt_count`` now (0 for
            an inline run). is_recovery: this execution took the invocation over (G9: an idempotent
            action's handler runs again).
        tx: the fenced unit of work the handler runs in, for its own domain writes in the control store; they
            commit with the handler's unit, before any adapter runs (A17). The handler may run more than once
            (a busy retry, a recovery): it must have no effect outside ``tx``.
        bound_entity: the entity a state-bound action's invocation is bound to, as read under its lock when the
            guard allowed the transition (ADR 0077); None for an action without a state binding.
    """

    invocation_id: str
    tenant_id: str
    space_id: str
    actor: str
    attempt: int
    is_recovery: bool
    tx: Any
    bound_entity: BoundEntity | None = None
    _events: list[tuple[str, dict[str, Any]]] = field(default_factory=list, repr=False)

    def set_state(self, state: str | None = None) -> None:
        """Set the bound entity's recorded state in the handler's unit (host-spec A19, "the handler already set
        it"; ADR 0077). It commits with the handler's other writes, before any adapter runs, whatever the
        invocation's verdict later is. When it sets the target, the Host keeps it: its fact names the handler.

        Args:
            state: the state to record (default: the binding's target), e.g. an intermediate ``charging``.
        Raises:
            InvalidInput: the action has no state binding, or ``state`` is not a valid state name.
            LeaseLost: the invocation is no longer running under this execution's lease.
        """
        entity = self.bound_entity
        if entity is None:
            raise InvalidInput("set_state needs an action with a state binding (Action(state=StateBinding(...)))")
        value = check_state(entity.target if state is None else state)
        key = EntityKey(self.tenant_id, self.space_id, entity.subject, entity.entity_id)
        stored = self.tx.host.set_entity_state(key, value, invocation_id=self.invocation_id, lease=self.tx.lease)
        if stored is None:
            raise LeaseLost(f"invocation {self.invocation_id} is no longer running under this lease")
        object.__setattr__(self, "bound_entity", replace(entity, state=stored.state))

    def emit(self, event_type: str, payload: Mapping[str, Any] | None = None) -> None:
        """Declare a domain event; it commits with the invocation's finalization, not before (A17, J3).

        Raises:
            InvalidInput: an event type that is not 1 to 100 characters of text, or a payload that could not be
                recorded (not plain JSON data, a lone surrogate, nesting past ``WRAPPED_MAX_DEPTH``). Checked here,
                in the handler, before any step calls a provider: found only at finalization, it ended the
                invocation reconciliation_required after the provider was charged (a break-it trial).
        """
        if not event_type or len(event_type) > 100:
            raise InvalidInput("an event type is 1 to 100 characters")
        body = dict(payload or {})
        try:
            canonical_json({"type": event_type, "payload": body})
        except TypeError as error:
            raise InvalidInput(f"event {event_type[:100]!r} cannot be recorded: {error}") from None
        if json_depth(body) > WRAPPED_MAX_DEPTH:
            raise InvalidInput(f"event {event_type[:100]!r} cannot be recorded: its payload nests deeper than "
                               f"{WRAPPED_MAX_DEPTH} levels")
        self._events.append((event_type, body))

    @property
    def declared_events(self) -> list[tuple[str, dict[str, Any]]]:
        return list(self._events)


@dataclass(frozen=True)
class StepInputContext:
    """What a step's input function is given: the invocation, the handler's output and earlier steps' outputs."""

    invocation_id: str
    step_name: str
    handler_output: dict[str, Any]
    outputs: dict[str, dict[str, Any]]


StepInput = Callable[[StepInputContext, Any], Mapping[str, Any]]
Handler = Callable[[HandlerContext, Any], Mapping[str, Any] | BaseModel | None]


@dataclass(frozen=True)
class AdapterStep:
    """One provider call of an action, in declared order (host-spec A1, E1-E8).

    Attributes:
        name: unique within the action (1..100 chars of ``[a-z0-9_-]``); names its crash points.
        adapter: the adapter's ``type`` (resolved when the step runs, G10). operation: what it asks for.
        input: builds the step's input from the params (default: the params as JSON). timeout: the step's
            deadline, counted from its first call and spanning the retry helper's attempts and waits (None: none);
            a retry that would start past it fails with no call (F18). retry: the retry helper's bounds.
    """

    name: str
    adapter: str
    operation: str
    input: StepInput | None = None
    timeout: timedelta | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if not _STEP.match(self.name):
            raise InvalidInput(f"step name {self.name!r} must be 1 to 100 characters of a-z, 0-9, _ and -")
        if not self.adapter or not self.operation:
            raise InvalidInput(f"step {self.name!r} needs an adapter and an operation")
        if self.timeout is not None and self.timeout <= timedelta(0):
            raise InvalidInput(f"the timeout of step {self.name!r} must be above 0")


@dataclass(frozen=True)
class Action:
    """An action definition (host-spec A1).

    Attributes:
        id: ``[a-z0-9._-]``, 1..80 chars. version: 1..999999; a changed definition is a new version.
        params: the pydantic model that validates submitted params (validated params are what is digested and
            stored, B6). result: an optional model the final result must satisfy; a field marked
            ``Field(json_schema_extra={"private": True})`` (with a default) is never stored (A16, ADR 0070).
        handler: ``handler(ctx, params) -> mapping | model | None``; raise ``DecisionRequired`` to ask an operator.
        steps: adapter steps in the order they run. idempotent: whether recovery may call a provider again with
            the same ``adapter_invocation_id`` (G14); False (the default) settles an interrupted step as unknown.
        finalization: ``"after_adapters"``: declared events and the verdict commit together after the steps
            (A17, J3). ``before_adapters`` is not offered yet (ADR 0025).
        completion_deadline: how long a handoff (a step answering ``Accepted``) may wait for its external
            completion before the sweep settles it ``reconciliation_required`` (host-spec A15, N12); None: the
            action does not park handoffs, and a step that hands off settles ``reconciliation_required`` at once
            (ADR 0035).
        policies: governance policies evaluated before the handler, after the host's (host-spec D, P; ADR 0043;
            ``fencepost.host.governance``). mutation_governance: ``(PolicyContext) -> mapping``, the mutation
            footprint, computed once and persisted; later attempts reuse it (D5). obligation_resolver:
            ``(PolicyContext, open names) -> satisfied names``, called once the obligations are persisted; any
            error of it fails the invocation (D8).
        extract_execution_attestation: ``(*, input, output, started_at, completed_at) -> Attestation``, called
            for each succeeded step with stored output (G17-G22, ADR 0045); deterministic for the same input.
        plan_steps: ``(validated params) -> steps``: the steps of one invocation, for an action whose steps
            depend on what it is asked to do (a delivery: one step per migration of the package; ADR 0055).
            Used instead of ``steps`` when given. It must depend on the params alone and be deterministic:
            the stored params never change, and recovery matches stored rows to steps by index and name.
        state: the state binding (host-spec A13, A17, A19; ADR 0077; ``fencepost.host.state``): each invocation is
            bound to one entity, its guard is checked before the handler (fail closed), and a success (or a
            parked handoff) records the entity's target state with one ``StateTransitioned`` fact in the
            finalization unit. None: no binding.
    """

    id: str
    version: int
    params: type[BaseModel]
    handler: Handler
    steps: tuple[AdapterStep, ...] = ()
    result: type[BaseModel] | None = None
    idempotent: bool = False
    finalization: Literal["after_adapters"] = "after_adapters"
    completion_deadline: timedelta | None = None
    policies: tuple[Any, ...] = ()
    mutation_governance: Callable[[Any], Mapping[str, Any]] | None = None
    obligation_resolver: Callable[[Any, tuple[str, ...]], Iterable[str]] | None = None
    extract_execution_attestation: Callable[..., Any] | None = None
    plan_steps: Callable[[Any], tuple[AdapterStep, ...]] | None = None
    state: StateBinding | None = None

    def steps_for(self, params: Any) -> tuple[AdapterStep, ...]:
        """The steps of the invocation with validated ``params``: ``plan_steps(params)`` or ``steps``.

        Raises:
            InvalidInput: the planned steps break the rules of ``steps`` (unique names, at most 64).
        """
        if self.plan_steps is None:
            return self.steps
        planned = tuple(self.plan_steps(params))
        names = [s.name for s in planned]
        if len(set(names)) != len(names) or len(planned) > 64:
            raise InvalidInput(f"action {self.id}: planned steps must have unique names, at most 64")
        return planned

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise InvalidInput(f"action id {self.id!r} must be 1 to 80 characters of a-z, 0-9, '.', '_' and '-'")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or not 1 <= self.version <= 999_999:
            raise InvalidInput(f"action {self.id}: the version is an integer from 1 to 999999")
        if not (isinstance(self.params, type) and issubclass(self.params, BaseModel)):
            raise InvalidInput(f"action {self.id}: params must be a pydantic model class")
        if self.result is not None and not (isinstance(self.result, type) and issubclass(self.result, BaseModel)):
            raise InvalidInput(f"action {self.id}: result must be a pydantic model class")
        if self.result is not None:
            check_private_fields(self.result, owner=f"action {self.id}")
        object.__setattr__(self, "steps", tuple(self.steps))
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise InvalidInput(f"action {self.id}: step names must be unique")
        if self.finalization != "after_adapters":
            raise InvalidInput(f"action {self.id}: only finalization='after_adapters' is supported (ADR 0025)")
        if self.completion_deadline is not None and not (
                timedelta(seconds=1) <= self.completion_deadline <= timedelta(days=366)):
            raise InvalidInput(f"action {self.id}: completion_deadline is between 1 second and 366 days")
        if len(self.steps) > 64:
            raise InvalidInput(f"action {self.id}: at most 64 steps")
        object.__setattr__(self, "policies", check_policies(self.policies))
        if self.state is not None and not isinstance(self.state, StateBinding):
            raise InvalidInput(f"action {self.id}: state is a StateBinding or None")


class ActionRegistry:
    """The actions a host knows, by ``(id, version)`` (host-spec A1)."""

    def __init__(self, actions: Iterable[Action] = ()) -> None:
        self._actions: dict[tuple[str, int], Action] = {}
        for action in actions:
            self.register(action)

    def register(self, action: Action) -> None:
        """Add ``action``. Raises ``InvalidInput`` when its ``(id, version)`` is registered already."""
        key = (action.id, action.version)
        if key in self._actions:
            raise InvalidInput(f"action {action.id} version {action.version} is already registered")
        self._actions[key] = action

    def resolve(self, action_id: str, version: int | None = None) -> Action:
        """The action ``action_id`` at ``version`` (default: its highest registered version).

        Raises:
            NotFound: no such action or version (an unknown action, host-spec A18).
        """
        if version is not None:
            found = self._actions.get((action_id, version))
            if found is None:
                raise NotFound(f"unknown action {action_id} version {version}")
            return found
        versions = [v for (a, v) in self._actions if a == action_id]
        if not versions:
            raise NotFound(f"unknown action {action_id}{self._hint(action_id)}")
        return self._actions[(action_id, max(versions))]

    def _hint(self, action_id: str) -> str:
        """``; did you mean X?`` for a near miss, else the registered ids (at most ten): a typo in a submit
        should not leave the user guessing what this host knows (a new-user trial)."""
        known = sorted({a for (a, _) in self._actions})
        if not known:
            return " (this host registers no action)"
        close = difflib.get_close_matches(action_id, known, n=1, cutoff=0.75)
        if close:
            return f"; did you mean {close[0]}?"
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        return f" (this host registers: {shown})"

    def __iter__(self) -> Any:
        return iter(sorted(self._actions.values(), key=lambda a: (a.id, a.version)))
