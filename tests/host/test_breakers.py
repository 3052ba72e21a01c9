"""Adapter circuit breakers (host-spec R1, R2, §1.Y-10; ADR 0050): real workers over every backend for what the
store records, the breaker itself under a controlled monotonic clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import AdapterStatus, InvocationStatus
from fencepost.host import (
    Ambiguous,
    Breakers,
    CircuitState,
    Host,
    HostConfig,
    Succeeded,
    TimedOut,
    TransientFailure,
)
from fencepost.host.breakers import CIRCUIT_OPEN
from fencepost.host.http_adapter import HttpAdapter, HttpOperation, HttpTimeouts
from fencepost.host.outcome import StepOutcome, StepVerdict
from fencepost.host.telemetry import CIRCUIT_STATE_CHANGED
from fencepost.store.base import Store
from helpers.loopback_http import loopback_server, reply
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, events_of, run_worker


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """Records every telemetry emission."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        self.seen.append((name, dict(attributes)))

    def transitions(self) -> list[tuple[str, str]]:
        return [(a["from_state"], a["to_state"]) for n, a in self.seen if n == CIRCUIT_STATE_CHANGED]


def host_with(store: Store, adapter: Scripted, breakers: Breakers, sink: Sink, *, retry: int = 1) -> Any:
    return Host(store, actions=[charge_action(Spy(), retry=retry)], adapters=[adapter], config=HostConfig(),
                telemetry=sink, breakers=breakers)


def run(host: Any, backend: StoreBackend, key: str) -> Any:
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=key)
    assert run_worker(host, backend) == 1
    return host.get(queued.id)


