"""The state binding of an action: its guard, the handler's view of the bound entity and the Host's
``StateTransitioned`` fact (host-spec A13, A17, A19, J3; ADR 0077).

``Action(state=StateBinding(subject="order", target="charged", entity_id=lambda p: p.order_id, guard=...))``
binds each invocation to one entity. At submission ``StateBinding.bind`` names it from the validated params; the
binding (subject, entity id, target) is stored with the invocation and never changes.

- **The guard** (A13) is ``guard(from_state, params) -> bool``, where ``from_state`` is the entity's recorded
  state before this invocation changed it (None: it has none). It is checked under the entity's lock in the
  handler's unit, before the handler: False, anything but True, or an exception fails the invocation closed
  (``failed``, no handler, no adapter; A14 on recovery too). It is checked again in the unit that records the
  fact, because another invocation may have moved the entity while the steps ran. It must be a pure, fast
  function of its arguments: it runs inside a write transaction, as the handler does.
- **The handler** sees the entity as ``HandlerContext.bound_entity`` and may set its state itself
  (``HandlerContext.set_state``): a handler write, committed with the handler's unit.
- **The fact** (A17, A19) commits in the finalization unit of a ``succeeded`` verdict, or in the unit that parks a
  handoff, after the declared events: the entity's state is set to the target unless it already is (the handler
  set it, or it had it before: Host keeps it), and one ``StateTransitioned`` event is appended under
  ``state_event_id(invocation)``, so a retried or recovered unit keeps exactly one (first write wins). Its subject
  is the entity (``Subject(subject, entity_id)``): the entity's facts in the log are its history. A ``failed`` or
  ``reconciliation_required`` verdict records none; nothing reverts a recorded fact.

This module defines the binding and builds the fact; ``fencepost.host.finalization`` writes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fencepost.core.errors import InvalidInput
from fencepost.host.lifecycle import event_id
from fencepost.host.outcome import describe_error
from fencepost.store.host_records import (
    EntityBinding,
    EntityKey,
    EntityStateRecord,
    InvocationRecord,
    NewEvent,
    Subject,
)

#: The Host-generated fact of a state-bound invocation (host-spec A17, A19).
STATE_TRANSITIONED = "StateTransitioned"

#: Where the fact was recorded: the finalization of a success, or the parking of a handoff (A17).
TransitionPoint = Literal["finalization", "parking"]

#: Who put the entity in its target: the host's fact, the handler itself (kept), or an earlier change that
#: another invocation made (kept).
SetBy = Literal["host", "handler", "earlier"]

# A subject is lowercase, so it never equals one of the host's own subject types (``ActionInvocation``).
_SUBJECT = re.compile(r"^[a-z][a-z0-9_.-]{0,99}$")
_STATE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
MAX_ENTITY_ID = 200

Guard = Callable[[str | None, Any], bool]


def check_state(state: Any, what: str = "a state") -> str:
    """``state`` when it is a valid state name (1..100 characters of letters, digits, ``_``, ``.``, ``:``, ``-``,
    starting with a letter or digit). Raises ``InvalidInput`` otherwise."""
    if not isinstance(state, str) or not _STATE.match(state):
        raise InvalidInput(f"{what} is 1 to 100 characters of letters, digits, '_', '.', ':' and '-', starting "
                           f"with a letter or a digit; got {state!r:.120}")
    return state


@dataclass(frozen=True)
class StateBinding:
    """An action's state binding (host-spec A13, A19; ADR 0077).

    Attributes:
        subject: the kind of entity, e.g. ``order``: 1..100 characters of ``[a-z0-9_.-]``, starting with a letter.
        target: the state a success (or a parked handoff) records for the entity (see ``check_state``).
        entity_id: ``(validated params) -> str``: which entity an invocation is bound to (1..200 characters), called
            once, at submission. It must be deterministic: the id is stored with the invocation.
        guard: ``(from_state, params) -> bool``, or None for none. ``from_state`` is the entity's recorded state
            before this invocation changed it (None when it has none); ``params`` the validated params model. Only
            ``True`` allows the transition; False, another value or an exception refuses it (fail closed, A13).
            Pure and fast: it runs inside the handler's unit and the fact's unit.
    Raises:
        InvalidInput: a subject or target out of bounds, or ``entity_id``/``guard`` not callable.
    """

    subject: str
    target: str
    entity_id: Callable[[Any], str]
    guard: Guard | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.subject, str) or not _SUBJECT.match(self.subject):
            raise InvalidInput(f"a state binding's subject is 1 to 100 characters of a-z, 0-9, '_', '.' and '-', "
                               f"starting with a letter; got {self.subject!r:.120}")
        check_state(self.target, "a state binding's target")
        if not callable(self.entity_id):
            raise InvalidInput("a state binding's entity_id is a function of the validated params")
        if self.guard is not None and not callable(self.guard):
            raise InvalidInput("a state binding's guard is a function (from_state, params) -> bool, or None")

    def bind(self, params: Any) -> EntityBinding:
        """The entity an invocation with validated ``params`` is bound to (called once, at submission).

        Raises:
            InvalidInput: ``entity_id`` raised, or returned something other than 1..200 characters of text
                without NUL.
        """
        try:
            entity = self.entity_id(params)
        except Exception as error:
            raise InvalidInput(f"the state binding could not name the {self.subject}: "
                               f"{describe_error(error)[:300]}") from None
        if not isinstance(entity, str) or not 1 <= len(entity) <= MAX_ENTITY_ID or "\x00" in entity:
            raise InvalidInput(f"the state binding's entity_id must return 1 to {MAX_ENTITY_ID} characters of "
                               f"text without NUL for the {self.subject}")
        return EntityBinding(self.subject, entity, self.target)


@dataclass(frozen=True)
class BoundEntity:
    """The bound entity as the handler sees it (``HandlerContext.bound_entity``).

    Attributes:
        subject, entity_id, target: the binding. from_state: the entity's state before this invocation changed
            it (what the guard was given). state: its recorded state now (None: none).
    """

    subject: str
    entity_id: str
    target: str
    from_state: str | None
    state: str | None


class StateRefused(Exception):
    """The guard did not allow the transition (host-spec A13): the unit that checked it rolls back.

    Attributes:
        binding: the bound entity. from_state: the state the guard was given. reason: why (the guard refused,
            raised, or returned something other than a bool). changed_by: the invocation that last changed the
            entity when that was not this one (None otherwise).
    """

    def __init__(self, binding: EntityBinding, from_state: str | None, reason: str,
                 changed_by: str | None = None) -> None:
        self.binding, self.from_state, self.reason, self.changed_by = binding, from_state, reason, changed_by
        super().__init__(self.describe())

    def describe(self) -> str:
        """One sentence naming the entity, the transition and the reason."""
        found = "no recorded state" if self.from_state is None else f"state {self.from_state}"
        moved = f" (last changed by invocation {self.changed_by})" if self.changed_by is not None else ""
        return (f"the state guard refuses {self.binding.subject} {self.binding.entity_id} from {found}{moved} to "
                f"{self.binding.target}: {self.reason}")

    def evidence(self) -> dict[str, Any]:
        """What an operator needs, as plain JSON."""
        return {"subject": self.binding.subject, "entity_id": self.binding.entity_id, "from": self.from_state,
                "to": self.binding.target, "reason": self.reason, "changed_by": self.changed_by}


def entity_key(invocation: InvocationRecord) -> EntityKey:
    """The key of the entity ``invocation`` is bound to. Raises ``ValueError`` for an unbound invocation."""
    binding = invocation.state_binding
    if binding is None:
        raise ValueError(f"invocation {invocation.id} has no state binding")
    return EntityKey(invocation.tenant_id, invocation.space_id, binding.subject, binding.entity_id)


def state_before(row: EntityStateRecord | None, invocation_id: str) -> str | None:
    """The entity's state before ``invocation_id`` changed it (None when it has no recorded state)."""
    return None if row is None else row.state_before(invocation_id)


