"""The host's telemetry as Prometheus metrics, for ``GET /metrics`` of ``fencepost serve`` (host-spec S5, W1;
ADR 0047).

``PrometheusTelemetry()`` is a ``TelemetrySink`` over its own ``prometheus_client.CollectorRegistry`` (never the
process-global one, so two apps or tests never share counts). It keeps the counters of ``telemetry.COUNTERS``
and the histograms of ``telemetry.HISTOGRAMS`` under the same names with dots as underscores: counters end in
``_total`` (``fencepost_host_invocation_verdicts_total{status="succeeded"}``), the step-duration histogram in
``_seconds``. Emissions and spans are not its business (no-ops). ``exposition()`` is the text format
(``CONTENT_TYPE``, version 0.0.4).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from fencepost.host.telemetry import COUNTERS, HISTOGRAMS, TelemetrySink

#: The text format ``generate_latest`` writes for these (plain ASCII) names; every Prometheus version reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metric_name(name: str) -> str:
    """A telemetry metric name as Prometheus spells it: ``fencepost.host.x`` -> ``fencepost_host_x``."""
    return name.replace(".", "_")


class PrometheusTelemetry(TelemetrySink):
    """Counters and histograms for scraping (see the module docstring).

    Args:
        registry: where the metrics are registered (default: a new registry of this sink's own).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.counters = {spec.name: Counter(metric_name(spec.name), spec.description, list(spec.labels),
                                            registry=self.registry) for spec in COUNTERS}
        self.histograms = {spec.name: Histogram(metric_name(spec.name) + "_seconds" if spec.unit == "s"
                                                else metric_name(spec.name), spec.description, list(spec.labels),
                                                buckets=spec.buckets, registry=self.registry)
                           for spec in HISTOGRAMS}

    def add(self, name: str, value: int, labels: Mapping[str, str]) -> None:
        """Increment counter ``name`` of ``COUNTERS`` (an unknown name is ignored)."""
        counter = self.counters.get(name)
        if counter is not None:
            (counter.labels(**labels) if labels else counter).inc(value)

    def record(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        """Observe one measurement of histogram ``name`` (seconds; an unknown name is ignored)."""
        histogram = self.histograms.get(name)
        if histogram is not None:
            (histogram.labels(**labels) if labels else histogram).observe(value)

    def exposition(self) -> bytes:
        """Every metric of the registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)
