"""What the action host records is what the relay publishes: a real invocation's lifecycle events, appended
with their outbox rows by the host, reach a real webhook receiver as stored (host-spec T7, T9)."""

from __future__ import annotations

import json

from fencepost.events.relay import Relay, RelayConfig
from fencepost.events.sinks import WebhookSink
from fencepost.store.base import Store
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, events_of, make_host, run_worker

from .kit import receiver, statuses


def test_an_invocations_events_reach_the_webhook_as_stored(store: Store, backend: StoreBackend) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(Ledger()))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    assert run_worker(host, backend) == 1
    stored = {e.id: e for e in events_of(store, queued.id)}
    assert [e.type for e in stored.values()] == [
        "ActionInvocationStarted", "AdapterInvocationSucceeded", "ActionInvocationSucceeded"]
    with receiver() as rx:
        sink = WebhookSink(rx.url, timeout_seconds=5)
        relay = Relay(store, sink, RelayConfig(idle_seconds=0.01))
        relay.run(until=lambda: statuses(store).get("published", 0) >= len(stored))
        sink.close()
    bodies = [json.loads(body) for _headers, body in rx.requests]
    assert {b["id"] for b in bodies} == set(stored)
    for body in bodies:
        event = stored[body["id"]]
        assert (body["type"], body["sequence"], body["payload"], body["subject"]["subject_id"]) == (
            event.type, event.sequence, event.payload, event.subject.subject_id)
    assert statuses(store) == {"published": len(stored)}
