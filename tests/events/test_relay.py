"""The event relay end to end (issue 15, ADR 0038, ADR 0039): real SQLite files and PostgreSQL, a real local
webhook receiver, the real RabbitMQ on 127.0.0.1:5672, and relay processes killed with SIGKILL.

Every test checks both sides: what the sink received (each event at least once, by id) and what the store
recorded (each row ``published`` exactly once, nothing left behind).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fencepost.api.signatures import refusal
from fencepost.cli.app import app
from fencepost.core.statuses import EventOutboxStatus
from fencepost.events.relay import PublishFailed, Relay, RelayConfig, backoff_seconds
from fencepost.events.sinks import AmqpSink, CallableSink, WebhookSink
from fencepost.store.base import Store
from fencepost.store.host_records import EventOutboxRecord, EventRecord
from fencepost.store.open import open_store
from helpers.store_backends import StoreBackend

from .kit import (
    AMQP_URL,
    all_published,
    amqp_exchange,
    append,
    drain,
    freezing_amqp_proxy,
    receiver,
    statuses,
    wait_until,
)

FAST = dict(idle_seconds=0.02, backoff_base_seconds=0.01, backoff_max_seconds=0.05)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(url)
    store.migrate()
    store.close()
    return url


@pytest.fixture
def sqlite_store(db: str) -> Store:
    return open_store(db)


def run_until_drained(relay: Relay, store: Store, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout

    def done() -> bool:
        counts = statuses(store)
        if time.monotonic() > deadline:
            raise AssertionError(f"relay did not drain the outbox in {timeout}s: {dict(counts)}")
        return sum(counts.get(s, 0) for s in ("pending", "retry_pending", "processing")) == 0

    relay.run(until=done)


def test_backoff_is_exponential_capped_and_jittered() -> None:
    config = RelayConfig(backoff_base_seconds=1.0, backoff_max_seconds=30.0)
    rng = random.Random(7)
    for attempts, ceiling in ((1, 1.0), (2, 2.0), (4, 8.0), (5, 16.0), (6, 30.0), (40, 30.0)):
        delays = [backoff_seconds(attempts, config, rng) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempts, min(delays), max(delays))
        assert len(set(delays)) > 40  # jittered: failing rows of many relays do not retry in step


def test_callable_sink_each_row_published_once(sqlite_store: Store) -> None:
    ids = append(sqlite_store, 120)
    seen: Counter[str] = Counter()
    append(sqlite_store, 3, prefix="probe", space="event-append-probe-9f1c")
    relay = Relay(sqlite_store, CallableSink(lambda e, o: seen.update([e.id])),
                  RelayConfig(batch_size=25, **FAST))
    run_until_drained_except_probes(relay, sqlite_store)
    assert seen == Counter(ids)
    counts = statuses(sqlite_store)
    assert counts["published"] == 120 and counts["pending"] == 3  # the probe rows stay, never published
    assert relay.stats.published == 120 and relay.stats.lost == 0


def run_until_drained_except_probes(relay: Relay, store: Store) -> None:
    deadline = time.monotonic() + 20

    def done() -> bool:
        assert time.monotonic() < deadline, dict(statuses(store))
        rows = store.read(lambda tx: tx.events.list_event_outbox(limit=10_000))
        return all(r.status == EventOutboxStatus.PUBLISHED for r in rows
                   if not (r.space_id or "").startswith("event-append-probe-"))

    relay.run(until=done)


def test_webhook_500_for_a_while_then_200_signed_with_the_event_id(sqlite_store: Store) -> None:
    ids = append(sqlite_store, 20)
    with receiver(fail_first=7) as rx:
        sink = WebhookSink(rx.url, secret="s3cret", timeout_seconds=5)
        relay = Relay(sqlite_store, sink, RelayConfig(batch_size=5, **FAST))
        run_until_drained(relay, sqlite_store)
        sink.close()
    assert set(rx.accepted_ids) == set(ids)
    assert relay.stats.failed == 7 and relay.stats.published == 20
    for headers, body in rx.requests:
        envelope = json.loads(body)
        assert headers["Fencepost-Event-Id"] == envelope["id"] and headers["Content-Type"] == "application/json"
        assert envelope["payload"] == {"id": envelope["id"]} and envelope["subject"]["subject_id"] == envelope["id"]
        # the receiver side of the completion endpoint's scheme accepts the signature, and only over this body
        assert refusal(headers["Fencepost-Signature"], body, ["s3cret"], now=time.time()) is None
        assert refusal(headers["Fencepost-Signature"], body + b" ", ["s3cret"], now=time.time()) is not None
    rows = sqlite_store.read(lambda tx: tx.events.list_event_outbox(limit=100))
    assert all(r.status == EventOutboxStatus.PUBLISHED and r.last_error is None for r in rows)
    retried = [r for r in rows if r.attempts > 1]
    assert sum(r.attempts - 1 for r in retried) == 7


def test_failing_sink_dead_letters_with_last_error_and_requeue_brings_it_back(db: str, sqlite_store: Store) -> None:
    append(sqlite_store, 2)
    calls: Counter[str] = Counter()

    def refuse(event: EventRecord, outbox: EventOutboxRecord) -> None:
        calls[event.id] += 1
        raise RuntimeError(f"receiver is down ({calls[event.id]})")

    relay = Relay(sqlite_store, CallableSink(refuse), RelayConfig(max_attempts=3, **FAST))
    run_until_drained(relay, sqlite_store)
    assert calls == Counter({"ev-00000": 3, "ev-00001": 3})
    assert relay.stats.dead_lettered == 2 and relay.stats.failed == 4

    runner = CliRunner()
    listed = runner.invoke(app, ["events", "dead-letters", "--database", db, "--json"])
    assert listed.exit_code == 0, listed.output
    items = json.loads(listed.stdout)["items"]
    assert [(i["event_id"], i["attempts"], i["last_error"]) for i in items] == [
        ("ev-00000", 3, "RuntimeError: receiver is down (3)"), ("ev-00001", 3, "RuntimeError: receiver is down (3)")]

    again = runner.invoke(app, ["events", "requeue", "ev-00000", "--database", db, "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["items"][0]["status"] == "pending"
    twice = runner.invoke(app, ["events", "requeue", "ev-00000", "--database", db])
    assert twice.exit_code == 3 and "not dead_lettered" in twice.output
    unknown = runner.invoke(app, ["events", "requeue", "nope", "--database", db])
    assert unknown.exit_code == 2
    # several ids: each is tried and reported; the exit code is the first refusal's (break-it trial)
    mixed = runner.invoke(app, ["events", "requeue", "ev-00001", "ev-00000", "nope", "--database", db, "--json"])
    report = json.loads(mixed.stdout)
    assert mixed.exit_code == 3 and [i["event_id"] for i in report["items"]] == ["ev-00001"]
    assert [(r["event_id"], r["exit_code"]) for r in report["refused"]] == [("ev-00000", 3), ("nope", 2)]
    sqlite_store.transact(lambda tx: tx.execute_raw(  # type: ignore[attr-defined]
        "UPDATE host_event_outbox SET status = 'dead_lettered', available_at = created_at "
        "WHERE event_id = 'ev-00001'"))

    seen: list[str] = []
    Relay(sqlite_store, CallableSink(lambda e, o: seen.append(e.id)), RelayConfig(**FAST)).run_once()
    assert seen == ["ev-00000"]
    counts = statuses(sqlite_store)
    assert (counts["published"], counts["dead_lettered"]) == (1, 1)
    shown = runner.invoke(app, ["events", "show", "ev-00000", "--database", db, "--json"])
    assert json.loads(shown.stdout)["outbox"]["status"] == "published"
    summary = runner.invoke(app, ["events", "list", "--database", db, "--json"])
    assert json.loads(summary.stdout)["summary"]["counts"]["dead_lettered"] == 1


def test_cli_refuses_to_requeue_a_probe_space(db: str, sqlite_store: Store) -> None:
    append(sqlite_store, 1, prefix="probe", space="event-append-probe-1234")
    sqlite_store.transact(lambda tx: tx.execute_raw(  # type: ignore[attr-defined]
        "UPDATE host_event_outbox SET status = 'dead_lettered'"))
    result = CliRunner().invoke(app, ["events", "requeue", "probe-00000", "--database", db])
    assert result.exit_code == 3 and "probe space" in result.output


def test_rabbitmq_with_confirms_every_event_arrives_by_message_id(sqlite_store: Store) -> None:
    ids = append(sqlite_store, 200)
    with amqp_exchange() as (exchange, queue):
        assert queue is not None
        sink = AmqpSink(AMQP_URL, exchange=exchange, timeout_seconds=5)
        relay = Relay(sqlite_store, sink, RelayConfig(batch_size=50, **FAST))
        run_until_drained(relay, sqlite_store)
        sink.close()
        received = drain(queue)
    assert set(received) == set(ids) and all(n == 1 for n in received.values())
    assert statuses(sqlite_store)["published"] == 200


def test_rabbitmq_unroutable_is_a_failure_not_a_publication(sqlite_store: Store) -> None:
    append(sqlite_store, 1)
    with amqp_exchange(bind_queue=False) as (exchange, _queue):
        sink = AmqpSink(AMQP_URL, exchange=exchange, timeout_seconds=5)
        relay = Relay(sqlite_store, sink, RelayConfig(max_attempts=2, **FAST))
        run_until_drained(relay, sqlite_store)
        sink.close()
    row = sqlite_store.read(lambda tx: tx.events.get_event_outbox("ev-00000"))
    assert row is not None and row.status == EventOutboxStatus.DEAD_LETTERED
    assert row.last_error is not None and "unroutable" in row.last_error
    assert relay.stats.unavailable == 0  # the broker answered: the event's refusal, never a pause for all (ADR 0109)


def test_many_relays_on_postgres_publish_each_row_once(pg_backend: StoreBackend) -> None:
    stores = [pg_backend.migrated() for _ in range(3)]
    ids = append(stores[0], 300)
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def sink(event: EventRecord, outbox: EventOutboxRecord) -> None:
        with lock:
            seen[event.id] += 1

    relays = [Relay(s, CallableSink(sink), RelayConfig(owner=f"relay-{i}", batch_size=10, **FAST))
              for i, s in enumerate(stores)]
    threads = [threading.Thread(target=r.run) for r in relays]
    for t in threads:
        t.start()
    try:
        wait_until(all_published(stores[0], 300), 30, "every row published")
    finally:
        for r in relays:
            r.stop()
        for t in threads:
            t.join(10)
    # leases never expired here, so no event went out twice; and every relay took a share
    assert seen == Counter(ids)
    assert all(r.stats.published > 0 for r in relays) and sum(r.stats.published for r in relays) == 300


def test_a_stale_relay_writes_nothing_after_its_lease_was_taken_over(sqlite_store: Store) -> None:
    append(sqlite_store, 1)
    takeover: list[Relay] = []
    seen: list[str] = []

    def slow(event: EventRecord, outbox: EventOutboxRecord) -> None:
        # While this relay publishes, its lease expires and a second relay re-claims and publishes the row.
        time.sleep(0.4)
        takeover[0].run_once()

    first = Relay(sqlite_store, CallableSink(slow), RelayConfig(owner="slow", lease_seconds=0.2, **FAST))
    takeover.append(Relay(sqlite_store, CallableSink(lambda e, o: seen.append(e.id)),
                          RelayConfig(owner="quick", **FAST)))
    first.run_once()
    assert seen == ["ev-00000"] and first.stats.lost == 1 and first.stats.published == 0
    row = sqlite_store.read(lambda tx: tx.events.get_event_outbox("ev-00000"))
    assert row is not None and row.status == EventOutboxStatus.PUBLISHED and row.attempts == 2


def _relay_process(db: str, url: str, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "fencepost.cli", "relay", "--database", db, "--sink",
                             f"webhook:{url}", "--lease-seconds", "1", "--timeout", "0.5", "--poll-interval",
                             "0.05", "--batch-size", "10", "--backoff-base", "0.01", *extra],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_relay_sigkilled_mid_run_and_restarted_loses_nothing(db: str, sqlite_store: Store) -> None:
    ids = append(sqlite_store, 150)
    with receiver(delay=0.005) as rx:
        first = _relay_process(db, rx.url, "--relay-id", "doomed")
        wait_until(lambda: len(rx.requests) >= 40, 20, "the first relay to publish some")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_with = statuses(sqlite_store)
        assert killed_with["published"] < 150  # killed mid-run, not after
        second = _relay_process(db, rx.url, "--relay-id", "survivor")
        try:
            wait_until(all_published(sqlite_store, 150), 30, "the restarted relay to publish the rest")
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(10)
    assert set(rx.accepted_ids) == set(ids)  # at least once each
    assert sum(rx.accepted_ids.values()) >= 150
    assert statuses(sqlite_store) == Counter({"published": 150})


def test_sigterm_stops_cleanly_and_gives_claimed_rows_back(db: str, sqlite_store: Store) -> None:
    append(sqlite_store, 60)
    with receiver(delay=0.05) as rx:
        proc = _relay_process(db, rx.url, "--batch-size", "50", "--lease-seconds", "30", "--timeout", "5")
        wait_until(lambda: len(rx.requests) >= 3, 20, "the relay to start publishing")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err.decode()
    counts = statuses(sqlite_store)
    assert "processing" not in counts, counts  # released at once, not left to expire
    assert counts["published"] + counts["pending"] == 60 and counts["pending"] > 0
    assert b"released" in err


def test_a_long_batch_keeps_its_leases_by_heartbeat(sqlite_store: Store) -> None:
    append(sqlite_store, 3)
    rival_saw: list[str] = []
    rival = Relay(sqlite_store, CallableSink(lambda e, o: rival_saw.append(e.id)), RelayConfig(owner="rival", **FAST))

    def slow(event: EventRecord, outbox: EventOutboxRecord) -> None:
        # The batch outlasts one lease (3 x 0.25 s > 0.6 s); a rival tries to take rows over after each publish.
        time.sleep(0.25)
        rival.run_once()

    relay = Relay(sqlite_store, CallableSink(slow), RelayConfig(owner="slow", lease_seconds=0.6, **FAST))
    relay.run_once()
    assert rival_saw == [] and relay.stats.published == 3 and relay.stats.lost == 0


def test_relay_cli_refuses_bad_input_and_its_help_explains(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    monkeypatch.delenv("FENCEPOST_TEST_UNSET_SECRET", raising=False)
    cases = [(["--sink", "ftp://x"], "--sink must be webhook"),
             (["--sink", "webhook:ftp://x"], "must be http or https"),
             (["--sink", "webhook:http://127.0.0.1:9/e", "--secret-env", "FENCEPOST_TEST_UNSET_SECRET"],
              "unset or empty"),
             (["--sink", "amqp://guest:hunter2@127.0.0.1/", "--secret-env", "X"], "authenticates with its URL"),
             (["--sink", "webhook:http://127.0.0.1:9/e", "--timeout", "40"], "at most half"),
             (["--sink", "webhook:http://127.0.0.1:9/e", "--max-attempts", "0"], "max_attempts"),
             (["--sink", "amqp://guest:guest@127.0.0.1:5672/%2F", "--exchange", "fp-no-such-exchange"],
              "does not exist at the broker"),  # refused at start, not after dead-lettering every row
             (["--sink", "amqp://guest:wrong-password@127.0.0.1:5672/%2F"], "refused these credentials")]
    for args, message in cases:
        result = runner.invoke(app, ["relay", "--database", db, *args])
        assert result.exit_code == 2 and message in result.output, (args, result.output)
        assert "hunter2" not in result.output
    helped = runner.invoke(app, ["relay", "--help"], env={"COLUMNS": "200"})
    assert helped.exit_code == 0
    for phrase in ("at least once", "Fencepost-Event-Id", "publisher confirms", "dead-letters", "SIGTERM"):
        assert phrase in helped.output, phrase
    events_help = runner.invoke(app, ["events", "--help"], env={"COLUMNS": "200"})
    assert all(word in events_help.output for word in ("list", "show", "requeue", "dead-letters", "probe"))


def test_a_row_whose_leases_kept_expiring_is_dead_lettered_without_another_publish(sqlite_store: Store) -> None:
    append(sqlite_store, 1)
    for _ in range(2):  # two relays died mid-publish: their claims expired unmarked
        assert sqlite_store.transact(lambda tx: tx.events.claim_event_outbox(owner="dead", limit=1,
                                                                             lease_seconds=0.05))
        time.sleep(0.1)
    calls: list[str] = []
    relay = Relay(sqlite_store, CallableSink(lambda e, o: calls.append(e.id)), RelayConfig(max_attempts=2, **FAST))
    assert relay.run_once() == 1
    row = sqlite_store.read(lambda tx: tx.events.get_event_outbox("ev-00000"))
    assert calls == [] and row is not None and row.status == EventOutboxStatus.DEAD_LETTERED
    assert row.attempts == 3 and row.last_error is not None and "attempt budget (2) spent" in row.last_error


def test_a_webhook_that_trickles_its_answer_fails_within_the_timeout(sqlite_store: Store) -> None:
    """The webhook's timeout bounds the whole request: a receiver that answers 200 one byte at a time past it
    fails the publish (break-it trial: per-read timeouts let one publish outlive the relay's lease)."""
    import http.server
    import socketserver
    import threading

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "20")
            self.end_headers()
            for _ in range(20):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.1)

        def log_message(self, *args: object) -> None:
            return None

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        [event_id] = append(sqlite_store, 1)
        event = sqlite_store.read(lambda tx: tx.events.get_event(event_id))
        outbox = sqlite_store.read(lambda tx: tx.events.get_event_outbox(event_id))
        sink = WebhookSink(f"http://127.0.0.1:{server.server_address[1]}/", timeout_seconds=0.6)
        started = time.monotonic()
        with pytest.raises(PublishFailed, match=r"within 0\.6 s"):
            sink.publish(event, outbox)
        assert time.monotonic() - started < 1.5
        sink.close()
    finally:
        server.shutdown()
        server.server_close()


