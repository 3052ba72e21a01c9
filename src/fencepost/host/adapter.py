"""The adapter contract: what an adapter step's ``execute`` receives and may return (host-spec §2.3, §F).

An adapter is a plain class with ``type``, ``vendor`` and one method, ``execute(call) -> reply``. It must send
``call.adapter_invocation_id`` to the provider as its idempotency key: the id is stable across the retry
helper's attempts, takeovers and recoveries (host-spec E2, C5), because a lease cannot cancel a call already
in flight.

A reply is one of the typed replies below, or a raw mapping ``{"outcome": ..., "success": ..., ...}`` (JSON from
a remote adapter). Anything else, a raising field, an unknown outcome string or a contradiction, is
uninterpretable and ends ``reconciliation_required`` (``fencepost.host.outcome``). A raised exception is a
definite failure unless it is a timeout (host-spec F4, F14): an adapter that can fail *after* its request left
must say so with ``Ambiguous`` or ``TimedOut``, never by raising a plain error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from fencepost.core.statuses import Outcome


@dataclass(frozen=True)
class AdapterCall:
    """One provider call of one adapter step.

    Attributes:
        adapter_invocation_id: the step's stable id; send it as the provider's idempotency key.
        operation: the step's declared operation (for example ``"charge"``).
        input: the step's input, as the action's input function built it (JSON-compatible).
        attempt: the retry helper's attempt number within this execution, from 1.
        deadline: ``time.monotonic()`` value after which the call counts as timed out, or None.
    """

    adapter_invocation_id: str
    operation: str
    input: dict[str, Any]
    attempt: int = 1
    deadline: float | None = None


@runtime_checkable
class Adapter(Protocol):
    """A provider adapter. ``type`` names the adapter (``"http"``), ``vendor`` the provider (``"simpay"``)."""

    @property
    def type(self) -> str:
        """The adapter's name, which steps refer to (``"http"``); a class attribute is fine."""
        ...

    @property
    def vendor(self) -> str:
        """The provider (``"simpay"``)."""
        ...

    def execute(self, call: AdapterCall) -> object:
        """Call the provider once; return a reply (below) or a raw mapping; raise only for a definite failure
        or a timeout."""
        ...


@dataclass(frozen=True)
class Succeeded:
    """The provider applied the operation. ``output`` is stored (redacted) on the step's row."""

    output: dict[str, Any] = field(default_factory=dict)
    outcome: ClassVar[Outcome] = Outcome.SUCCESS


@dataclass(frozen=True)
class Accepted:
    """The provider accepted a long-running operation and will complete it later by callback (a handoff,
    host-spec §1.Y-2). ``external_reference`` is how the callback finds the invocation."""

    external_reference: str
    output: dict[str, Any] = field(default_factory=dict)
    outcome: ClassVar[str] = "accepted"


@dataclass(frozen=True)
class PermanentFailure:
    """The provider definitely did nothing and will not for this request (a decline): no retry.

    ``sent=False`` says the request never reached the provider this time (the target could not be opened, nothing
    was sent): definite for a step's first call, but it says nothing of a call an earlier attempt sent. For a step
    an earlier attempt left ``running``, the host therefore settles it ``ambiguous`` (ADR 0113), as it does when a
    re-send's retries are spent on transient failures (ADR 0076). Leave it True when the provider answered.
    """

    reason: str
    sent: bool = True
    outcome: ClassVar[Outcome] = Outcome.PERMANENT_FAILURE


@dataclass(frozen=True)
class TransientFailure:
    """The provider definitely did nothing this time; the retry helper may try again (``retry_after`` seconds
    when the provider said so)."""

    reason: str
    retry_after: float | None = None
    outcome: ClassVar[Outcome] = Outcome.TRANSIENT_FAILURE


@dataclass(frozen=True)
class Ambiguous:
    """The request may or may not have been applied (a reset after the request left, a 5xx): never retried."""

    reason: str
    outcome: ClassVar[Outcome] = Outcome.AMBIGUOUS


@dataclass(frozen=True)
class TimedOut:
    """No answer in time after the request left: the outcome is unknown, never retried."""

    reason: str
    outcome: ClassVar[Outcome] = Outcome.TIMEOUT


Reply = Succeeded | Accepted | PermanentFailure | TransientFailure | Ambiguous | TimedOut
