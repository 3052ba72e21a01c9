"""The host's telemetry through the OpenTelemetry sink (host-spec S1-S5, W1, H10, J8; ADR 0046): spans of a real
run against SimPay on loopback, each counter moved exactly once per committed occurrence and never for a
rolled-back unit, one status emission per transition, no secret-bearing value in any span or label, and the host
running without telemetry or without OpenTelemetry installed.

The SDK's ``InMemorySpanExporter`` and ``InMemoryMetricReader`` read what the sink produced; every store test
runs on each backend of ``FENCEPOST_TEST_BACKENDS``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fencepost.core.errors import RecoverableFinalization
from fencepost.core.statuses import AdapterStatus, InvocationStatus
from fencepost.demo.payments import build_host
from fencepost.demo.simpay import SimPay
from fencepost.host import Ambiguous, Host, Inline, PermanentFailure
from fencepost.host import telemetry as t
from fencepost.host.enrichment import budget_evidence
from fencepost.host.otel import OtelTelemetry
from fencepost.host.telemetry import Fanout, NullTelemetry
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.host_records import VerdictHeld
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, make_host, run_worker
from host.test_completions import DEADLINE, VENDOR, accepted, parked, payout_action
from host.test_degraded_settlement import Recorder

SECRET = "sk_live_do_not_leak_4242"


@dataclass
class Otel:
    """An ``OtelTelemetry`` over SDK providers with in-memory readers."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    sink: OtelTelemetry

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def points(self, metric: str) -> dict[frozenset[tuple[str, Any]], Any]:
        """Label set -> value (a counter's sum; a histogram's data point) of ``metric``, cumulative."""
        found: dict[frozenset[tuple[str, Any]], Any] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        for point in m.data.data_points:
                            found[frozenset(point.attributes.items())] = getattr(point, "value", point)
        return found

    def count(self, metric: str, **labels: str) -> int:
        return int(self.points(metric).get(frozenset(labels.items()), 0))


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, reader, OtelTelemetry(tracer_provider=tracer_provider, meter_provider=meter_provider))
    meter_provider.shutdown()
    tracer_provider.shutdown()


@pytest.fixture
def simpay(tmp_path: Path) -> Iterator[SimPay]:
    with SimPay(tmp_path / "simpay.db", slow_seconds=0.1) as provider:
        yield provider


def charge(host: Host, key: str, mode: str = "ok", order: str = "o-1") -> Any:
    return host.submit("demo.charge", {"order_id": order, "amount": 500, "mode": mode}, actor="u1",
                       idempotency_key=key, mode=Inline())


def test_host_runs_without_telemetry(store: Store, ledger: Ledger) -> None:
    """S1: the default is no telemetry at all: with ``NullTelemetry``, with a sink that has only ``emit`` (no
    spans, counters or histograms) and with a sink whose every method raises, the same run succeeds."""

    class Broken(t.TelemetrySink):
        def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
            raise RuntimeError("sink down")

        def span(self, name: str, attributes: Mapping[str, Any]) -> Any:
            raise RuntimeError("sink down")

        def add(self, name: str, value: int, labels: Mapping[str, str]) -> None:
            raise RuntimeError("sink down")

        def record(self, name: str, value: float, labels: Mapping[str, str]) -> None:
            raise RuntimeError("sink down")

    minimal = Recorder()
    for number, sink in enumerate([NullTelemetry(), minimal, Broken()]):
        host = Host(store, actions=[charge_action(Spy())], adapters=[Scripted(ledger)], telemetry=sink)
        view = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key=f"k{number}", mode=Inline())
        assert view.status is InvocationStatus.SUCCEEDED
    assert [a["status"] for a in minimal.named(t.STATUS)] == ["running", "succeeded"]
    assert len(ledger.charges) == 3


