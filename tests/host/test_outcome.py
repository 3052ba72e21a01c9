"""The section F table of host-spec.md as one parametrized test, plus the rules around it (F1-F19)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from fencepost.core.statuses import Outcome
from fencepost.host.adapter import Accepted, Ambiguous, PermanentFailure, Succeeded, TimedOut, TransientFailure
from fencepost.host.outcome import StepVerdict, classify_error, interpret_reply

S, A, F, R, U = (StepVerdict.SUCCEEDED, StepVerdict.ACCEPTED, StepVerdict.FAILED, StepVerdict.RETRY,
                 StepVerdict.AMBIGUOUS)


class Model(BaseModel):
    outcome: str
    success: bool | None = None


@dataclass
class Foreign:
    outcome: str
    success: Any = None


TABLE: list[tuple[str, object, StepVerdict]] = [
    ("typed success", Succeeded({"charge_id": "ch_1"}), S),
    ("raw success with success true", {"outcome": "success", "success": True, "output": {"id": 1}}, S),
    ("typed handoff", Accepted("po_1"), A),
    ("raw handoff", {"outcome": "accepted", "success": True, "external_reference": "po_1"}, A),
    ("raw handoff without a reference", {"outcome": "accepted", "success": True}, U),
    ("typed ambiguous", Ambiguous("reset after send"), U),
    ("typed timeout", TimedOut("no answer"), U),
    ("raw ambiguous", {"outcome": "ambiguous"}, U),
    ("raw timeout", {"outcome": "timeout"}, U),
    ("success true with permanent failure (F6)", {"outcome": "permanent_failure", "success": True}, U),
    ("success true with transient failure: not retried", {"outcome": "transient_failure", "success": True}, U),
    ("outcome success with success false (F7)", {"outcome": "success", "success": False}, U),
    ("outcome success without success (F16a)", {"outcome": "success"}, U),
    ("outcome success with success None", {"outcome": "success", "success": None}, U),
    ("outcome success with success 1 (F16a)", {"outcome": "success", "success": 1}, U),
    ("permanent failure with success 'no' (F16a)", {"outcome": "permanent_failure", "success": "no"}, U),
    ("None (F8)", None, U),
    ("a list", [], U),
    ("a tuple", (), U),
    ("a string", "ok", U),
    ("a number", 1, U),
    ("a bool", True, U),
    ("unknown outcome string (F9)", {"outcome": "timed_out"}, U),
    ("outcome strings are case-sensitive", {"outcome": "SUCCESS", "success": True}, U),
    ("success but no outcome", {"success": True}, U),
    ("a non-string outcome", {"outcome": 1}, U),
    ("success output that is not an object", {"outcome": "success", "success": True, "output": [1]}, U),
    ("typed permanent failure (F12)", PermanentFailure("card declined"), F),
    ("raw permanent failure", {"outcome": "permanent_failure", "success": False}, F),
    ("typed transient failure", TransientFailure("503"), R),
    ("raw transient failure", {"outcome": "transient_failure"}, R),
    ("pydantic success needs success true", Model(outcome="success", success=True), S),
    ("pydantic success without success", Model(outcome="success"), U),
    ("foreign dataclass permanent failure", Foreign("permanent_failure", False), F),
    ("foreign dataclass success 1", Foreign("success", 1), U),
]


@pytest.mark.parametrize(("reply", "verdict"), [(r, v) for _, r, v in TABLE], ids=[n for n, _, _ in TABLE])
def test_section_f_table(reply: object, verdict: StepVerdict) -> None:
    got = interpret_reply(reply)
    assert got.verdict is verdict
    if verdict is StepVerdict.AMBIGUOUS:
        assert got.reason, "an unknown outcome always says why"


def test_success_keeps_its_output_and_a_handoff_its_reference() -> None:
    assert interpret_reply(Succeeded({"charge_id": "ch_1"})).output == {"charge_id": "ch_1"}
    handoff = interpret_reply(Accepted("po_9", {"queued": True}))
    assert (handoff.external_reference, handoff.output) == ("po_9", {"queued": True})
    assert interpret_reply(PermanentFailure("card declined")).reason == "card declined"
    assert interpret_reply(TransientFailure("busy", retry_after=2.5)).retry_after == 2.5
    assert interpret_reply({"outcome": "transient_failure", "retry_after": float("nan")}).retry_after is None


class _Counting(dict[str, Any]):
    """A mapping that counts how often each field is read, and may raise on one."""

    def __init__(self, fields: dict[str, Any], raise_on: str | None = None) -> None:
        super().__init__(fields)
        self.reads: dict[str, int] = {}
        self.raise_on = raise_on

    def items(self):  # type: ignore[override]
        for key in list(self.keys()):
            self.reads[key] = self.reads.get(key, 0) + 1
            if key == self.raise_on:
                raise RuntimeError("getter exploded")
            yield key, dict.__getitem__(self, key)


def test_reply_fields_read_once_and_a_raising_field_reconciles() -> None:
    reply = _Counting({"outcome": "success", "success": True, "output": {}})
    assert interpret_reply(reply).verdict is S
    assert reply.reads == {"outcome": 1, "success": 1, "output": 1}
    raising = _Counting({"outcome": "permanent_failure", "reason": "x"}, raise_on="reason")
    got = interpret_reply(raising)  # F11: unreadable overrides a definite failure
    assert got.verdict is U and "unreadable" in (got.reason or "")


def test_a_raising_property_reconciles() -> None:
    class Reply:
        @property
        def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
            raise RuntimeError("boom")

    assert interpret_reply(Reply()).verdict is U


def test_reply_model_has_exactly_five_outcomes() -> None:
    assert {str(o) for o in Outcome} == {"success", "permanent_failure", "transient_failure", "ambiguous",
                                         "timeout"}
    assert Accepted.outcome == "accepted" and "accepted" not in {str(o) for o in Outcome}


def _real_socket_timeout() -> BaseException:
    left, right = socket.socketpair()
    with left, right:
        left.settimeout(0.01)
        try:
            left.recv(1)
        except OSError as error:
            return error
    raise AssertionError("recv on a silent socket did not time out")


@pytest.mark.parametrize("error", [
    RuntimeError("Read timed out"), RuntimeError("504 Gateway Timeout"), RuntimeError("DEADLINE_EXCEEDED"),
    RuntimeError("timedout"), TimeoutError(), _real_socket_timeout(),
    ValueError("capture deadline passed"),  # F5: a definite rejection that mentions a deadline reconciles
], ids=repr)
def test_thrown_timeouts_are_unknown(error: BaseException) -> None:
    got = classify_error(error)
    assert got.verdict is U and got.outcome == Outcome.TIMEOUT


def test_a_deadline_that_fired_during_the_call_is_unknown() -> None:
    assert classify_error(ConnectionResetError("reset"), deadline_fired=True).verdict is U


@pytest.mark.parametrize("error", [ConnectionRefusedError("refused"), ValueError("bad card"), OSError(5, "io")],
                         ids=repr)
def test_other_thrown_errors_are_definite_and_retryable(error: BaseException) -> None:
    got = classify_error(error)
    assert got.verdict is R and type(error).__name__ in (got.reason or "")


def test_an_error_whose_message_raises_is_still_classified() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    assert classify_error(Odd()).verdict is R


@pytest.mark.parametrize("output", [{"x": {1, 2}}, {"x": b"raw"}, {"x": float("nan")}, {"x": object()}],
                         ids=["set", "bytes", "nan", "object"])
def test_a_success_whose_output_is_not_plain_json_is_unreadable(output: dict[str, Any]) -> None:
    """From the break-it trial: such an output used to fail later, at the checkpoint write, with a traceback."""
    for reply in (Succeeded(output), {"outcome": "success", "success": True, "output": output},
                  Accepted("po_1", output)):
        got = interpret_reply(reply)
        assert got.verdict is U and "not plain JSON" in (got.reason or "")


def test_an_output_nested_too_deep_to_store_is_unreadable() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100_000):
        node["x"] = {}
        node = node["x"]
    assert interpret_reply(Succeeded(deep)).verdict is U


def test_an_output_too_deep_to_record_inside_its_step_is_an_unreadable_reply() -> None:
    """Round 3 of the break-it trial: a provider's output of 199 containers was storable alone, so the step counted
    as succeeded, and then its event and the invocation's result (which wrap it) could not be written:
    reconciliation_required after a successful call, with a raw encoder error. It is classified up front."""
    from fencepost.core.canonical import WRAPPED_MAX_DEPTH

    def nested(containers: int) -> Any:
        value: Any = 1
        for _ in range(containers):
            value = [value]
        return value

    fine = interpret_reply(Succeeded({"d": nested(WRAPPED_MAX_DEPTH - 1)}))
    assert fine.verdict is StepVerdict.SUCCEEDED
    deep = interpret_reply(Succeeded({"d": nested(WRAPPED_MAX_DEPTH)}))
    assert deep.verdict is not StepVerdict.SUCCEEDED and "nests deeper" in (deep.reason or ""), deep
