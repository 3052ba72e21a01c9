"""Applying the redaction hooks at their origins (host-spec Q, F19, N28, N29, §1.Y-18; ADR 0042).

``Redaction``, ``ErrorTextContext``, ``ErrorSource`` and ``WITHHELD`` are defined in ``fencepost.core.redaction``
and re-exported here. The functions below are what the host calls, once, where each value originates:

==================================  ==========================================================================
function                            called at                       a hook that raises (fails closed)
==================================  ==========================================================================
``redact_params``                   ``Host.submit``, after          ``RedactionFailed``: nothing stored
                                    validation, before the digest
                                    is bound and the row written
``redact_input``                    a step, after its input is      the step fails before any provider call
                                    computed, before its row
``redact_output``                   a successful reply, before      like ``WITHHELD``: the effect happened, its
                                    handoff handling                output is not stored; recon, applied effect
``redact_error``                    handler errors, adapter         the fixed text ``WITHHELD_ERROR_TEXT``
                                    reasons, step-input errors,
                                    completion errors
``redact_completion_result``        ``apply_completion``, after     ``RedactionFailed``: the completion is not
                                    the match, before the digest    recorded (the provider retries)
==================================  ==========================================================================

No message here ever quotes what a hook raised: its text may hold the secret it was meant to remove.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import RedactionFailed
from fencepost.core.redaction import WITHHELD, ErrorSource, ErrorTextContext, Redaction, _Withheld

__all__ = ["WITHHELD", "WITHHELD_ERROR_TEXT", "ErrorSource", "ErrorTextContext", "Redaction", "RedactionFailed",
           "redact_completion_result", "redact_error", "redact_input", "redact_output", "redact_params"]

log = logging.getLogger("fencepost.host.redaction")

#: The error text recorded when ``redact_error_text`` raises or returns something that is not text.
WITHHELD_ERROR_TEXT = "[error text withheld: the error-text redaction hook failed]"


def _copy(value: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a plain JSON object, so a hook that edits its argument in place edits only its copy."""
    copied: dict[str, Any] = json.loads(canonical_json(dict(value)))
    return copied


def _failed(hook: str, what: str, error: BaseException | None) -> RedactionFailed:
    cause = f"raised {type(error).__name__}" if error is not None else "returned something other than a JSON object"
    log.warning("redaction hook %s %s; the %s was not stored", hook, cause, what,
                extra={"event": "redaction_failed", "hook": hook})
    return RedactionFailed(f"the {hook} hook {cause}; the {what} was not stored")


def _object(hook: str, what: str, value: object) -> dict[str, Any]:
    """``value`` as a plain JSON object, or ``RedactionFailed`` (the hook returned the wrong shape)."""
    if not isinstance(value, Mapping):
        raise _failed(hook, what, None)
    try:
        return _copy(value)
    except (TypeError, ValueError, RecursionError):
        raise _failed(hook, what, None) from None


def redact_params(redaction: Redaction, action_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """The params to store for ``action_id`` (host-spec Q1): ``redact_action_parameters`` of a copy, or the params.

    Raises:
        RedactionFailed: the hook raised or returned no JSON object.
    """
    hook = redaction.redact_action_parameters
    if hook is None:
        return params
    try:
        redacted = hook(action_id, _copy(params))
    except Exception as error:
        raise _failed("redact_action_parameters", "params", error) from None
    return _object("redact_action_parameters", "params", redacted)


def redact_input(redaction: Redaction, action_id: str, adapter_type: str, operation: str,
                 value: dict[str, Any]) -> dict[str, Any]:
    """The step input to store (host-spec Q2): ``redact_adapter_input`` of a copy, or ``value`` itself.

    Raises:
        RedactionFailed: the hook raised or returned no JSON object.
    """
    hook = redaction.redact_adapter_input
    if hook is None:
        return value
    try:
        redacted = hook(action_id, adapter_type, operation, _copy(value))
    except Exception as error:
        raise _failed("redact_adapter_input", "adapter input", error) from None
    return _object("redact_adapter_input", "adapter input", redacted)


def redact_output(redaction: Redaction, action_id: str, adapter_type: str, operation: str,
                  value: dict[str, Any]) -> dict[str, Any] | _Withheld:
    """The step output every consumer uses (host-spec Q3, G22): ``redact_adapter_output`` of a copy, ``WITHHELD``
    when the hook withholds it (§1.Y-18), or ``value`` itself without a hook.

    Raises:
        RedactionFailed: the hook raised or returned neither a JSON object nor ``WITHHELD``; the caller treats
            it as withheld (the output is never stored unredacted).
    """
    hook = redaction.redact_adapter_output
    if hook is None:
        return value
    try:
        redacted = hook(action_id, adapter_type, operation, _copy(value))
    except Exception as error:
        raise _failed("redact_adapter_output", "adapter output", error) from None
    if isinstance(redacted, _Withheld):
        return WITHHELD
    return _object("redact_adapter_output", "adapter output", redacted)


def redact_error(redaction: Redaction, context: ErrorTextContext, message: str) -> str:
    """The error text to record (host-spec Q4, F19, N29): ``redact_error_text(context, message)``, or
    ``message`` without a hook. Never raises: a hook that raises or returns no text gives ``WITHHELD_ERROR_TEXT``.
    """
    hook = redaction.redact_error_text
    if hook is None:
        return message
    try:
        redacted = hook(context, message)
    except Exception as error:
        log.warning("redaction hook redact_error_text raised %s; a fixed text is recorded instead",
                    type(error).__name__, extra={"event": "redaction_failed", "hook": "redact_error_text",
                                                 "source": str(context.source)})
        return WITHHELD_ERROR_TEXT
    if not isinstance(redacted, str):
        log.warning("redaction hook redact_error_text returned no text; a fixed text is recorded instead",
                    extra={"event": "redaction_failed", "hook": "redact_error_text"})
        return WITHHELD_ERROR_TEXT
    return redacted


def redact_completion_result(redaction: Redaction, action_id: str, provider: str,
                             result: dict[str, Any] | None) -> dict[str, Any] | None:
    """A supplied completion result as recorded and digested (host-spec N28): ``redact_external_completion_result``
    of a copy; None (no result supplied) is not passed to the hook.

    Raises:
        RedactionFailed: the hook raised or returned no JSON object.
    """
    hook = redaction.redact_external_completion_result
    if hook is None or result is None:
        return result
    try:
        redacted = hook(action_id, provider, _copy(result))
    except Exception as error:
        raise _failed("redact_external_completion_result", "completion", error) from None
    return _object("redact_external_completion_result", "completion", redacted)


def error_context(action_id: str, source: ErrorSource, *, adapter_type: str | None = None,
                  operation: str | None = None, vendor: str | None = None,
                  adapter_invocation_id: str | None = None) -> ErrorTextContext:
    """An ``ErrorTextContext`` (a helper for the call sites, so each stays one line)."""
    return ErrorTextContext(action_id, source, adapter_type, operation, vendor, adapter_invocation_id)
