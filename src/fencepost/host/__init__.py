"""The action host: leased action invocations, adapter steps, outcome verdicts and bounded recovery.

Seed: platform-host-8.1-readme-excerpt.md; requirements in host-spec.md (sections named in each module).
Public names: ``Host``, ``HostConfig``, ``Dispatch``, ``Inline``, ``InvocationView``, ``Action``,
``AdapterStep``, ``RetryPolicy``, ``DecisionRequired``, the adapter contract (``AdapterCall`` and the typed
replies), ``RecoverableFinalization``, the redaction hooks (``Redaction``, ``ErrorTextContext``,
``ErrorSource``, ``WITHHELD``, ``RedactionFailed``; host-spec Q), the circuit breakers (``Breakers``; R) and
governance: ``Policy``, ``PolicyContext``, ``Allow``, ``Deny``, ``RequireApproval``, ``Obligations``,
``TransientGovernanceError``, ``PolicyDenied``, ``Attestation``, ``ApprovalExpired`` (ADRs 0043-0045); the state
binding: ``StateBinding`` and ``BoundEntity`` (host-spec A13, A17, A19; ADR 0077).
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
from fencepost.host.approvals import ApprovalExpired, ApprovalRequest
from fencepost.host.attestation import Attestation
from fencepost.host.breakers import Breakers, CircuitState
from fencepost.host.governance import (
    Allow,
    Deny,
    Obligations,
    Policy,
    PolicyContext,
    PolicyDenied,
    PolicyOutcome,
    RequireApproval,
    TransientGovernanceError,
)
from fencepost.host.handler import KIND_PREFIX, kind_of
from fencepost.host.redaction import WITHHELD, ErrorSource, ErrorTextContext, Redaction, RedactionFailed
from fencepost.host.service import Dispatch, Host, HostConfig, Inline, InvocationView, StepView
from fencepost.host.state import BoundEntity, StateBinding

__all__ = [
    "KIND_PREFIX",
    "WITHHELD",
    "Accepted",
    "Action",
    "Adapter",
    "AdapterCall",
    "AdapterStep",
    "Allow",
    "Ambiguous",
    "ApprovalExpired",
    "ApprovalRequest",
    "Attestation",
    "BoundEntity",
    "Breakers",
    "CircuitState",
    "DecisionRequired",
    "Deny",
    "Dispatch",
    "ErrorSource",
    "ErrorTextContext",
    "HandlerContext",
    "Host",
    "HostConfig",
    "IdempotencyConflict",
    "Inline",
    "InvocationView",
    "Obligations",
    "PermanentFailure",
    "Policy",
    "PolicyContext",
    "PolicyDenied",
    "PolicyOutcome",
    "RecoverableFinalization",
    "Redaction",
    "RedactionFailed",
    "RequireApproval",
    "RetryPolicy",
    "StateBinding",
    "StepInputContext",
    "StepView",
    "Succeeded",
    "TimedOut",
    "TransientFailure",
    "TransientGovernanceError",
    "kind_of",
]