def test_the_package_and_the_host_run_without_opentelemetry(tmp_path: Path) -> None:
    """S1, ADR 0046: with ``opentelemetry`` unimportable, ``fencepost.host`` imports and a host runs an invocation,
    and ``--telemetry otel`` says what to install; with the API but no SDK (FastAPI brings the API), the API app
    and the CLI import and a host with the OpenTelemetry sink runs the same (no-op providers)."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["opentelemetry"] = None  # import opentelemetry now raises ImportError
        import fencepost.host
        from fencepost.core.errors import InvalidInput
        from fencepost.cli.telemetry_opt import attach_telemetry
        from fencepost.store import open_store
        from fencepost.host import Action, AdapterStep, Host, Inline, Succeeded
        from pydantic import BaseModel

        class P(BaseModel):
            n: int

        class Pay:
            type, vendor = "pay", "v"
            def execute(self, call):
                return Succeeded({{"ok": True}})

        store = open_store("sqlite:///{tmp_path / 'no-otel.db'}")
        store.migrate()
        action = Action(id="a", version=1, params=P, handler=lambda ctx, p: {{}},
                        steps=(AdapterStep(name="s", adapter="pay", operation="op"),))
        host = Host(store, actions=[action], adapters=[Pay()])
        print(host.submit("a", {{"n": 1}}, actor="u", idempotency_key="k1", mode=Inline()).status)
        try:
            attach_telemetry(host, "otel")
        except InvalidInput as error:
            print(error)
        del sys.modules["opentelemetry"]
        sys.modules["opentelemetry.sdk"] = None
        import fencepost.api, fencepost.cli.app
        attach_telemetry(host, "otel")
        print(host.submit("a", {{"n": 1}}, actor="u", idempotency_key="k2", mode=Inline()).status)
        assert not any(m.startswith("opentelemetry.sdk.") for m in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["succeeded", "--telemetry otel needs OpenTelemetry: pip install "
                                                     "'fencepost[otel]'", "succeeded"]


def test_otel_sink_exports_spans(store: Store, simpay: SimPay, otel: Otel) -> None:
    """S1: a real charge against SimPay gives one ``host.invocation`` span whose children are the claim, the
    handler, the step (with its adapter's type and vendor, the operation, the step, the stable adapter invocation
    id and the outcome) and the finalization; the status emissions are events of the spans current then."""
    host = build_host(store, simpay.url, telemetry=otel.sink)
    view = charge(host, "k-ok")
    assert view.status is InvocationStatus.SUCCEEDED
    [root] = otel.spans(t.INVOCATION_SPAN)
    assert root.parent is None and root.attributes is not None
    assert dict(root.attributes) == {"invocation_id": view.id, "attempt": 0, "action_id": "demo.charge",
                                     "action_version": 1, "status": "succeeded"}
    children = {s.name: s for s in otel.spans() if s.parent is not None}
    assert set(children) == {t.CLAIM_SPAN, t.HANDLER_SPAN, t.STEP_SPAN, t.FINALIZE_SPAN}
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in children.values())
    assert all(s.context.trace_id == root.context.trace_id for s in children.values())
    step = children[t.STEP_SPAN]
    assert dict(step.attributes or {}) == {
        "invocation_id": view.id, "step": "charge", "step_index": 0, "adapter_type": "http", "vendor": "simpay",
        "operation": "charge", "adapter_invocation_id": view.steps[0].adapter_invocation_id, "attempts": 1,
        "outcome": "succeeded"}
    assert dict(children[t.FINALIZE_SPAN].attributes or {}) == {"invocation_id": view.id, "status": "succeeded"}
    statuses = [(s.name, dict(e.attributes or {})["status"]) for s in otel.spans() for e in s.events
                if e.name == t.STATUS]
    assert statuses == [(t.FINALIZE_SPAN, "succeeded")]  # inline: "running" was emitted by submit, before the run
    assert all(s.status.status_code is StatusCode.UNSET for s in otel.spans())


def test_metrics_counters(store: Store, backend: StoreBackend, simpay: SimPay, otel: Otel, ledger: Ledger) -> None:
    """S5: real runs against SimPay (two successes, one decline) and scripted ones (an ambiguous outcome, a
    spent recovery budget, an overdue handoff) move each counter exactly once per occurrence; the step-duration
    histogram counts one measurement per step by outcome; a replay of a key moves nothing."""
    host = build_host(store, simpay.url, telemetry=otel.sink)
    assert charge(host, "k1").status is InvocationStatus.SUCCEEDED
    assert charge(host, "k2", order="o-2").status is InvocationStatus.SUCCEEDED
    assert charge(host, "k3", "decline").status is InvocationStatus.FAILED
    charge(host, "k1")  # a replay: nothing runs, nothing is counted
    assert otel.count(t.VERDICTS, status="succeeded") == 2 and otel.count(t.VERDICTS, status="failed") == 1
    durations = otel.points(t.STEP_DURATION)
    labels = {"adapter_type": "http", "vendor": "simpay", "operation": "charge"}
    assert {k: v.count for k, v in durations.items()} == {
        frozenset({**labels, "outcome": "succeeded"}.items()): 2, frozenset({**labels, "outcome": "failed"}.items()): 1}
    assert all(0 < v.sum < 30 for v in durations.values())

    ambiguous = make_host(store, charge_action(Spy()), Scripted(ledger, Ambiguous("read timed out")))
    ambiguous.add_telemetry(otel.sink)
    ambiguous.submit("shop.charge", PARAMS, actor="u1", idempotency_key="amb", mode=Inline())

    exhausted = make_host(store, charge_action(Spy(), version=2), Scripted(ledger, lambda call: _crash()),
                          recovery=1)
    exhausted.add_telemetry(otel.sink)
    queued = exhausted.submit("shop.charge", PARAMS, actor="u1", idempotency_key="budget")
    run_worker(exhausted, backend)  # dies after the charge: the row stays running, the lease expires
    backend.expire()
    run_worker(exhausted, backend)
    assert exhausted.get(queued.id).status is InvocationStatus.RECONCILIATION_REQUIRED

    swept, parked_id = parked(store, backend, ledger, reference="po_telemetry")
    swept.add_telemetry(otel.sink)
    backend.advance(DEADLINE.total_seconds() + 0.5)
    assert swept.reconcile_overdue_completions() == 1 and swept.reconcile_overdue_completions() == 0

    assert otel.count(t.RECONCILIATIONS, kind="adapter_outcome_ambiguous") == 1
    assert otel.count(t.RECONCILIATIONS, kind="recovery_budget_exhausted") == 1
    assert otel.count(t.RECONCILIATIONS, kind="completion_overdue") == 1
    assert sum(otel.points(t.RECONCILIATIONS).values()) == 3
    assert otel.count(t.VERDICTS, status="reconciliation_required") == 3
    assert otel.count(t.BUDGET_EXHAUSTED) == 1 and otel.count(t.OVERDUE_SWEPT) == 1
    late = swept.complete(VENDOR, "po_telemetry", "completed", result={})  # N19: the parked one settles late
    assert late.status is InvocationStatus.SUCCEEDED and otel.count(t.VERDICTS, status="succeeded") == 3
    assert otel.count(t.OVERDUE_SWEPT) == 1 and swept.get(parked_id).status is InvocationStatus.SUCCEEDED


def _crash() -> Any:
    raise Crash()


def test_evidence_refused_names(store: Store, backend: StoreBackend, ledger: Ledger, otel: Otel) -> None:
    """S2: a refused evidence write is ``fencepost.host.invocation.adapter_evidence_refused`` with an ``evidence``
    attribute (here ``parent_enrichment``), as an emission and as a counter of that name, once per refusal."""
    host = make_host(store, charge_action(Spy()), Scripted(ledger, lambda call: _crash()), recovery=1)
    recorder = Recorder()
    host.add_telemetry(Fanout(recorder, otel.sink))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    backend.expire()
    run_worker(host, backend)  # the budget verdict, then its enrichment: nothing refused yet
    assert recorder.named(t.EVIDENCE_REFUSED) == [] and otel.points(t.EVIDENCE_REFUSED) == {}
    plain = VerdictHeld(InvocationStatus.RECONCILIATION_REQUIRED, "recovery attempts exhausted (2/1)")
    budget_evidence(store, queued.id, plain, host.runtime.telemetry)  # the verdict was enriched: refused
    assert t.EVIDENCE_REFUSED == "fencepost.host.invocation.adapter_evidence_refused"
    refused = recorder.named(t.EVIDENCE_REFUSED)
    assert {a["evidence"] for a in refused} >= {"parent_enrichment"}
    assert otel.count(t.EVIDENCE_REFUSED, evidence="parent_enrichment") == 1
    assert sum(otel.points(t.EVIDENCE_REFUSED).values()) == len(refused)


def test_one_status_telemetry_per_transition(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """S3, H10, J8: a full happy path emits exactly pending->running->succeeded, once each, and each only after
    its unit committed: the sink reads the stored status back (through the store, outside the unit) when it is
    told, and finds it already there."""

    class AfterCommit(Recorder):
        def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
            super().emit(name, attributes)
            stored = store.read(lambda tx: tx.host.get_invocation(attributes["invocation_id"]))
            self.emitted[-1][1]["stored"] = None if stored is None else str(stored.status)

    dispatched, inline = AfterCommit(), AfterCommit()
    host = Host(store, actions=[charge_action(Spy())], adapters=[Scripted(ledger)], telemetry=inline)
    host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="inline", mode=Inline())
    assert [(a["status"], a["stored"]) for a in inline.named(t.STATUS)] == [("running", "running"),
                                                                           ("succeeded", "succeeded")]
    worker_host = Host(store, actions=[charge_action(Spy())], adapters=[Scripted(ledger)], telemetry=dispatched)
    worker_host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="dispatched")
    assert dispatched.named(t.STATUS) == []  # pending is where it starts, not a change
    run_worker(worker_host, backend)
    run_worker(worker_host, backend)  # nothing left to claim: nothing more is emitted
    assert [(a["status"], a["stored"]) for a in dispatched.named(t.STATUS)] == [("running", "running"),
                                                                               ("succeeded", "succeeded")]


def test_no_counter_for_a_rolled_back_unit(backend: StoreBackend, ledger: Ledger, otel: Otel) -> None:
    """J8, S5: the success finalization writes everything, then its fence fails and the unit rolls back: no
    verdict is counted and no ``succeeded`` status is emitted; the caller's retry under the same lease reuses the
    checkpoint, commits and counts once."""
    faulty = FaultInjectingStore(backend.migrated(), plan={"finish_command": {1}})
    recorder = Recorder()
    host = make_host(faulty, charge_action(Spy(), idempotent=True), Scripted(ledger))
    host.add_telemetry(Fanout(recorder, otel.sink))

    with pytest.raises(RecoverableFinalization):
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert [n for n, _ in faulty.committed if n == "host.finalize"] == []
    assert otel.points(t.VERDICTS) == {} and [a["status"] for a in recorder.named(t.STATUS)] == ["running"]
    [finalize] = otel.spans(t.FINALIZE_SPAN)
    assert finalize.status.status_code is StatusCode.ERROR
    [invocation] = host.list()
    assert host.execute(invocation.id).status is InvocationStatus.SUCCEEDED  # A6: the caller retries once
    assert otel.count(t.VERDICTS, status="succeeded") == 1 and len(ledger.charges) == 1


def test_a_completion_that_keeps_the_status_emits_no_status(store: Store, backend: StoreBackend,
                                                            ledger: Ledger) -> None:
    """S3: a callback recorded as evidence under a verdict it does not change (N11) emits no status telemetry and
    counts no verdict; the verdict it follows was emitted once."""
    recorder = Recorder()
    adapter = Scripted(ledger, accepted(), PermanentFailure("notify declined"))
    host = make_host(store, payout_action(steps=("payout", "notify")), adapter)
    host.add_telemetry(recorder)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    host.complete(VENDOR, "po_1", "completed", result={"payout_id": "p"})
    assert [a["status"] for a in recorder.named(t.STATUS)] == ["running", "failed"]
    assert host.get(queued.id).status is InvocationStatus.FAILED


def test_no_secret_in_spans_or_labels(store: Store, ledger: Ledger, otel: Otel) -> None:
    """A redaction hook relies on this: params, step inputs, provider outputs and error texts (here each carries
    a secret) never reach a span's attributes, its events or a metric's labels; only ids, names, statuses,
    kinds and outcomes do."""
    secret_params = {"order_id": SECRET, "amount_cents": 1299}
    for key, reply in (("ok", None), ("declined", PermanentFailure(f"card {SECRET} declined")),
                       ("unknown", Ambiguous(f"timeout after {SECRET}"))):
        host = Host(store, actions=[charge_action(Spy(raises=None))], adapters=[Scripted(ledger, reply)],
                    telemetry=otel.sink)
        host.submit("shop.charge", secret_params, actor="u1", idempotency_key=key, mode=Inline())
    handler_fails = Host(store, actions=[charge_action(Spy(raises=ValueError(SECRET)))], adapters=[Scripted(ledger)],
                         telemetry=otel.sink)
    handler_fails.submit("shop.charge", secret_params, actor="u1", idempotency_key="handler", mode=Inline())
    seen: list[str] = []
    for span in otel.spans():
        seen += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        seen += [f"{e.name}:{k}={v}" for e in span.events for k, v in (e.attributes or {}).items()]
        seen.append(span.status.description or "")
    data = otel.reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                seen += [f"{metric.name}:{k}={v}" for p in metric.data.data_points for k, v in p.attributes.items()]
    assert len(otel.spans(t.STEP_SPAN)) == 3 and any("outcome=ambiguous" in s for s in seen)
    assert any("error.type=_HandlerRaised" in s for s in seen)
    assert not [s for s in seen if SECRET in s]
    stored = [r.input for v in store.read(lambda tx: tx.host.list_invocations()) for r in
              store.read(lambda tx, i=v.id: tx.host.list_adapter_invocations(i))]
    assert any(SECRET in str(i) for i in stored)  # the secret was really there to leak


def test_step_span_of_a_step_that_is_reused_is_not_opened(store: Store, backend: StoreBackend, ledger: Ledger,
                                                          otel: Otel) -> None:
    """S1: a recovered idempotent invocation reuses its succeeded checkpoint (G10): only the step that runs gets a
    ``host.step`` span and a duration; the reused one is neither called nor measured again."""
    crash_once: list[Any] = [lambda call: _crash()]
    host = make_host(store, charge_action(Spy(), steps=("reserve", "charge"), idempotent=True),
                     Scripted(ledger, None, *crash_once))
    host.add_telemetry(otel.sink)
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    steps = host.get(queued.id).steps
    assert [s.status for s in steps] == [AdapterStatus.SUCCEEDED, AdapterStatus.RUNNING]
    backend.expire()
    run_worker(host, backend)
    assert host.get(queued.id).status is InvocationStatus.SUCCEEDED
    names = [dict(s.attributes or {}).get("step") for s in otel.spans(t.STEP_SPAN)]
    assert names == ["reserve", "charge", "charge"]
    assert sum(p.count for p in otel.points(t.STEP_DURATION).values()) == 2  # the crashed call never returned


def test_the_otel_sink_uses_the_global_providers_set_later(tmp_path: Path) -> None:
    """ADR 0046: ``--telemetry otel`` builds ``OtelTelemetry()`` before ``opentelemetry-instrument`` or the app
    may have installed the SDK; the sink follows the global providers whenever they are set. In a process of its
    own (the global providers can be set once): the sink is attached first, the SDK second, and the run's spans
    and counters reach the SDK's in-memory reader and exporter."""
    script = textwrap.dedent(f"""
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from pydantic import BaseModel
        from fencepost.cli.telemetry_opt import attach_telemetry
        from fencepost.host import Action, AdapterStep, Host, Inline, Succeeded
        from fencepost.store import open_store

        class P(BaseModel):
            n: int

        class Pay:
            type, vendor = "pay", "v"
            def execute(self, call):
                return Succeeded({{}})

        store = open_store("sqlite:///{tmp_path / 'global.db'}")
        store.migrate()
        host = Host(store, actions=[Action(id="a", version=1, params=P, handler=lambda ctx, p: {{}},
                                           steps=(AdapterStep(name="s", adapter="pay", operation="op"),))],
                    adapters=[Pay()])
        attach_telemetry(host, "otel")
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        host.submit("a", {{"n": 1}}, actor="u", idempotency_key="k", mode=Inline())
        print(sorted(s.name for s in exporter.get_finished_spans()))
        data = reader.get_metrics_data()
        print([(m.name, [dict(p.attributes) for p in m.data.data_points]) for r in data.resource_metrics
               for s in r.scope_metrics for m in s.metrics if m.name.endswith("verdicts")])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['host.claim', 'host.finalize', 'host.handler', 'host.invocation', 'host.step']",
        "[('fencepost.host.invocation.verdicts', [{'status': 'succeeded'}])]"]


def test_the_telemetry_option_is_checked(tmp_path: Path) -> None:
    """``--telemetry`` takes ``log`` or ``otel``; ``otel`` needs ``--app``, the host it reports."""
    from helpers.processes import run_cli

    database = f"sqlite:///{tmp_path / 'control.db'}"
    assert run_cli(["migrate", "--database", database]).returncode == 0
    bogus = run_cli(["worker", "--database", database, "--work-dir", str(tmp_path / "w"), "--telemetry", "bogus"])
    assert bogus.returncode != 0 and "--telemetry must be one of log, otel" in bogus.stderr
    alone = run_cli(["worker", "--database", database, "--work-dir", str(tmp_path / "w"), "--telemetry", "otel"])
    assert alone.returncode != 0 and "--telemetry otel needs --app" in alone.stderr
