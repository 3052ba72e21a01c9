"""Events (level 4): the host's event log leaving fencepost, and the checks that a store keeps its rules.

- ``fencepost.events.relay`` (issue 15, ADR 0038, ADR 0039) claims the host's publication rows under fenced
  leases and delivers them at least once through a ``Publisher``.
- ``fencepost.events.conformance`` holds the six event-append checks, ``fencepost.events.isolation`` the tenant
  isolation checks, and ``fencepost.events.fencepost_subject`` the adapters that present a fencepost ``Store``
  to them (host-spec U, V; ADR 0040). They import nothing from the relay.
"""

from fencepost.events.relay import Publisher, PublishFailed, Relay, RelayConfig, RelayStats, envelope

__all__ = ["PublishFailed", "Publisher", "Relay", "RelayConfig", "RelayStats", "envelope"]