def check_guard(guard: Guard | None, invocation: InvocationRecord, row: EntityStateRecord | None,
                params: Any) -> str | None:
    """Check the guard for ``invocation``'s transition from the entity's ``row`` (read under its lock).

    Returns:
        The state the transition is from (``state_before``).
    Raises:
        StateRefused: the guard returned anything but True, or raised (fail closed, A13).
    """
    binding = invocation.state_binding
    assert binding is not None
    before = state_before(row, invocation.id)
    if guard is None:
        return before
    changed_by = None if row is None or row.updated_by_invocation == invocation.id else row.updated_by_invocation
    try:
        allowed = guard(before, params)
    except Exception as error:
        raise StateRefused(binding, before, f"the guard raised {describe_error(error)[:300]}", changed_by) from None
    if allowed is not True:
        reason = ("the guard refused it" if allowed is False
                  else f"the guard returned {type(allowed).__name__}, not True or False")
        raise StateRefused(binding, before, reason, changed_by)
    return before


def state_event_id(invocation_id: str) -> str:
    """The stable id of the invocation's one ``StateTransitioned`` fact (first write wins)."""
    return event_id(invocation_id, STATE_TRANSITIONED, "state")


def transition_event(invocation: InvocationRecord, from_state: str | None, set_by: SetBy,
                     at: TransitionPoint) -> NewEvent:
    """The ``StateTransitioned`` fact of ``invocation``: about the entity, under ``state_event_id``.

    Payload: ``invocation_id``, ``action_id``, ``subject``, ``entity_id``, ``from`` (None: no recorded state),
    ``to`` (the target), ``set_by`` (``host``, ``handler`` or ``earlier``) and ``at`` (``finalization`` or
    ``parking``).
    """
    binding = invocation.state_binding
    assert binding is not None
    return NewEvent(id=state_event_id(invocation.id), tenant_id=invocation.tenant_id, space_id=invocation.space_id,
                    subject=Subject(binding.subject, binding.entity_id), type=STATE_TRANSITIONED,
                    payload={"invocation_id": invocation.id, "action_id": invocation.action_id,
                             "subject": binding.subject, "entity_id": binding.entity_id, "from": from_state,
                             "to": binding.target, "set_by": set_by, "at": at})


@dataclass(frozen=True)
class Transition:
    """The fact one unit records (``fencepost.host.finalization``): the invocation (with its binding), the
    action's guard and the validated params it is given, and where it is recorded."""

    invocation: InvocationRecord
    guard: Guard | None
    params: Any
    at: TransitionPoint