def test_requeue_all_sends_every_dead_letter_again_after_an_outage(db: str, sqlite_store: Store) -> None:
    """A new-user trial: a wrong routing key dead-lettered the whole backlog, and `events requeue` took one id at a
    time. --all requeues every dead letter (each its own transaction) and reports a count; ids and --all together,
    or neither, is a usage error."""
    append(sqlite_store, 5)
    relay = Relay(sqlite_store, CallableSink(lambda e, o: (_ for _ in ()).throw(RuntimeError("no route"))),
                  RelayConfig(max_attempts=1, **FAST))
    run_until_drained(relay, sqlite_store)
    assert statuses(sqlite_store) == {"dead_lettered": 5}
    runner = CliRunner()
    both = runner.invoke(app, ["events", "requeue", "ev-00000", "--all", "--database", db])
    neither = runner.invoke(app, ["events", "requeue", "--database", db])
    assert both.exit_code == neither.exit_code == 2, (both.output, neither.output)
    done = runner.invoke(app, ["events", "requeue", "--all", "--database", db])
    assert done.exit_code == 0 and "requeued 5 dead letter(s): pending" in done.output, done.output
    assert statuses(sqlite_store) == {"pending": 5}
    again = runner.invoke(app, ["events", "requeue", "--all", "--database", db, "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout) == {"items": [], "refused": []}
    seen: list[str] = []
    Relay(sqlite_store, CallableSink(lambda e, o: seen.append(e.id)), RelayConfig(**FAST)).run_once()
    assert sorted(seen) == [f"ev-0000{i}" for i in range(5)]


@pytest.mark.parametrize("unavailable", [True, False], ids=["sink-unreachable", "each-event-refused"])
def test_an_outage_longer_than_the_budget_dead_letters_nothing_when_the_sink_cannot_be_reached(
        sqlite_store: Store, unavailable: bool) -> None:
    """ADR 0109 (a broker restart longer than the budget's backoff dead-lettered the whole backlog). A sink that
    cannot be reached for 1 s, against a budget of 2 attempts and a backoff capped at 0.2 s: the batch goes back
    with its attempts and the relay waits, so every event is published, each on its first counted attempt, once the
    sink is back. The same outage answered as per-event refusals (the control) spends every event's budget."""
    append(sqlite_store, 20)
    up_at = time.monotonic() + 1.0
    calls: list[str] = []

    def sink(event: EventRecord, outbox: EventOutboxRecord) -> None:
        calls.append(event.id)
        if time.monotonic() < up_at:
            raise PublishFailed("connection refused", sink_unavailable=unavailable)

    relay = Relay(sqlite_store, CallableSink(sink), RelayConfig(
        max_attempts=2, batch_size=20, idle_seconds=0.01, backoff_base_seconds=0.05, backoff_max_seconds=0.2),
        rng=random.Random(7))
    thread = threading.Thread(target=relay.run, kwargs={"until": lambda: time.monotonic() > up_at + 3})
    thread.start()
    thread.join(30)
    counts = statuses(sqlite_store)
    if unavailable:
        assert counts == {"published": 20}, counts
        rows = sqlite_store.read(lambda tx: tx.events.list_event_outbox(limit=100))
        assert {r.attempts for r in rows} == {1}, [(r.event_id, r.attempts) for r in rows]  # the outage spent none
        assert relay.stats.unavailable >= 3 and relay.stats.deferred >= 20 and relay.stats.released == 0
        assert len(calls) < 20 + 20, calls  # paced by the pause, not a call per event per cycle
    else:
        assert counts.get("dead_lettered", 0) == 20, counts  # the control: every budget spent


def test_events_a_sink_refuses_never_hold_back_the_others(sqlite_store: Store) -> None:
    """A trial of ADR 0109's first form: a few events answered 503 (or unroutable, with routing by destination)
    paused the relay for all, and a steady stream never caught up. An answer is the event's refusal: the others
    are published in the same pass, the refused ones retried and in time dead-lettered."""
    append(sqlite_store, 6, prefix="refused")
    append(sqlite_store, 20, prefix="fine", start=100)

    def sink(event: EventRecord, outbox: EventOutboxRecord) -> None:
        if event.id.startswith("refused"):
            raise PublishFailed("webhook answered HTTP 503: busy")

    relay = Relay(sqlite_store, CallableSink(sink), RelayConfig(max_attempts=2, batch_size=50, **FAST))
    assert relay.run_once() == 26
    counts = statuses(sqlite_store)
    assert counts == {"published": 20, "retry_pending": 6}, counts  # one pass: the 20 went out at once
    run_until_drained(relay, sqlite_store)
    assert statuses(sqlite_store) == {"published": 20, "dead_lettered": 6}
    assert relay.stats.unavailable == 0


@pytest.mark.parametrize("status", [503, 502, 504, 429, 500, 400, 404])
def test_a_webhook_answer_is_the_events_refusal_whatever_its_status(sqlite_store: Store, status: int) -> None:
    """ADR 0109: a receiver that answered was reached; only a connection that could not be made pauses the relay
    (a 503 for a few events must not hold back the others)."""
    append(sqlite_store, 1)
    event = sqlite_store.read(lambda tx: tx.events.get_event("ev-00000"))
    row = sqlite_store.read(lambda tx: tx.events.get_event_outbox("ev-00000"))
    assert event is not None and row is not None
    with receiver(fail_first=1, refuse_status=status) as got:
        sink = WebhookSink(got.url, timeout_seconds=5)
        try:
            with pytest.raises(PublishFailed) as refused:
                sink.publish(event, row)
            assert refused.value.sink_unavailable is False and f"HTTP {status}" in str(refused.value)
            sink.publish(event, row)  # the second answer is 200
        finally:
            sink.close()


@pytest.mark.parametrize("scheme", ["webhook", "amqp"])
def test_a_sink_nobody_listens_on_is_unreachable(sqlite_store: Store, scheme: str) -> None:
    """ADR 0109: a connection that cannot be made (here a port nothing listens on) pauses the relay."""
    append(sqlite_store, 1)
    event = sqlite_store.read(lambda tx: tx.events.get_event("ev-00000"))
    row = sqlite_store.read(lambda tx: tx.events.get_event_outbox("ev-00000"))
    assert event is not None and row is not None
    import socket as sockets

    with sockets.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sink: WebhookSink | AmqpSink = (
        WebhookSink(f"http://127.0.0.1:{port}/events", timeout_seconds=5) if scheme == "webhook"
        else AmqpSink(f"amqp://guest:guest@127.0.0.1:{port}/%2F", exchange="", timeout_seconds=2))
    try:
        with pytest.raises(PublishFailed) as refused:
            sink.publish(event, row)
        assert refused.value.sink_unavailable is True, str(refused.value)
    finally:
        sink.close()


def test_a_broker_that_goes_silent_fails_the_publish_within_the_timeout(sqlite_store: Store) -> None:
    """ADR 0110: a broker that keeps the connection open and answers nothing (here a proxy that stops forwarding)
    no longer holds a publish, and the relay's claimed rows, forever: the wait for the confirm ends after the
    sink's timeout as an unreachable sink (no attempt spent), and the next publish reconnects."""
    append(sqlite_store, 3)
    rows = [sqlite_store.read(lambda tx, i=i: (tx.events.get_event(f"ev-{i:05d}"),
                                               tx.events.get_event_outbox(f"ev-{i:05d}"))) for i in range(3)]
    with amqp_exchange() as (exchange, queue), freezing_amqp_proxy() as proxy:
        assert queue is not None
        sink = AmqpSink(proxy.url, exchange=exchange, timeout_seconds=1.5)
        try:
            event, row = rows[0]
            assert event is not None and row is not None
            sink.publish(event, row)  # through the proxy while it forwards
            proxy.freeze()
            event, row = rows[1]
            assert event is not None and row is not None
            outcome: list[BaseException | None] = []

            def publish_silent() -> None:
                try:
                    sink.publish(event, row)
                    outcome.append(None)
                except BaseException as error:  # handed to the test thread
                    outcome.append(error)

            started = time.monotonic()
            waiting = threading.Thread(target=publish_silent, daemon=True)
            waiting.start()
            waiting.join(timeout=10)
            waited = time.monotonic() - started
            assert not waiting.is_alive(), "the publish still waits for a confirm the broker never sends"
            assert len(outcome) == 1 and isinstance(outcome[0], PublishFailed), outcome
            assert outcome[0].sink_unavailable is True and "did not confirm within 1.5 s" in str(outcome[0])
            assert 1.4 <= waited < 5.0, waited
            # still silent: a new connection's handshake is bounded by the same timeout
            started = time.monotonic()
            with pytest.raises(PublishFailed) as handshake:
                sink.publish(event, row)
            assert handshake.value.sink_unavailable is True and time.monotonic() - started < 5.0
            starting = AmqpSink(proxy.url, exchange=exchange, timeout_seconds=1.5)
            assert starting.startup_problem() is None  # not reached now: the relay starts and pauses
            starting.close()
            proxy.thaw()
            event, row = rows[2]
            assert event is not None and row is not None
            sink.publish(event, row)  # a new connection
        finally:
            sink.close()
        received = drain(queue)
    assert received["ev-00000"] == 1 and received["ev-00002"] == 1
