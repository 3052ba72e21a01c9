"""The OpenTelemetry sink of the action host (host-spec S1, S5, W1; ADR 0046).

``OtelTelemetry(tracer_provider=None, meter_provider=None)`` turns the host's telemetry into OpenTelemetry
signals through ``opentelemetry-api`` only:

- spans: ``host.invocation`` (one execution under a lease), with children ``host.claim``, ``host.handler``, one
  ``host.step`` per adapter step (``adapter_type``, ``vendor``, ``operation``, ``step``,
  ``adapter_invocation_id``, ``attempts``, ``outcome``), ``host.settle``, ``host.finalize`` and ``host.park``;
- span events: each emission (``fencepost.host.invocation.status`` ...) on the span current when it is emitted,
  with ``safe_attributes`` only;
- counters of ``telemetry.COUNTERS`` and the step-duration histogram (seconds).

Without arguments it uses the global providers (``opentelemetry.trace`` and ``opentelemetry.metrics``), which are
no-ops until an application or ``opentelemetry-instrument`` installs the SDK: the host runs the same either way.
An exception leaving a span sets its status to ERROR with the exception's type name only; the exception's text
(which may quote a provider's answer or a secret) is never recorded.

Importing this module needs ``opentelemetry-api`` (the ``otel`` extra); nothing else in fencepost imports it
except ``fencepost worker --telemetry otel`` and ``fencepost serve --telemetry otel``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, Histogram, MeterProvider
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from fencepost import __version__
from fencepost.host.telemetry import COUNTERS, HISTOGRAMS, SAFE_KEYS, Scalar, SpanScope, TelemetrySink, safe_attributes

SCOPE = "fencepost.host"


class _Scope:
    def __init__(self, span: Span) -> None:
        self.span = span

    def set(self, key: str, value: Scalar) -> None:
        if key in SAFE_KEYS:
            self.span.set_attribute(key, value)


class OtelTelemetry(TelemetrySink):
    """A ``TelemetrySink`` over OpenTelemetry (see the module docstring).

    Args:
        tracer_provider, meter_provider: the providers to use (an SDK's, or a test's with in-memory exporters);
            None uses the global ones, also when they are set only later.
    """

    def __init__(self, *, tracer_provider: TracerProvider | None = None,
                 meter_provider: MeterProvider | None = None) -> None:
        self.tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider=meter_provider)
        self.counters: dict[str, Counter] = {
            spec.name: meter.create_counter(spec.name, unit="1", description=spec.description) for spec in COUNTERS}
        self.histograms: dict[str, Histogram] = {
            spec.name: meter.create_histogram(spec.name, unit=spec.unit, description=spec.description,
                                              explicit_bucket_boundaries_advisory=list(spec.buckets))
            for spec in HISTOGRAMS}

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        """The emission as an event of the current span (if one is recording), safe attributes only."""
        current = trace.get_current_span()
        if current.is_recording():
            current.add_event(name, safe_attributes(attributes))

    def span(self, name: str, attributes: Mapping[str, Scalar]) -> AbstractContextManager[SpanScope]:
        """A span current for the block (a child of the current one)."""
        return self._span(name, attributes)

    @contextmanager
    def _span(self, name: str, attributes: Mapping[str, Scalar]) -> Iterator[SpanScope]:
        with self.tracer.start_as_current_span(name, attributes=safe_attributes(attributes), record_exception=False,
                                               set_status_on_exception=False) as current:
            try:
                yield _Scope(current)
            except BaseException as error:
                current.set_attribute("error.type", type(error).__name__)
                current.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise

    def add(self, name: str, value: int, labels: Mapping[str, str]) -> None:
        """Increment counter ``name`` of ``COUNTERS`` (an unknown name is ignored)."""
        counter = self.counters.get(name)
        if counter is not None:
            counter.add(value, dict(labels))

    def record(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Record one measurement of histogram ``name`` of ``HISTOGRAMS`` (an unknown name is ignored)."""
        histogram = self.histograms.get(name)
        if histogram is not None:
            histogram.record(value, dict(labels))
