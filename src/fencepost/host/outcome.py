"""Outcome classification: what an adapter's reply or raised error means for its step (host-spec §F).

Every rule of the section F table lives here, in two pure functions that never raise:

- ``interpret_reply(reply)`` for what ``Adapter.execute`` returned;
- ``classify_error(error, deadline_fired=...)`` for what it raised.

Each answers a ``StepOutcome`` whose ``verdict`` says what the step does next: ``SUCCEEDED`` (row succeeded,
the invocation continues), ``ACCEPTED`` (a handoff: persisted before the succeeded marker, host-spec E6),
``FAILED`` (the provider definitely did nothing: row and invocation failed), ``RETRY`` (definitely nothing
this time: the retry helper may call again and fails the step when exhausted, F13/F14) or ``AMBIGUOUS`` (the
outcome is unknown: row ambiguous, invocation ``reconciliation_required`` with kind
``adapter_outcome_ambiguous``, never retried, F17).

Rules are evaluated in the table's order: unreadable or uninterpretable, then an unknown outcome string, then a
contradiction, then the outcome itself. Uncertainty only ever moves a reply toward ``AMBIGUOUS``: a reply that
might mean success is never read as a failure, because ``failed`` claims that the provider did nothing.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fencepost.core.canonical import WRAPPED_MAX_DEPTH, canonical_json, json_depth
from fencepost.core.statuses import Outcome
from fencepost.host.adapter import Accepted, Ambiguous, PermanentFailure, Succeeded, TimedOut, TransientFailure

#: A thrown error whose message matches is a timeout, whatever it really was (host-spec F4, F5): the matcher
#: cannot prove a timeout, so a definite rejection that mentions a deadline also goes to reconciliation.
TIMEOUT_MESSAGE = re.compile(r"timeout|deadline|timed?\s*out", re.IGNORECASE)

ACCEPTED = "accepted"  # the handoff's discriminator; deliberately not an ``Outcome`` (host-spec F15, §1.Y-2)
_OUTCOMES = frozenset(str(o) for o in Outcome) | {ACCEPTED}
_TYPED = (Succeeded, Accepted, PermanentFailure, TransientFailure, Ambiguous, TimedOut)


class StepVerdict(StrEnum):
    """What a step does with one reply (see the module docstring)."""

    SUCCEEDED = "succeeded"
    ACCEPTED = "accepted"
    FAILED = "failed"
    RETRY = "retry"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class StepOutcome:
    """One classified reply or error.

    Attributes:
        verdict: what the step does next.
        reason: why, in words fit for the evidence (the reply's own reason, or the rule that applied); None for
            a plain success. Not yet redacted: the caller redacts at its origin (host-spec F19).
        outcome: the outcome string the reply reported, when it reported a readable one.
        output: the provider's output for ``SUCCEEDED`` and ``ACCEPTED`` (a copy, JSON-compatible as given).
        external_reference: the handoff's reference for ``ACCEPTED``.
        retry_after: seconds the provider asked to wait before a retry, for ``RETRY``.
        sent: False for a ``FAILED`` whose request never reached the provider (``PermanentFailure(sent=False)``).
    """

    verdict: StepVerdict
    reason: str | None = None
    outcome: str | None = None
    output: dict[str, Any] | None = None
    external_reference: str | None = None
    retry_after: float | None = None
    sent: bool = True


def _unknown(reason: str, outcome: str | None = None) -> StepOutcome:
    return StepOutcome(StepVerdict.AMBIGUOUS, reason=reason, outcome=outcome)


def _copy(reply: object) -> tuple[dict[str, Any], bool] | None:
    """The reply's fields as a plain dict, each top-level field read exactly once, and whether the reply is one
    of the typed replies (which carry no ``success`` field). None when the reply is not an object with fields.

    Raises:
        Exception: whatever reading a field raised (a property, ``__getattr__``, ``__getitem__``): the caller
            takes the unreadable-reply path (host-spec F10, F11).
    """
    if isinstance(reply, Mapping):
        return {key: value for key, value in reply.items()}, False
    if isinstance(reply, (str, bytes, bytearray, int, float, list, tuple, set, frozenset)) or reply is None:
        return None  # bool is an int: also here
    if isinstance(reply, _TYPED):
        fields = {f.name: getattr(reply, f.name) for f in dataclasses.fields(reply)}
        fields["outcome"] = type(reply).outcome
        return fields, True
    model_dump = getattr(type(reply), "model_dump", None)
    if callable(model_dump):  # a pydantic model
        dumped = model_dump(reply, mode="python")
        return (dict(dumped), False) if isinstance(dumped, Mapping) else None
    if dataclasses.is_dataclass(reply) and not isinstance(reply, type):
        return {f.name: getattr(reply, f.name) for f in dataclasses.fields(reply)}, False
    if hasattr(reply, "__dict__"):
        return dict(vars(reply)), False
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def interpret_reply(reply: object) -> StepOutcome:
    """Classify what ``Adapter.execute`` returned (host-spec §F, F1-F17, F16a). Never raises.

    Args:
        reply: a typed reply of ``fencepost.host.adapter``, or a raw mapping (or an object with fields)
            carrying ``outcome`` (one of ``Outcome``, or ``"accepted"``, case-sensitive), ``success`` (a real
            bool; required and ``True`` for a raw success or handoff), and optionally ``output`` (a mapping),
            ``reason``/``error`` (text), ``external_reference`` (text, required for a handoff) and
            ``retry_after`` (seconds).

    Returns:
        The step's ``StepOutcome``.
    """
    try:
        copied = _copy(reply)
    except Exception as error:  # a raising field is unreadable, whatever the reply claims (F10, F11)
        return _unknown(f"unreadable reply: reading it raised {type(error).__name__}")
    if copied is None:
        return _unknown(f"uninterpretable reply: {type(reply).__name__} is not an object with an outcome")
    fields, typed = copied
    outcome = fields.get("outcome")
    if "outcome" not in fields:
        return _unknown("uninterpretable reply: no outcome")
    if not isinstance(outcome, str) or outcome not in _OUTCOMES:
        shown = outcome if isinstance(outcome, str) else type(outcome).__name__
        return _unknown(f"uninterpretable reply: unknown outcome {shown[:80]!r}")
    success = fields.get("success")
    if "success" in fields and not isinstance(success, bool):
        return _unknown("uninterpretable reply: success is not a boolean", outcome)
    reason = _text(fields.get("reason")) or _text(fields.get("error"))
    positive = outcome in (Outcome.SUCCESS, ACCEPTED)
    if success is True and not positive:
        return _unknown(f"contradictory reply: success with outcome {outcome}", outcome)
    if positive and not typed and success is not True:
        return _unknown(f"contradictory reply: outcome {outcome} without success true", outcome)
    if outcome in (Outcome.AMBIGUOUS, Outcome.TIMEOUT):
        return _unknown(reason or ("the provider timed out" if outcome == Outcome.TIMEOUT
                                   else "the provider's outcome is ambiguous"), outcome)
    if outcome == Outcome.PERMANENT_FAILURE:
        return StepOutcome(StepVerdict.FAILED, reason=reason or "permanent failure", outcome=outcome,
                           sent=fields.get("sent") is not False)
    if outcome == Outcome.TRANSIENT_FAILURE:
        retry_after = fields.get("retry_after")
        wait = (float(retry_after) if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool)
                and math.isfinite(retry_after) and retry_after >= 0 else None)
        return StepOutcome(StepVerdict.RETRY, reason=reason or "transient failure", outcome=outcome,
                           retry_after=wait)
    output = fields.get("output")
    if output is None:
        output = {}
    if not isinstance(output, Mapping):
        return _unknown("uninterpretable reply: output is not an object", outcome)
    try:
        canonical_json(dict(output))  # what the checkpoint will store: plain JSON, or the reply is unreadable
    except Exception as error:  # a set, bytes, NaN, an object, nesting too deep to store (RecursionError)
        return _unknown(f"unreadable reply: its output is not plain JSON data ({type(error).__name__})", outcome)
    if json_depth(dict(output)) > WRAPPED_MAX_DEPTH:  # storable alone, not inside the records that carry it
        return _unknown(f"unreadable reply: its output nests deeper than {WRAPPED_MAX_DEPTH} levels", outcome)
    if outcome == ACCEPTED:
        reference = _text(fields.get("external_reference"))
        if reference is None:
            return _unknown("uninterpretable reply: a handoff without an external reference", outcome)
        unusable = _unusable_reference(reference)
        if unusable is not None:  # the provider took the operation: keep what it said, so it can be looked up
            return _unknown(f"uninterpretable reply: a handoff whose external reference {unusable}: "
                            f"{reference[:200]!a}{'…' if len(reference) > 200 else ''}", outcome)
        return StepOutcome(StepVerdict.ACCEPTED, outcome=outcome, output=dict(output), external_reference=reference)
    return StepOutcome(StepVerdict.SUCCEEDED, outcome=outcome, output=dict(output))


#: The longest external reference a handoff may carry (the store's bound; host-spec N30).
MAX_REFERENCE = 500


def _unusable_reference(reference: str) -> str | None:
    """Why a handoff's reference cannot be stored and matched (too long, NUL, not encodable), or None."""
    if len(reference) > MAX_REFERENCE:
        return f"is {len(reference)} characters (at most {MAX_REFERENCE})"
    if "\x00" in reference:
        return "contains NUL"
    try:
        reference.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text"
    return None


def describe_error(error: BaseException) -> str:
    """``"Type: message"`` for the evidence, or ``"Type"`` when the message is empty or cannot be read (a
    ``__str__`` that raises). Never raises."""
    try:
        message = str(error)
    except Exception:
        message = ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def classify_error(error: BaseException, *, deadline_fired: bool = False) -> StepOutcome:
    """Classify what ``Adapter.execute`` raised (host-spec F4, F5, F14). Never raises.

    A timeout is unknown (``AMBIGUOUS``, never retried): the step's deadline fired during the call, the error is
    a ``TimeoutError`` (``socket.timeout``, ``asyncio.TimeoutError``), or its message matches
    ``TIMEOUT_MESSAGE``. Anything else is a definite failure the retry helper may retry (``RETRY``), because a
    raised error claims the request did not apply; adapters that can fail after the request left must reply
    ``Ambiguous`` or ``TimedOut`` instead.

    Args:
        error: the exception the adapter raised.
        deadline_fired: whether the step's deadline passed while the call ran (expiry *before* a call is a
            failure with no call, host-spec F18, decided by the caller).
    """
    described = describe_error(error)
    message = described.partition(": ")[2]
    if deadline_fired:
        return _unknown(f"timed out: the step's deadline passed during the call ({described})", Outcome.TIMEOUT)
    if isinstance(error, TimeoutError) or TIMEOUT_MESSAGE.search(message) or TIMEOUT_MESSAGE.search(
            type(error).__name__):
        return _unknown(f"timed out: {described}", Outcome.TIMEOUT)
    return StepOutcome(StepVerdict.RETRY, reason=described)