def test_circuit_open_fails_without_call(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    clock, sink = Clock(), Sink()
    adapter = Scripted(ledger, TransientFailure("busy"), TransientFailure("busy"), charges=False)
    host = host_with(store, adapter, Breakers(failure_threshold=1, reset_timeout=30.0, clock=clock), sink, retry=2)
    first = run(host, backend, "k1")
    assert first.status is InvocationStatus.FAILED and len(adapter.calls) == 2  # exhausted: one failure
    assert sink.transitions() == [("closed", "open")]
    refused = run(host, backend, "k2")
    assert len(adapter.calls) == 2  # R1: provider calls = 0
    assert refused.status is InvocationStatus.FAILED and CIRCUIT_OPEN in (refused.error or "")
    row = store.read(lambda tx: tx.host.list_adapter_invocations(refused.id))[0]
    assert row.status is AdapterStatus.FAILED and row.error == CIRCUIT_OPEN  # written running first (E5), then failed
    assert [e.type for e in events_of(store, refused.id)] == [
        "ActionInvocationStarted", "AdapterInvocationFailed", "ActionInvocationFailed"]
    assert ledger.requests == []


def test_unknown_outcomes_never_open_the_breaker(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    clock, sink = Clock(), Sink()
    breakers = Breakers(failure_threshold=1, reset_timeout=30.0, clock=clock)
    adapter = Scripted(ledger, Ambiguous("reset after the request left"), TimedOut("no answer"),
                       TimeoutError("read timed out"), RuntimeError("gateway timeout"))
    host = host_with(store, adapter, breakers, sink)
    for n in range(4):  # each charged or may have: an operator must see every one of them (R2)
        assert run(host, backend, f"u{n}").status is InvocationStatus.RECONCILIATION_REQUIRED
    assert breakers.state("pay", "simpay-test") is CircuitState.CLOSED and sink.transitions() == []
    assert run(host, backend, "after").status is InvocationStatus.SUCCEEDED and len(adapter.calls) == 5


def test_half_open_probe_closes_on_success(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    clock, sink = Clock(), Sink()
    breakers = Breakers(failure_threshold=2, reset_timeout=30.0, clock=clock)
    adapter = Scripted(ledger, ConnectionRefusedError("refused"), ConnectionRefusedError("refused"),
                       ConnectionRefusedError("refused"))
    host = host_with(store, adapter, breakers, sink)
    assert run(host, backend, "a").status is InvocationStatus.FAILED
    assert breakers.state("pay", "simpay-test") is CircuitState.CLOSED  # 1 of 2
    assert run(host, backend, "b").status is InvocationStatus.FAILED
    assert breakers.state("pay", "simpay-test") is CircuitState.OPEN
    clock.now += 29.9
    assert run(host, backend, "c").error is not None and len(adapter.calls) == 2  # still open
    clock.now += 0.1
    assert breakers.state("pay", "simpay-test") is CircuitState.HALF_OPEN
    probe = run(host, backend, "d")  # the probe: the provider refuses once more -> open again
    assert probe.status is InvocationStatus.FAILED and CIRCUIT_OPEN not in (probe.error or "")
    assert len(adapter.calls) == 3 and breakers.state("pay", "simpay-test") is CircuitState.OPEN
    clock.now += 30.0
    assert run(host, backend, "e").status is InvocationStatus.SUCCEEDED  # the probe succeeds: closed
    assert sink.transitions() == [("closed", "open"), ("open", "half_open"), ("half_open", "open"),
                                  ("open", "half_open"), ("half_open", "closed")]
    assert breakers.state("pay", "simpay-test") is CircuitState.CLOSED and len(adapter.calls) == 4


def test_one_step_counts_once_and_a_success_resets_the_count(store: Store, backend: StoreBackend,
                                                            ledger: Ledger) -> None:
    clock, sink = Clock(), Sink()
    breakers = Breakers(failure_threshold=2, reset_timeout=30.0, clock=clock)
    adapter = Scripted(ledger, *[TransientFailure("busy")] * 3, Succeeded({"charge_id": "x"}),
                       *[TransientFailure("busy")] * 3, charges=False)
    host = host_with(store, adapter, breakers, sink, retry=3)
    assert run(host, backend, "a").status is InvocationStatus.FAILED and len(adapter.calls) == 3
    assert breakers.state("pay", "simpay-test") is CircuitState.CLOSED  # three attempts, one failure
    assert run(host, backend, "b").status is InvocationStatus.SUCCEEDED
    assert run(host, backend, "c").status is InvocationStatus.FAILED
    assert breakers.state("pay", "simpay-test") is CircuitState.CLOSED and sink.transitions() == []


# ── the breaker alone (no store involved) ──

def test_permanent_failures_count_only_when_asked() -> None:
    decline = StepOutcome(StepVerdict.FAILED, reason="card declined", outcome="permanent_failure")
    for counted in (False, True):
        breakers, sink = Breakers(failure_threshold=1, clock=Clock(), count_permanent_failures=counted), Sink()
        permit = breakers.admit("pay", "simpay", sink)
        assert permit is not None
        permit.report(decline)
        expected = CircuitState.OPEN if counted else CircuitState.CLOSED
        assert breakers.state("pay", "simpay") is expected


def test_half_open_admits_one_probe_and_a_raised_probe_gives_its_turn_back() -> None:
    clock, sink = Clock(), Sink()
    breakers = Breakers(failure_threshold=1, reset_timeout=5.0, clock=clock)
    first = breakers.admit("pay", "simpay", sink)
    assert first is not None
    first.report(StepOutcome(StepVerdict.FAILED, reason="exhausted", outcome="transient_failure"))
    assert breakers.admit("pay", "simpay", sink) is None
    other = breakers.admit("pay", "other-vendor", sink)  # one breaker per (adapter_type, vendor)
    assert other is not None and other.probe is False
    clock.now += 5.0
    probe = breakers.admit("pay", "simpay", sink)
    assert probe is not None and probe.probe
    assert breakers.admit("pay", "simpay", sink) is None  # only one probe at a time
    probe.release()  # the probing execution raised (a lost lease, a stop): no verdict about the provider
    probe.succeeded()  # a second report of one permit is ignored
    assert breakers.state("pay", "simpay") is CircuitState.HALF_OPEN
    again = breakers.admit("pay", "simpay", sink)
    assert again is not None and again.probe
    again.report(StepOutcome(StepVerdict.AMBIGUOUS, reason="reset"))  # unknown: still half-open
    assert breakers.state("pay", "simpay") is CircuitState.HALF_OPEN
    last = breakers.admit("pay", "simpay", sink)
    assert last is not None
    last.report(StepOutcome(StepVerdict.ACCEPTED, external_reference="ref"))
    assert breakers.state("pay", "simpay") is CircuitState.CLOSED
    assert sink.transitions() == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]
    assert all(a["adapter_type"] == "pay" and a["vendor"] == "simpay" for _, a in sink.seen)


@pytest.mark.parametrize("settings", [{"failure_threshold": 0}, {"failure_threshold": True},
                                      {"reset_timeout": 0.0}, {"reset_timeout": float("nan")}])
def test_settings_out_of_range_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        Breakers(**settings)


def test_a_loopback_provider_opens_the_breaker_on_429s_and_never_on_500s(store: Store, backend: StoreBackend,
                                                                         ledger: Ledger) -> None:
    """The shipped HTTP adapter against a real server on loopback: a 500 after a charge request may have
    charged (Ambiguous: never counted); a 429 was not processed (TransientFailure: counted once retries are
    spent). Once open, no request reaches the server."""
    answers = [reply(500, b'{"error": "boom"}')] * 2 + [reply(429, b'{"error": "slow down"}')] * 2

    def behave(handler: Any, server: Any) -> None:
        answers.pop(0)(handler, server)

    clock, sink = Clock(), Sink()
    breakers = Breakers(failure_threshold=2, reset_timeout=30.0, clock=clock)
    action = charge_action(Spy(), adapter="http")
    with loopback_server(behave) as server, HttpAdapter(
            server.url, vendor="testpay", operations={"create_charge": HttpOperation("/v1/charges")},
            timeouts=HttpTimeouts(connect=0.5, write=0.5, read=0.5, pool=0.5)) as http:
        host = Host(store, actions=[action], adapters=[http], telemetry=sink, breakers=breakers)
        verdicts = [run(host, backend, f"h{n}").status for n in range(5)]
        assert verdicts == [InvocationStatus.RECONCILIATION_REQUIRED] * 2 + [InvocationStatus.FAILED] * 3
        assert len(server.received) == 4  # the fifth was refused before any request
    assert breakers.state("http", "testpay") is CircuitState.OPEN and sink.transitions() == [("closed", "open")]


def test_a_refused_reclaim_of_a_step_that_may_have_been_sent_is_unknown_not_failed(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """An idempotent action's first execution died inside the provider call (its row stays ``running``). While
    the breaker is open, its recovery is refused; ``failed`` would claim the provider did nothing, which nobody
    knows, so the step is ``ambiguous`` and the invocation ``reconciliation_required`` (R1 with E5, X3)."""
    clock, sink = Clock(), Sink()
    breakers = Breakers(failure_threshold=1, reset_timeout=30.0, clock=clock)
    adapter = Scripted(ledger, Crash())
    host = Host(store, actions=[charge_action(Spy(), idempotent=True)], adapters=[adapter],
                config=HostConfig(lease_seconds=backend.short_lease), telemetry=sink, breakers=breakers)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="dies")
    run_worker(host, backend)  # the worker "dies" in the provider call
    assert breakers.state("pay", "simpay-test") is CircuitState.CLOSED  # a crash is no verdict: turn given back
    opener = breakers.admit("pay", "simpay-test", sink)
    assert opener is not None
    opener.failed()  # another step's definite failure opens the breaker
    backend.expire()
    run_worker(host, backend)
    done = host.get(queued.id)
    assert len(adapter.calls) == 1 and done.status is InvocationStatus.RECONCILIATION_REQUIRED
    assert done.steps[0].status is AdapterStatus.AMBIGUOUS and CIRCUIT_OPEN in (done.steps[0].error or "")
