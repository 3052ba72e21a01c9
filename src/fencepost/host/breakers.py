"""Adapter circuit breakers, in process: one per ``(adapter_type, vendor)`` (host-spec R1, R2, §1.Y-10; ADR 0050).

``Host(..., breakers=Breakers(failure_threshold=5, reset_timeout=30.0))`` turns them on; without ``breakers``
no step is ever refused. Each breaker is:

- **closed**: every step is admitted. ``failure_threshold`` *definite* step failures in a row open it. A
  definite failure is a step that ended ``failed`` after the provider answered: ``transient_failure`` or a
  non-timeout exception once the retry helper is spent (F13, F14), and ``permanent_failure`` (F12) only with
  ``count_permanent_failures=True``. One step counts once, however many attempts it made; a success resets
  the count.
- **open**: every step is refused before its provider call, and fails with ``circuit open`` (R1, F18), until
  ``reset_timeout`` seconds have passed since it opened. One exception: a reclaimed step whose row an earlier
  execution left ``running`` (an idempotent action's recovery, X3) may already have reached the provider, so
  its refusal is an unknown outcome (``reconciliation_required``), never a ``failed`` that denies it.
- **half-open**: the first step admitted after that is the probe; every other step is refused while it runs.
  A probe that succeeds closes the breaker, one that fails definitely opens it again for ``reset_timeout``.

What never counts, either way: ambiguous and timeout outcomes (F2-F11). A provider that times out after it
charged must keep producing ``reconciliation_required`` verdicts an operator sees, not be hidden behind
``circuit open`` failures (R2). A refusal (circuit open, the deadline expired before the call) made no call and
proves nothing about the provider. A probe that ends in such an outcome, or that never ends (the execution
raised: a lost lease, a stop), gives its turn back and the breaker stays half-open.

Every state change is reported after it happened, through ``telemetry.emit`` as
``fencepost.host.adapter.circuit_state_changed`` (``adapter_type``, ``vendor``, ``from_state``, ``to_state``,
``failures``). Thread-safe: the workers' slots share one ``Breakers``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import Outcome
from fencepost.host import telemetry
from fencepost.host.outcome import StepOutcome, StepVerdict
from fencepost.host.telemetry import Telemetry

#: The error of a refused step's adapter row (host-spec R1).
CIRCUIT_OPEN = "circuit open"
#: The reason of a refused reclaimed step whose row was left ``running`` by an earlier execution: that attempt
#: may have reached the provider, so the refusal cannot claim "nothing happened" and the outcome is unknown.
CIRCUIT_OPEN_UNKNOWN = ("circuit open; an earlier attempt of this step may have reached the provider and was "
                        "not re-sent, so its outcome is unknown")


class CircuitState(StrEnum):
    """A breaker's state (see the module docstring)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass
class _Breaker:
    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    probing: bool = False


class Permit:
    """One admitted step. The execution reports how the step ended with exactly one of ``succeeded``,
    ``failed`` or ``release``; later reports are ignored."""

    def __init__(self, breakers: Breakers, key: tuple[str, str], sink: Telemetry, *, probe: bool) -> None:
        self._breakers, self._key, self._sink, self.probe = breakers, key, sink, probe
        self._done = False

    def report(self, outcome: StepOutcome) -> None:
        """Report the step's final outcome: a success or a handoff ``succeeded``; a definite failure ``failed``
        (a ``permanent_failure`` only when the breakers count them); anything else ``release``."""
        if outcome.verdict in (StepVerdict.SUCCEEDED, StepVerdict.ACCEPTED):
            self.succeeded()
        elif outcome.verdict is StepVerdict.FAILED and (
                outcome.outcome != str(Outcome.PERMANENT_FAILURE) or self._breakers.count_permanent_failures):
            self.failed()
        else:
            self.release()

    def succeeded(self) -> None:
        """The provider applied the step (a success or a handoff): closes the breaker, resets its count."""
        self._report("succeeded")

    def failed(self) -> None:
        """The step failed definitely after the provider answered (F12-F14): counts one failure."""
        self._report("failed")

    def release(self) -> None:
        """The step ended with no verdict about the provider (ambiguous, timeout, refused, raised)."""
        self._report("release")

    def _report(self, how: str) -> None:
        if not self._done:
            self._done = True
            self._breakers._report(self._key, self._sink, how, probe=self.probe)


