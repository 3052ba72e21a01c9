"""The relay soak of issue 15 (``pytest -m soak tests/events``): 10,000 events per sink on PostgreSQL, three relay
processes SIGKILLed at random and restarted, the webhook answering 500 for a while, the broker closing every
client connection from the server side mid-run. Every event arrives at least once, each row is published
exactly once in the store's records, none is lost, none is dead-lettered (every failure here is transient).

Bounded: each run stops by itself within ``DEADLINE`` seconds; all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack

import pytest

from helpers.store_backends import StoreBackend, schema_url

from .kit import AMQP_URL, amqp_exchange, append, drain, receiver, statuses

TOTAL = int(os.environ.get("FENCEPOST_RELAY_SOAK_EVENTS", "10000"))
RELAYS = 3
DEADLINE = 600.0

pytestmark = pytest.mark.soak


def _spawn(database: str, sink: list[str], name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "fencepost.cli", "relay", "--database", database, *sink,
                             "--relay-id", name, "--lease-seconds", "2", "--timeout", "1", "--batch-size", "50",
                             "--poll-interval", "0.05", "--backoff-base", "0.05", "--backoff-max", "1",
                             "--log-format", "text"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Chaos:
    """Three relay processes; ``step()`` SIGKILLs one at random every 0.5-1.5 s and restarts it (and, for AMQP,
    on every second kill, has the broker close every client connection)."""

    def __init__(self, database: str, sink: list[str], *, drop_broker_connections: bool) -> None:
        self.database, self.sink, self.drop = database, sink, drop_broker_connections
        self.rng = random.Random(15)
        self.kills = self.drops = 0
        self.procs = {f"relay-{i}": _spawn(database, sink, f"relay-{i}-0") for i in range(RELAYS)}
        self.next_at = time.monotonic() + self.rng.uniform(0.5, 1.5)

    def step(self) -> None:
        if time.monotonic() < self.next_at:
            return
        victim = self.rng.choice(sorted(self.procs))
        self.procs[victim].send_signal(signal.SIGKILL)
        self.procs[victim].wait(10)
        self.kills += 1
        self.procs[victim] = _spawn(self.database, self.sink, f"{victim}-{self.kills}")
        if self.drop and self.kills % 2 == 0:
            subprocess.run(["rabbitmqctl", "close_all_connections", "fencepost soak: dropped on purpose"],
                           check=True, capture_output=True, timeout=30)
            self.drops += 1
        self.next_at = time.monotonic() + self.rng.uniform(0.5, 1.5)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _drive(backend: StoreBackend, sink: list[str], *, drop: bool) -> list[str]:
    store = backend.migrated()
    database = schema_url(backend.schema or "")
    ids = append(store, TOTAL)
    deadline = time.monotonic() + DEADLINE
    chaos = Chaos(database, sink, drop_broker_connections=drop)
    try:
        while statuses(store).get("published", 0) < TOTAL:
            assert time.monotonic() < deadline, f"soak did not finish in {DEADLINE}s: {dict(statuses(store))}"
            chaos.step()
            time.sleep(0.05)
    finally:
        chaos.stop()
    print(f"relay soak: {TOTAL} events, {chaos.kills} relays SIGKILLed, {chaos.drops} broker connection drops")
    assert chaos.kills > 0 and (chaos.drops > 0 or not drop), "the soak ended before any chaos: raise TOTAL"
    assert statuses(store) == Counter({"published": TOTAL})  # exactly once in the records, no dead letter
    return ids


def test_webhook_soak_with_sigkills_and_500s(pg_backend: StoreBackend) -> None:
    with receiver(fail_first=300) as rx:
        ids = _drive(pg_backend, ["--sink", f"webhook:{rx.url}"], drop=False)
    assert set(rx.accepted_ids) == set(ids)  # every event at least once


def test_rabbitmq_soak_with_sigkills_and_dropped_connections(pg_backend: StoreBackend) -> None:
    with ExitStack() as stack:
        exchange, queue = stack.enter_context(amqp_exchange())
        assert queue is not None
        ids = _drive(pg_backend, ["--sink", AMQP_URL, "--exchange", exchange], drop=True)
        received = drain(queue)
    assert set(received) == set(ids)  # every event at least once
