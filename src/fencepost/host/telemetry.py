"""The host's lifecycle telemetry sink: vendor-neutral, optional, emitted only after a commit (host-spec S1-S5,
W1, J8, H10, H18; ADR 0031, ADR 0046).

A sink receives **emissions** ``emit(name, attributes)``. Names are ``fencepost.host.<subject>.<what>``:

- ``STATUS`` (``fencepost.host.invocation.status``): one per status change, after its transaction committed
  (``invocation_id``, ``status``, and ``kind`` for ``reconciliation_required``; J8, S3). A rolled-back unit
  emits nothing.
- ``EVIDENCE_REFUSED`` (``fencepost.host.invocation.adapter_evidence_refused``): an evidence write after a
  durable verdict whose settled-verdict condition no longer held (``evidence``: ``adapter_checkpoint``,
  ``event``, ``reconciliation`` or ``parent_enrichment``; S2, H18). A refusal is not an error.
- ``CIRCUIT_STATE_CHANGED`` (``fencepost.host.adapter.circuit_state_changed``): an adapter circuit breaker
  changed state (``adapter_type``, ``vendor``, ``from_state``, ``to_state``, ``failures``; R2, ADR 0050).
- ``EVIDENCE_FAILED`` (``fencepost.host.invocation.adapter_evidence_failed``): an evidence write that raised; the
  execution raises ``RecoverableFinalization`` after the remaining writes (K7).

A full sink (``TelemetrySink``) also takes **spans** (``span(name, attributes)``, a context manager yielding a
``SpanScope``), **counter** increments (``add``) and **histogram** measurements (``record``). The counters are
derived from the emissions by one catalogue (``COUNTERS``), in ``emit`` below, so a counter moves exactly once per
emission: after the commit it reports, never for a rolled-back unit (S5, J8). A sink that has only ``emit`` (the
``Telemetry`` protocol) keeps working: spans and measurements are then skipped.

Attributes of spans and metric labels carry only ids, names, statuses, kinds and outcomes, never params,
inputs, outputs or error texts (``safe_attributes``; a redaction hook relies on this).

The default sink (``LogTelemetry``) logs emissions at INFO (refusals and failures at WARNING) through ``logging``
under ``fencepost.host``; its spans and measurements are no-ops. ``NullTelemetry`` discards everything. A sink
must not raise: whatever it raises is logged and dropped, since telemetry is never a fact about the work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Protocol

STATUS = "fencepost.host.invocation.status"
EVIDENCE_REFUSED = "fencepost.host.invocation.adapter_evidence_refused"
EVIDENCE_FAILED = "fencepost.host.invocation.adapter_evidence_failed"
CIRCUIT_STATE_CHANGED = "fencepost.host.adapter.circuit_state_changed"

# ── span names: the units they wrap (ADR 0025's transaction names) ──
INVOCATION_SPAN = "host.invocation"
CLAIM_SPAN = "host.claim"
HANDLER_SPAN = "host.handler"
STEP_SPAN = "host.step"
SETTLE_SPAN = "host.settle"
FINALIZE_SPAN = "host.finalize"
PARK_SPAN = "host.park"

# ── metric names (S5) ──
VERDICTS = "fencepost.host.invocation.verdicts"
RECONCILIATIONS = "fencepost.host.invocation.reconciliations"
BUDGET_EXHAUSTED = "fencepost.host.invocation.budget_exhausted"
OVERDUE_SWEPT = "fencepost.host.completion.overdue_swept"
STEP_DURATION = "fencepost.host.adapter.step.duration"

TERMINAL = frozenset({"succeeded", "failed", "reconciliation_required"})

#: The only attribute keys a span, a span event or a metric label may carry: ids, names, statuses, kinds and
#: outcomes. Anything else (params, inputs, outputs, error texts) is dropped by ``safe_attributes``.
SAFE_KEYS = frozenset({
    "invocation_id", "adapter_invocation_id", "action_id", "action_version", "tenant_id", "space_id", "mode",
    "attempt", "attempts", "status", "kind", "evidence", "target", "step", "step_index", "adapter_type", "vendor",
    "operation", "outcome", "error_type", "reclaim", "state", "disposition",
})

log = logging.getLogger("fencepost.host")

#: What each emission means, for the log line of the default sink.
MESSAGES = {
    STATUS: "invocation status changed",
    EVIDENCE_REFUSED: "evidence not written after a durable verdict: the verdict changed since (not an error)",
    CIRCUIT_STATE_CHANGED: "adapter circuit breaker changed state",
    EVIDENCE_FAILED: "evidence write failed after a durable verdict: an evidence gap fencepost audit reports",
}

Scalar = str | int | float | bool


@dataclass(frozen=True)
class CounterSpec:
    """One counter derived from an emission (host-spec S5).

    Attributes:
        name: the metric name (OpenTelemetry; Prometheus turns dots into ``_`` and adds ``_total``).
        emission: the emission name that increments it, once per emission. labels: the attribute keys it keeps
            (a missing one is ``"unspecified"``). description: for exporters. when: which emissions count.
    """

    name: str
    emission: str
    labels: tuple[str, ...]
    description: str
    when: Callable[[Mapping[str, Any]], bool] = lambda attributes: True

    def labels_of(self, attributes: Mapping[str, Any]) -> dict[str, str]:
        """The label values of one emission (strings; ``"unspecified"`` where an attribute is absent)."""
        return {key: "unspecified" if attributes.get(key) is None else str(attributes[key]) for key in self.labels}


@dataclass(frozen=True)
class HistogramSpec:
    """One histogram (host-spec S5): ``name``, ``unit`` (UCUM: ``s``), its label keys and buckets (seconds)."""

    name: str
    unit: str
    labels: tuple[str, ...]
    description: str
    buckets: tuple[float, ...]


COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec(VERDICTS, STATUS, ("status",), "Invocation verdicts recorded, by terminal status (each change into "
                "a terminal status: a late settlement or a contradiction counts again)",
                lambda a: a.get("status") in TERMINAL),
    CounterSpec(RECONCILIATIONS, STATUS, ("kind",), "Invocations that became reconciliation_required, by kind",
                lambda a: a.get("status") == "reconciliation_required"),
    CounterSpec(BUDGET_EXHAUSTED, STATUS, (), "Invocations settled because their recovery budget was spent (H4)",
                lambda a: a.get("kind") == "recovery_budget_exhausted"),
    CounterSpec(OVERDUE_SWEPT, STATUS, (), "Handoffs the completion-deadline sweep settled as overdue (N12)",
                lambda a: a.get("kind") == "completion_overdue"),
    CounterSpec(EVIDENCE_REFUSED, EVIDENCE_REFUSED, ("evidence",),
                "Evidence writes refused after a durable verdict changed (S2, H18)"),
    CounterSpec(EVIDENCE_FAILED, EVIDENCE_FAILED, ("evidence",),
                "Evidence writes that raised after a durable verdict (K7; fencepost audit reports the gap)"),
)

STEP_DURATION_SPEC = HistogramSpec(
    STEP_DURATION, "s", ("outcome", "adapter_type", "vendor", "operation"),
    "Adapter step latency from its first call to its classified outcome, retries and waits included",
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))

HISTOGRAMS: tuple[HistogramSpec, ...] = (STEP_DURATION_SPEC,)


def safe_attributes(attributes: Mapping[str, Any]) -> dict[str, Scalar]:
    """The attributes a span, span event or label may carry: keys in ``SAFE_KEYS`` with scalar values (an enum
    becomes its string; None and anything else is dropped)."""
    safe: dict[str, Scalar] = {}
    for key, value in attributes.items():
        if key not in SAFE_KEYS or value is None:
            continue
        if isinstance(value, bool | int | float):
            safe[key] = value
        elif isinstance(value, str):
            safe[key] = str(value)[:200]
    return safe


class SpanScope(Protocol):
    """The open span a ``span`` context yields: attributes learnt while it runs (the step's outcome)."""

    def set(self, key: str, value: Scalar) -> None:
        """Set one attribute (only keys in ``SAFE_KEYS`` are kept)."""
        ...


class _NoSpan:
    def set(self, key: str, value: Scalar) -> None:
        return None


NO_SPAN: SpanScope = _NoSpan()


class Telemetry(Protocol):
    """A telemetry sink (host-spec S1): ``emit`` is called after the commit it reports, never before. A sink may
    also have the ``TelemetrySink`` methods (``span``, ``add``, ``record``); the host uses them when present."""

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Report ``name`` with its ``attributes`` (plain JSON values)."""
        ...


class TelemetrySink:
    """A full sink with no-op defaults: subclass and override what the backend supports (ADR 0046).

    ``span(name, attributes)`` returns a context manager that yields a ``SpanScope``; an exception leaving it
    must propagate (the sink records only its type). ``add(name, value, labels)`` increments a counter of
    ``COUNTERS``; ``record(name, value, labels)`` adds a measurement to a histogram of ``HISTOGRAMS`` (seconds).
    """

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        return None

    def span(self, name: str, attributes: Mapping[str, Scalar]) -> AbstractContextManager[SpanScope]:
        return _null_scope()

    def add(self, name: str, value: int, labels: Mapping[str, str]) -> None:
        return None

    def record(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        return None


@contextmanager
def _null_scope() -> Iterator[SpanScope]:
    yield NO_SPAN


class LogTelemetry(TelemetrySink):
    """The default sink: one log record per emission (``extra`` carries the attributes); no spans or metrics."""

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        level = logging.INFO if name == STATUS else logging.WARNING
        text = MESSAGES.get(name, name) + ": " + ", ".join(f"{k}={v}" for k, v in attributes.items())
        log.log(level, text, extra={"event": name, **{f"attr_{k}": v for k, v in attributes.items()}})


class NullTelemetry(TelemetrySink):
    """A sink that discards everything (host-spec S1: the host runs without telemetry)."""


class Fanout(TelemetrySink):
    """Every call goes to each of ``sinks`` in order (e.g. the log sink and an OpenTelemetry one); a sink that
    lacks a method is skipped for it, and one that raises does not stop the others."""

    def __init__(self, *sinks: Telemetry) -> None:
        self.sinks: tuple[Telemetry, ...] = sinks

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        for sink in self.sinks:
            _guarded(name, partial(sink.emit, name, attributes))

    def span(self, name: str, attributes: Mapping[str, Scalar]) -> AbstractContextManager[SpanScope]:
        return _FanoutSpan([_GuardedSpan(sink, name, attributes) for sink in self.sinks])

    def add(self, name: str, value: int, labels: Mapping[str, str]) -> None:
        for sink in self.sinks:
            _call(sink, "add", name, value, labels)

    def record(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        for sink in self.sinks:
            _call(sink, "record", name, value, labels)


class _FanoutSpan:
    def __init__(self, spans: Sequence[_GuardedSpan]) -> None:
        self.spans = spans
        self.scopes: list[SpanScope] = []

    def __enter__(self) -> SpanScope:
        self.scopes = [span.__enter__() for span in self.spans]
        return self

    def set(self, key: str, value: Scalar) -> None:
        for scope in self.scopes:
            _guarded("span.set", partial(scope.set, key, value))

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for span in reversed(self.spans):
            span.__exit__(kind, error, trace)


class _GuardedSpan:
    """A sink's span whose own failures are logged and dropped; the work's exception always propagates."""

    def __init__(self, sink: Telemetry, name: str, attributes: Mapping[str, Scalar]) -> None:
        self.sink, self.name, self.attributes = sink, name, attributes
        self.inner: AbstractContextManager[SpanScope] | None = None

    def __enter__(self) -> SpanScope:
        opener = getattr(self.sink, "span", None)
        if opener is None:
            return NO_SPAN
        try:
            self.inner = opener(self.name, self.attributes)
            scope: SpanScope = self.inner.__enter__()
            return _GuardedScope(scope)
        except Exception:
            self.inner = None
            log.exception("telemetry sink failed", extra={"event": "telemetry_failed", "telemetry_name": self.name})
            return NO_SPAN

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # None: the work's exception always propagates
        if self.inner is not None:
            try:
                self.inner.__exit__(kind, error, trace)
            except Exception:
                log.exception("telemetry sink failed", extra={"event": "telemetry_failed",
                                                              "telemetry_name": self.name})


class _GuardedScope:
    def __init__(self, inner: SpanScope) -> None:
        self.inner = inner

    def set(self, key: str, value: Scalar) -> None:
        if key in SAFE_KEYS:
            _guarded("span.set", lambda: self.inner.set(key, value))


def _guarded(name: str, call: Callable[[], object]) -> None:
    try:
        call()
    except Exception:  # a broken sink must not turn a recorded outcome into an error
        log.exception("telemetry sink failed", extra={"event": "telemetry_failed", "telemetry_name": name})


def _call(sink: Telemetry, method: str, name: str, value: float, labels: Mapping[str, str]) -> None:
    bound = getattr(sink, method, None)
    if bound is not None:
        _guarded(name, lambda: bound(name, value, labels))


def emit(sink: Telemetry, name: str, **attributes: Any) -> None:
    """``sink.emit(name, attributes)``, then one ``add`` per counter of ``COUNTERS`` this emission increments
    (host-spec S5: once per emission, so once per committed occurrence). An exception from the sink is logged
    and dropped (never the work's).

    Call it only after the transaction it reports committed (J8).
    """
    _guarded(name, lambda: sink.emit(name, attributes))
    for counter in COUNTERS:
        if counter.emission == name and counter.when(attributes):
            _call(sink, "add", counter.name, 1, counter.labels_of(attributes))


def span(sink: Telemetry, name: str, **attributes: Any) -> AbstractContextManager[SpanScope]:
    """A span named ``name`` around a block, with ``safe_attributes(attributes)``; a sink without ``span`` (or
    one that fails) gives a no-op scope. The block's exception propagates unchanged."""
    return _GuardedSpan(sink, name, safe_attributes(attributes))


def record(sink: Telemetry, name: str, value: float, **labels: Any) -> None:
    """One measurement of histogram ``name`` (seconds for ``STEP_DURATION``) with its labels as strings."""
    _call(sink, "record", name, value, {k: "unspecified" if v is None else str(v) for k, v in labels.items()})
