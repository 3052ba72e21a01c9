"""Handlers: what a worker runs for each command kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

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
    Attempt and Outbox together).
    """

    def handle(self, ctx: CommandContext) -> None: ...

    def on_failure(self, tx: FencedUnit, ctx: CommandContext, error: str) -> None: ...


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

    def register(self, kind: str, handler: Handler) -> None:
        """Register ``handler`` for ``kind``.

        Raises:
            InvalidInput: ``kind`` is empty, longer than 100 chars, or already registered.
        """
        if not kind or len(kind) > 100:
            raise InvalidInput("a command kind is 1 to 100 characters")
        if kind in self._handlers:
            raise InvalidInput(f"a handler for {kind!r} is already registered")
        self._handlers[kind] = handler

    def get(self, kind: str) -> Handler:
        return self._handlers[kind]

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)
