"""The host's lifecycle telemetry sink: vendor-neutral, optional, emitted only after a commit (host-spec S1-S3,
J8, H18).

A sink receives ``emit(name, attributes)``. Names are ``fencepost.host.<subject>.<what>``:

- ``STATUS`` (``fencepost.host.invocation.status``): one per status change, after its transaction committed
  (``invocation_id``, ``status``; J8, S3). A rolled-back unit emits nothing.
- ``EVIDENCE_REFUSED`` (``fencepost.host.invocation.adapter_evidence_refused``): an evidence write after a
  durable verdict whose settled-verdict condition no longer held (``evidence``: ``adapter_checkpoint``,
  ``event``, ``reconciliation`` or ``parent_enrichment``; S2, H18). A refusal is not an error.
- ``CIRCUIT_STATE_CHANGED`` (``fencepost.host.adapter.circuit_state_changed``): an adapter circuit breaker
  changed state (``adapter_type``, ``vendor``, ``from_state``, ``to_state``, ``failures``; R2, ADR 0050).
- ``EVIDENCE_FAILED`` (``fencepost.host.invocation.adapter_evidence_failed``): an evidence write that raised; the
  execution raises ``RecoverableFinalization`` after the remaining writes (K7).

The default sink logs at INFO (refusals and failures at WARNING) through ``logging`` under ``fencepost.host``;
``NullTelemetry`` discards. A sink must not raise: whatever it raises is logged and dropped, since telemetry is
never a fact about the work.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

STATUS = "fencepost.host.invocation.status"
EVIDENCE_REFUSED = "fencepost.host.invocation.adapter_evidence_refused"
EVIDENCE_FAILED = "fencepost.host.invocation.adapter_evidence_failed"
CIRCUIT_STATE_CHANGED = "fencepost.host.adapter.circuit_state_changed"

log = logging.getLogger("fencepost.host")

#: What each emission means, for the log line of the default sink.
MESSAGES = {
    STATUS: "invocation status changed",
    EVIDENCE_REFUSED: "evidence not written after a durable verdict: the verdict changed since (not an error)",
    CIRCUIT_STATE_CHANGED: "adapter circuit breaker changed state",
    EVIDENCE_FAILED: "evidence write failed after a durable verdict: an evidence gap fencepost audit reports",
}


class Telemetry(Protocol):
    """A telemetry sink (host-spec S1): ``emit`` is called after the commit it reports, never before."""

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Report ``name`` with its ``attributes`` (plain JSON values)."""
        ...


class LogTelemetry:
    """The default sink: one log record per emission (``extra`` carries the attributes)."""

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        level = logging.INFO if name == STATUS else logging.WARNING
        text = MESSAGES.get(name, name) + ": " + ", ".join(f"{k}={v}" for k, v in attributes.items())
        log.log(level, text, extra={"event": name, **{f"attr_{k}": v for k, v in attributes.items()}})


class NullTelemetry:
    """A sink that discards everything."""

    def emit(self, name: str, attributes: Mapping[str, Any]) -> None:
        return None


def emit(sink: Telemetry, name: str, **attributes: Any) -> None:
    """``sink.emit(name, attributes)``; an exception from the sink is logged and dropped (never the work's)."""
    try:
        sink.emit(name, attributes)
    except Exception:  # a broken sink must not turn a recorded outcome into an error
        log.exception("telemetry sink failed", extra={"event": "telemetry_failed", "telemetry_name": name})