class Breakers:
    """The circuit breakers of one host, one per ``(adapter_type, vendor)`` (host-spec R2; ADR 0050).

    Args:
        failure_threshold: definite step failures in a row that open a breaker; an int 1..10,000 (default 5).
        reset_timeout: seconds a breaker stays open before it lets one probe through; 0.001..86,400 (default 30).
        count_permanent_failures: whether a ``permanent_failure`` reply counts as a failure (default False: a
            decline is a healthy provider's definite answer about one request, so five declines in a row must
            not refuse everyone's next payment; turn it on for providers whose permanent failures mean "down").
        clock: a monotonic clock in seconds (default ``time.monotonic``; tests pass their own).
    Raises:
        InvalidInput: a setting out of range.
    """

    def __init__(self, failure_threshold: int = 5, reset_timeout: float = 30.0, *,
                 count_permanent_failures: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(failure_threshold, bool) or not isinstance(failure_threshold, int) \
                or not 1 <= failure_threshold <= 10_000:
            raise InvalidInput("failure_threshold must be an integer between 1 and 10000")
        if isinstance(reset_timeout, bool) or not isinstance(reset_timeout, (int, float)) \
                or not math.isfinite(reset_timeout) or not 0.001 <= reset_timeout <= 86_400:
            raise InvalidInput("reset_timeout must be between 0.001 and 86400 seconds")
        self.failure_threshold = failure_threshold
        self.reset_timeout = float(reset_timeout)
        self.count_permanent_failures = bool(count_permanent_failures)
        self._clock = clock
        self._lock = threading.Lock()
        self._breakers: dict[tuple[str, str], _Breaker] = {}

    def state(self, adapter_type: str, vendor: str) -> CircuitState:
        """The breaker's state now (an open breaker past its timeout reads ``half_open``; nothing changes)."""
        with self._lock:
            breaker = self._breakers.get((adapter_type, vendor))
            if breaker is None:
                return CircuitState.CLOSED
            if breaker.state is CircuitState.OPEN and self._clock() - breaker.opened_at >= self.reset_timeout:
                return CircuitState.HALF_OPEN
            return breaker.state

    def admit(self, adapter_type: str, vendor: str, sink: Telemetry) -> Permit | None:
        """A ``Permit`` for one step's provider calls, or None when the breaker refuses it (open, or half-open
        with its probe running). ``sink`` receives the state changes this causes (open -> half-open)."""
        key = (adapter_type, vendor)
        changed: tuple[CircuitState, CircuitState, int] | None = None
        with self._lock:
            breaker = self._breakers.setdefault(key, _Breaker())
            if breaker.state is CircuitState.OPEN:
                if self._clock() - breaker.opened_at < self.reset_timeout:
                    return None
                changed = (breaker.state, CircuitState.HALF_OPEN, breaker.failures)
                breaker.state, breaker.probing = CircuitState.HALF_OPEN, False
            probe = breaker.state is CircuitState.HALF_OPEN
            if probe:
                if breaker.probing:
                    permit: Permit | None = None
                else:
                    breaker.probing = True
                    permit = Permit(self, key, sink, probe=True)
            else:
                permit = Permit(self, key, sink, probe=False)
        if changed is not None:
            _emit(sink, key, *changed)
        return permit

    def _report(self, key: tuple[str, str], sink: Telemetry, how: str, *, probe: bool) -> None:
        changed: tuple[CircuitState, CircuitState, int] | None = None
        with self._lock:
            breaker = self._breakers.setdefault(key, _Breaker())
            before = breaker.state
            if probe:
                breaker.probing = False
            if how == "succeeded":
                breaker.failures = 0
                if before is not CircuitState.CLOSED and (probe or before is CircuitState.HALF_OPEN):
                    breaker.state = CircuitState.CLOSED
            elif how == "failed":
                breaker.failures += 1
                reopen = before is CircuitState.HALF_OPEN and probe
                if reopen or (before is CircuitState.CLOSED and breaker.failures >= self.failure_threshold):
                    breaker.state, breaker.opened_at = CircuitState.OPEN, self._clock()
            if breaker.state is not before:
                changed = (before, breaker.state, breaker.failures)
        if changed is not None:
            _emit(sink, key, *changed)


def _emit(sink: Telemetry, key: tuple[str, str], before: CircuitState, after: CircuitState, failures: int) -> None:
    telemetry.emit(sink, telemetry.CIRCUIT_STATE_CHANGED, adapter_type=key[0], vendor=key[1],
                   from_state=str(before), to_state=str(after), failures=failures)
