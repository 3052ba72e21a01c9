"""The action host: leased action invocations, adapter steps, outcome verdicts and bounded recovery.

Seed: platform-host-8.1-readme-excerpt.md; requirements in host-spec.md (sections named in each module).
Public names: ``Host``, ``HostConfig``, ``Dispatch``, ``Inline``, ``InvocationView``, ``Action``,
``AdapterStep``, ``RetryPolicy``, ``DecisionRequired``, the adapter contract (``AdapterCall`` and the typed
replies), ``RecoverableFinalization`` and the redaction hooks (``Redaction``, ``ErrorTextContext``,
``ErrorSource``, ``WITHHELD``, ``RedactionFailed``; host-spec Q).
"""

from fencepost.core.errors import IdempotencyConflict, RecoverableFinalization
from fencepost.host.action import Action, AdapterStep, DecisionRequired, HandlerContext, RetryPolicy, StepInputContext
from fencepost.host.adapter import (
    Accepted,
    Adapter,
    AdapterCall,
    Ambiguous,
    PermanentFailure,
    Succeeded,
    TimedOut,
    TransientFailure,
)
from fencepost.host.breakers import Breakers, CircuitState
from fencepost.host.handler import KIND_PREFIX, kind_of
from fencepost.host.redaction import WITHHELD, ErrorSource, ErrorTextContext, Redaction, RedactionFailed
from fencepost.host.service import Dispatch, Host, HostConfig, Inline, InvocationView, StepView

__all__ = [
    "KIND_PREFIX",
    "WITHHELD",
    "Accepted",
    "Action",
    "Adapter",
    "AdapterCall",
    "AdapterStep",
    "Ambiguous",
    "Breakers",
    "CircuitState",
    "DecisionRequired",
    "Dispatch",
    "ErrorSource",
    "ErrorTextContext",
    "HandlerContext",
    "Host",
    "HostConfig",
    "IdempotencyConflict",
    "Inline",
    "InvocationView",
    "PermanentFailure",
    "RecoverableFinalization",
    "Redaction",
    "RedactionFailed",
    "RetryPolicy",
    "StepInputContext",
    "StepView",
    "Succeeded",
    "TimedOut",
    "TransientFailure",
    "kind_of",
]
