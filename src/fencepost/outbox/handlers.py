"""Handlers: what a worker runs for each command kind, and each kind's bounds (issue 10)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fencepost.core.errors import InvalidInput

if TYPE_CHECKING:
    from fencepost.outbox.context import CommandContext
    from fencepost.store.ports import FencedUnit


class Handler(Protocol):
    """Runs one claimed command.

    ``handle(ctx)`` does the work. It either finishes the command itself inside a fenced write
    (``ctx.fenced(..., finish=...)``), or returns and lets the worker mark it DELIVERED (batched with
    others). It raises ``LeaseLost`` (from any fenced write) when fenced out, and may raise
    ``StopRequested`` at a safe point during a graceful stop; any other exception fails the command.

    ``on_failure(tx, ctx, error)`` runs inside the fenced transaction that marks the command FAILED,
    so the handler can fail its parent records atomically with it (seed: a scenario failure fails
    Attempt and Outbox together). It is also how a command whose delivery budget is exhausted ends: with
    ``error`` = ``"delivery budget exhausted (n/max)"`` and the handler never run again, unless the
    handler also has the optional hook of ``BudgetAware``, which the worker then calls instead.
    """

    def handle(self, ctx: CommandContext) -> None: ...

    def on_failure(self, tx: FencedUnit, ctx: CommandContext, error: str) -> None: ...


@dataclass(frozen=True)
class DeliveryBudget:
    """A command's exhausted delivery budget, as the claim after its last allowed delivery sees it (issue 10).

    Attributes:
        deliveries: deliveries before this claim that spent the budget: each ended without a verdict and was
            not given back (a release gives its delivery back).
        max_deliveries: the kind's budget (``KindPolicy.max_deliveries``).
    """

    deliveries: int
    max_deliveries: int

    @property
    def error(self) -> str:
        """The command's (and, for rehearsals, the Attempt's) error text: ``delivery budget exhausted (n/max)``."""
        return f"delivery budget exhausted ({self.deliveries}/{self.max_deliveries})"


@runtime_checkable
class BudgetAware(Protocol):
    """The optional hook a ``Handler`` may have for the budget verdict.

    ``on_budget_exhausted(tx, ctx, budget)`` runs instead of ``on_failure`` inside the fenced transaction
    that marks the command FAILED with ``budget.error``: the handler records its own verdict with what it
    wants operators to see (the rehearsal handler seals the command's lease history as a Receipt's
    evidence, ADR 0021). The handler's ``handle`` is not run.
    """

    def on_budget_exhausted(self, tx: FencedUnit, ctx: CommandContext, budget: DeliveryBudget) -> None: ...


@runtime_checkable
class FailureFollowUp(Protocol):
    """The optional hook a handler may have for after the worker's failure verdict committed.

    ``after_failure(ctx, budget)`` runs once the unit that failed the command (``on_failure``, or
    ``on_budget_exhausted`` with ``budget`` given) has committed, with the lease already released: the handler
    reports what it wrote and adds evidence under its own conditions (the action host settles the rows it reads
    only now, host-spec H5-H7). What it raises is logged; the verdict stands.
    """

    def after_failure(self, ctx: CommandContext, budget: DeliveryBudget | None) -> None: ...


#: Deliveries a command gets unless its kind says otherwise: a crash loop ends with a verdict, not forever.
DEFAULT_MAX_DELIVERIES = 10


@dataclass(frozen=True)
class KindPolicy:
    """The bounds of one command kind (issue 10).

    Attributes:
        time_limit: seconds a delivery may run before it is interrupted and recorded as over its limit;
            None for no limit (a worker may still set one, ``WorkerConfig.time_limits``).
        max_deliveries: claims a command gets; the claim after the last ends it FAILED with
            ``delivery budget exhausted (n/max)`` instead of running it again (1..1000).
    """

    time_limit: float | None = None
    max_deliveries: int = DEFAULT_MAX_DELIVERIES


class FunctionHandler:
    """Adapts a plain ``fn(ctx) -> None`` with no parent records into a ``Handler``."""

    def __init__(self, fn: Callable[[CommandContext], None]) -> None:
        self.fn = fn

    def handle(self, ctx: CommandContext) -> None:
        self.fn(ctx)

    def on_failure(self, tx: FencedUnit, ctx: CommandContext, error: str) -> None:
        return None


class HandlerRegistry:
    """Maps command kinds to handlers."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._policies: dict[str, KindPolicy] = {}

    def register(self, kind: str, handler: Handler, *, time_limit: float | None = None,
                 max_deliveries: int = DEFAULT_MAX_DELIVERIES) -> None:
        """Register ``handler`` for ``kind`` with its bounds (``KindPolicy``).

        Raises:
            InvalidInput: ``kind`` is empty, longer than 100 chars, or already registered; a time limit
                not above 0; a delivery budget outside 1..1000.
        """
        if not kind or len(kind) > 100:
            raise InvalidInput("a command kind is 1 to 100 characters")
        if kind in self._handlers:
            raise InvalidInput(f"a handler for {kind!r} is already registered")
        if time_limit is not None and not time_limit > 0:
            raise InvalidInput(f"the time limit of {kind!r} must be above 0 seconds")
        if not 1 <= max_deliveries <= 1000:
            raise InvalidInput(f"the delivery budget of {kind!r} must be between 1 and 1000")
        self._handlers[kind] = handler
        self._policies[kind] = KindPolicy(time_limit=time_limit, max_deliveries=max_deliveries)

    def get(self, kind: str) -> Handler:
        return self._handlers[kind]

    def policy(self, kind: str) -> KindPolicy:
        """The bounds registered with ``kind``."""
        return self._policies[kind]

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)
