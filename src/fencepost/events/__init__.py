"""The event relay and its sinks (issue 15, ADR 0038, ADR 0039): ``fencepost.events.relay`` claims the host's
publication rows under fenced leases and delivers them at least once through a ``Publisher``."""

from fencepost.events.relay import Publisher, PublishFailed, Relay, RelayConfig, RelayStats, envelope

__all__ = ["PublishFailed", "Publisher", "Relay", "RelayConfig", "RelayStats", "envelope"]
