"""The event store conformance checks (issue 15; host-spec U, V; ADR 0040)."""
