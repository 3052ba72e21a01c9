"""The vocabulary of the action host's redaction hooks (host-spec Q, N28, N29; ADR 0042).

Only data lives here, so that ``fencepost`` itself can export it without loading the host: ``Redaction`` (the five
optional hooks), ``ErrorTextContext`` (what the error-text hook is told), ``ErrorSource`` and the ``WITHHELD``
sentinel. Where each hook runs, and what a raising hook does, is ``fencepost.host.redaction``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, final


@final
class _Withheld:
    """The type of ``WITHHELD``: one instance, falsy, shown as ``WITHHELD``."""

    _instance: _Withheld | None = None

    def __new__(cls) -> _Withheld:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "WITHHELD"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "WITHHELD"


#: What ``redact_adapter_output`` returns to say "this output must not be stored at all" (host-spec §1.Y-18).
#: The step's effect happened, its output cannot be kept, and fencepost's result always carries every step's
#: output, so the invocation ends ``reconciliation_required`` as an applied effect (L5; ADR 0042).
WITHHELD: Final[_Withheld] = _Withheld()


class ErrorSource(StrEnum):
    """Where an error text originated (host-spec Q5)."""

    HANDLER = "handler"
    ADAPTER = "adapter"
    EXTERNAL_COMPLETION = "external_completion"
    EXECUTION = "execution"


@dataclass(frozen=True)
class ErrorTextContext:
    """What ``redact_error_text`` is told about the text it redacts (host-spec Q5; the seed's
    ``ErrorTextRedactionContext``).

    Attributes:
        action_id: the invocation's action. source: ``handler`` (the handler raised, or ``DecisionRequired``),
            ``adapter`` (a provider's result error or an ambiguous-outcome reason, F19), ``external_completion``
            (a completion's error, N29) or ``execution`` (an error the host caught around the action's code, such
            as a failing step input, or a governance refusal, D2/Q8).
        adapter_type, operation, vendor, adapter_invocation_id: the step's adapter, for ``adapter`` texts (and
            for ``external_completion`` texts, which concern the handing-off step); None otherwise.
    """

    action_id: str
    source: ErrorSource
    adapter_type: str | None = None
    operation: str | None = None
    vendor: str | None = None
    adapter_invocation_id: str | None = None


ParamsHook = Callable[[str, dict[str, Any]], dict[str, Any]]
AdapterValueHook = Callable[[str, str, str, dict[str, Any]], Any]
ErrorTextHook = Callable[[ErrorTextContext, str], str]
CompletionResultHook = Callable[[str, str, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Redaction:
    """The host's five optional redaction hooks (host-spec Q). Each absent hook is the identity.

    Each hook runs once, where its value originates, and every later use reuses what it returned: no unredacted
    copy is stored, logged or emitted by the host (ADR 0042 has the table).

    Attributes:
        redact_action_parameters: ``(action_id, params) -> params``; ``params`` is the validated, JSON-mode
            params object. The result is what is stored and what every execution runs on; it must still
            validate against the action's params model. The idempotency digest covers the unredacted params
            (§1.Y-9).
        redact_adapter_input: ``(action_id, adapter_type, operation, input) -> input``; what the step's row and
            events keep. The provider itself is called with the unredacted input.
        redact_adapter_output: ``(action_id, adapter_type, operation, output) -> output | WITHHELD``; once per
            successful result, before handoff handling; the row, ``AdapterInvocationSucceeded``, the handoff's
            ``accepted_output``, later steps' inputs and the invocation result all use what it returns.
        redact_error_text: ``(ErrorTextContext, message) -> str``; at each error text's origin.
        redact_external_completion_result: ``(action_id, provider, result) -> result``; once per supplied
            completion result, after the completion matched its invocation and before it is digested (N28).

    A hook that raises, or returns something of the wrong shape, fails closed: the unredacted value is never
    stored (``fencepost.host.redaction`` says what happens instead, per hook).
    """

    redact_action_parameters: ParamsHook | None = None
    redact_adapter_input: AdapterValueHook | None = None
    redact_adapter_output: AdapterValueHook | None = None
    redact_error_text: ErrorTextHook | None = None
    redact_external_completion_result: CompletionResultHook | None = None
