"""Q9 on the surfaces that landed after the first leak test (host-spec Q9, S, W1, W2, §2.6, §2.7; ADR 0042): with
the five hooks replacing each planted secret, none appears in any GET route of the API app (enumerated from its
OpenAPI document and ``app.routes``, so a new route is searched without editing this file), the operator pages
and the exact JSON ``app.js`` polls for them, the spans and metrics the OpenTelemetry SDK receives from
``OtelTelemetry``, the Prometheus ``/metrics`` text, ``fencepost host status|queue|show|list|approvals``, the
event outbox rows and the bodies a relay delivers.

Every search but ``host approvals`` (no action here asks for approval) has a positive control: the surface must
carry the scenario's own ids or names (an empty or unread surface fails), so the absence of a secret means it was
redacted, not that nothing was looked at.

Decisions recorded here (no ADR): the governance records (policy and approval evidence) are not searched with
planted secrets, because host-spec P5 says the host does not redact them (the application owns them); and the
application's own domain events are left out for the same reason (Q7, ``test_domain_events_not_redacted``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import typer
from click.testing import CliRunner
from fastapi.testclient import TestClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.routing import Mount, Route

from fencepost.api import create_app
from fencepost.api.signatures import sign
from fencepost.cli.app import app as cli
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.targets import TargetService
from fencepost.events.relay import Relay, RelayConfig, envelope_bytes
from fencepost.events.sinks import CallableSink
from fencepost.host import Host, HostConfig, Inline
from fencepost.host.http_adapter import HttpAdapter, HttpOperation, HttpTimeouts
from fencepost.host.otel import OtelTelemetry
from fencepost.host.prometheus import PrometheusTelemetry
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.base import Store
from helpers.loopback_http import Loopback, loopback_server
from helpers.store_backends import StoreBackend, schema_url
from host.kit import run_worker
from host.test_redaction import SECRETS, VENDOR, WEBHOOK_SECRET, Scrub, _provider, action, card

ROOT = Path(__file__).resolve().parents[2]
APP_JS = ROOT / "src" / "fencepost" / "ui" / "static" / "app.js"
PAGES = ("/", "/invocations", "/invocations/{invocation_id}", "/reconciliation-queue")
CLOCK = 1_767_225_600
# The deliveries of one package (page and API) list only fencepost.deliver invocations, whose params are a
# package's lock and a target (no user params, nothing a redaction hook sees); a package name fills them only
# once a package is published, which this scenario does not do. The lists that lead to them (/packages,
# /v1/packages, /targets, /v1/targets) are searched, and so is one real target's /v1/targets/{name}.
DELIVERY_OF_ONE_PACKAGE = {"/packages/{name}/deliveries", "/v1/packages/{name}/deliveries"}
# The same for one workflow Run's page and its JSON (issue 18): its steps' invocations are fencepost.workflow.task
# ones, whose params are the Run's and step's ids and the task digest (no user params); a Run id exists only once
# a package's workflow is admitted, which this scenario does not do. The lists (/workflows, /workflows.json) are
# searched, and so is /v1/workflow-runs.
ONE_WORKFLOW_RUN = {"/workflows/{workflow_run_id}", "/workflows/{workflow_run_id}.json",
                    "/v1/workflow-runs/{runId}"}


class Otel:
    """The OpenTelemetry SDK's in-memory span exporter and metric reader behind one ``OtelTelemetry``."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.sink = OtelTelemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def spans_text(self) -> str:
        """Every finished span as JSON (name, attributes, events, status), one per line."""
        return "\n".join(span.to_json(indent=None) for span in self.exporter.get_finished_spans())

    def metrics_text(self) -> str:
        """Everything the reader collected (names, descriptions, label sets, values) as JSON."""
        data = self.reader.get_metrics_data()
        return data.to_json(indent=None) if data is not None else ""


@pytest.fixture
def provider() -> Iterator[Loopback]:
    """The first Q9 test's payment provider on loopback (its answers quote the planted secrets)."""
    with loopback_server(_provider) as server:
        yield server


@pytest.fixture
def otel() -> Iterator[Otel]:
    sdk = Otel()
    yield sdk
    sdk.meter_provider.shutdown()
    sdk.tracer_provider.shutdown()


def _scenario(store: Store, backend: StoreBackend, provider: Loopback, otel: Otel,
              metrics: PrometheusTelemetry) -> tuple[Host, dict[str, str]]:
    """The first Q9 test's invocations (a worker's success, a raising handler, a declined charge, two payouts)
    plus one the handler sends to an operator with a secret in its reason (the reconciliation queue's entry).
    Returns the host (OpenTelemetry and Prometheus sinks attached) and the invocation ids by name."""
    operations = {"charge": HttpOperation("/v1/charges"), "payout": HttpOperation("/v1/payouts")}
    timeouts = HttpTimeouts(connect=2, write=2, read=5, pool=2)
    charge = action(adapter="http", operation="charge")
    payout = action(adapter="http", operation="payout", action_id="shop.payout", deadline=timedelta(hours=1))
    http = HttpAdapter(provider.url, vendor=VENDOR, operations=operations, timeouts=timeouts)
    host = Host(store, actions=[charge, payout], adapters=[http], redaction=Scrub().redaction(),
                config=HostConfig(lease_seconds=backend.long_lease, params_digest_key=b"q9-surfaces-digest-key-32b"))
    host.add_telemetry(otel.sink)
    host.add_telemetry(metrics)
    with http:
        ok = host.submit("shop.charge", card("o-ok"), actor="u1", idempotency_key="ok")
        assert run_worker(host, backend) == 1
        ids = {"ok": ok.id}
        for name, params in (("boom", card("boom")), ("declined", {**card("o-402"), "amount_cents": 402}),
                             ("decide", card("decide"))):
            ids[name] = host.submit("shop.charge", params, actor="u1", idempotency_key=name, mode=Inline()).id
        for name in ("p1", "p2"):
            ids[name] = host.submit("shop.payout", card(name), actor="u1", idempotency_key=name, mode=Inline()).id
    assert host.get(ids["decide"]).status is InvocationStatus.RECONCILIATION_REQUIRED
    return host, ids


def _complete(client: TestClient) -> list[str]:
    """Settle both payouts through the signed completion route: one with a secret result, one failed with a
    secret result and error text. Returns the two answers' bodies."""
    answers = []
    for body in ({"external_reference": "po_p1", "outcome": "completed", "result": {"receipt": SECRETS["result"]}},
                 {"external_reference": "po_p2", "outcome": "failed", "result": {"trace": SECRETS["result"]},
                  "error": f"bank said {SECRETS['completion_error']}"}):
        data = json.dumps(body).encode()
        answer = client.post(f"/v1/host/completions/{VENDOR}", content=data, headers={
            "Content-Type": "application/json", "Fencepost-Signature": sign(WEBHOOK_SECRET, CLOCK, data)})
        assert answer.status_code == 200, answer.text
        answers.append(answer.text)
    return answers


def _get_paths(app: Any) -> set[str]:
    """Every path of the app that answers GET: the OpenAPI document's (the JSON API, ``/metrics``) and the
    routes left out of it (the pages, ``/openapi.json``). What could hide a GET route fails the test: a mount
    other than ``/static`` (the pages' own files, no data), or an included router with a route out of the
    OpenAPI document."""
    paths = {path for path, operations in app.openapi()["paths"].items() if "get" in operations}
    for route in app.routes:
        if isinstance(route, Mount):
            assert route.path == "/static", f"a mounted app at {route.path} is not searched: add it here"
        elif isinstance(route, Route):
            if "GET" in (route.methods or ()):
                paths.add(route.path)
        else:  # FastAPI >= 0.150 keeps an included router as one entry
            router = getattr(route, "original_router", None)
            assert router is not None, f"a route of kind {type(route).__name__} is not searched: add it here"
            hidden = [r.path for r in router.routes if not getattr(r, "include_in_schema", True)]
            assert not hidden, f"routes out of the OpenAPI document are not searched: {hidden}"
    return paths


def _urls(path: str, values: dict[str, list[str]]) -> list[str]:
    """The path once per value of its path parameter (every combination for two); a parameter no scenario id
    fills fails the test rather than leaving the route unread."""
    names = re.findall(r"\{(\w+)(?::\w+)?\}", path)
    missing = [n for n in names if n not in values]
    assert not missing, f"GET {path}: no scenario value for {missing}; add one so the route is searched"
    urls = [path]
    for name in names:
        urls = [u.replace("{" + name + "}", v) for u in urls for v in values[name]]
    return urls


def _polled(ids: dict[str, str]) -> list[str]:
    """The JSON URLs ``app.js`` polls for the pages, with the query strings it builds. Each is checked to be
    named in ``app.js`` so that this list follows the script."""
    script = APP_JS.read_text(encoding="utf-8")
    for literal in ('"/v1/events/outbox/summary"', '"/v1/events/outbox?status=dead_lettered&limit="', '"/workers"',
                    '"/v1/host"', '"/invocations?"', '"/invocations/"', '"/reconciliation-queue"',
                    'limit: "50"'):
        assert literal in script, f"app.js no longer polls {literal}: update this list"
    host = "/v1/host"
    return ["/v1/events/outbox/summary", "/v1/events/outbox?status=dead_lettered&limit=20", "/workers",
            f"{host}/invocations?limit=50", *(f"{host}/invocations?limit=50&status={s}" for s in
                                              ("succeeded", "failed", "reconciliation_required", "running")),
            f"{host}/invocations?limit=50&action_id=shop.payout",
            *(f"{host}/invocations/{i}" for i in ids.values()), f"{host}/reconciliation-queue"]


def _assert_clean(places: dict[str, str]) -> None:
    """Fails naming every (secret, place) pair where a planted secret was found, not only the first."""
    leaks = [f"the {name} secret survives in {place}" for place, text in places.items()
             for name, secret in SECRETS.items() if secret in text]
    assert not leaks, "\n".join(leaks)


def test_no_secret_on_any_surface(store: Store, backend: StoreBackend, provider: Loopback, otel: Otel,
                                  caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """Q9 (every surface): after the redaction scenario, no planted secret is in any GET route's answer (each
    route read with the scenario's real ids and answering 200), the four pages' HTML and the JSON they poll,
    the OpenTelemetry spans and metrics, ``/metrics``, the host CLI's outputs, the answers of the submit,
    resolve and completion routes, the outbox rows or a relay's delivered bodies; each surface carries the
    scenario's ids or names (it was really read)."""
    caplog.set_level(logging.DEBUG)
    metrics = PrometheusTelemetry()
    host, ids = _scenario(store, backend, provider, otel, metrics)
    service = RehearsalService(store)
    run_id = service.create_run(ROOT / "examples" / "inventory").id
    attempt_id = service.enqueue_attempt(run_id).id
    app = create_app(store, api_token="t" * 32, host=host, on_work=lambda: None, metrics=metrics,
                     completion_providers={VENDOR: WEBHOOK_SECRET}, signature_clock=lambda: CLOCK)
    places: dict[str, str] = {}
    with TestClient(app, raise_server_exceptions=False) as client:
        places["POST /v1/host/completions (both answers)"] = "\n".join(_complete(client))
        assert [host.get(ids[n]).status for n in ("p1", "p2")] == [InvocationStatus.SUCCEEDED,
                                                                  InvocationStatus.FAILED]
        values = {"invocationId": list(ids.values()), "invocation_id": list(ids.values()),
                  "rehearsalId": [run_id], "run_id": [run_id], "attemptId": [attempt_id],
                  "name": [TargetService(store).add("tenant-a", f"sqlite:///{tmp_path / 'tenant-a.db'}").name]}
        paths = _get_paths(app)
        assert {"/v1/host/invocations", "/v1/host/invocations/{invocationId}", "/v1/host/reconciliation-queue",
                "/metrics", "/health/ready", *PAGES} <= paths
        spaces = client.get("/v1/events/spaces").json()["items"]
        assert spaces, "the scenario appended no event"
        for path in sorted(paths - DELIVERY_OF_ONE_PACKAGE - ONE_WORKFLOW_RUN):
            # the event log is read one space at a time: every space the scenario wrote
            urls = ([f"/v1/events?tenant={quote(e['tenant_id'])}&space={quote(e['space_id'])}&limit=1000"
                     for e in spaces] if path == "/v1/events" else _urls(path, values))
            for url in urls:
                answer = client.get(url)
                assert answer.status_code == 200, (url, answer.status_code, answer.text[:300])
                places[f"GET {url}"] = answer.text
        for url in _polled(ids):
            answer = client.get(url)
            assert answer.status_code == 200, (url, answer.text[:300])
            places[f"GET {url} (polled by app.js)"] = answer.text
    # positive controls: the host's routes and pages show the scenario, /metrics counted it
    listing = places["GET /v1/host/invocations"]
    assert all(i in listing for i in ids.values())
    event_log = "".join(text for place, text in places.items() if place.startswith("GET /v1/events?"))
    assert all(i in event_log for i in ids.values()), "the event log answered without the scenario's events"
    assert ids["decide"] in places["GET /v1/host/reconciliation-queue"]
    assert all(f'data-invocation-id="{i}"' in places[f"GET /invocations/{i}"] for i in ids.values())
    assert re.search(r'fencepost_host_invocation_verdicts_total\{status="failed"\} 3', places["GET /metrics"])

    spans, otel_metrics = otel.spans_text(), otel.metrics_text()
    assert all(i in spans for i in ids.values()) and "host.step" in spans
    assert "fencepost.host.invocation.verdicts" in otel_metrics and "reconciliation_required" in otel_metrics
    places["OpenTelemetry spans"] = spans
    places["OpenTelemetry metrics"] = otel_metrics

    url = schema_url(backend.schema) if backend.is_postgres else backend.url
    runner, command_line = CliRunner(), typer.main.get_command(cli)  # built once: 0.15 s each otherwise
    commands = [["host", "status", "--json"], ["host", "status"], ["host", "queue", "--json"], ["host", "queue"],
                ["host", "list", "--json"], ["host", "list"], ["host", "approvals", "--json"],
                ["host", "approvals"], ["events", "list", "--json"],
                *(["host", "show", i, *extra] for i in ids.values() for extra in ([], ["--json"]))]
    for command in commands:
        result = runner.invoke(command_line, [*command, "--database", url])
        assert result.exit_code == 0, (command, result.output)
        places["fencepost " + " ".join(command)] = result.output
    assert json.loads(places["fencepost host status --json"])["open_reconciliations"] >= 1
    assert ids["decide"] in places["fencepost host queue"]

    # the mutating routes' answers, last: the resolution empties the queue searched above
    with TestClient(app, raise_server_exceptions=False) as client:
        auth = {"Authorization": "Bearer " + "t" * 32}
        answer = client.post("/v1/host/invocations", headers={**auth, "Idempotency-Key": "api"},
                             json={"action_id": "shop.charge", "params": card("o-api"), "actor": "u1"})
        assert answer.status_code == 202 and "card_token" in answer.json()["params"], answer.text
        places["POST /v1/host/invocations"] = answer.text
        answer = client.post(f"/v1/host/invocations/{ids['decide']}/resolve", headers=auth,
                             json={"outcome": "failed", "operator": "ops:alice", "note": "nothing at the vault"})
        assert answer.status_code == 200 and answer.json()["status"] == "failed", answer.text
        places["POST .../resolve"] = answer.text
        answer = client.get(f"/v1/host/invocations/{ids['decide']}")
        assert answer.status_code == 200 and answer.json()["resolution"] is not None, answer.text
        places["GET /v1/host/invocations/{decide} after its resolution"] = answer.text

    rows = store.read(lambda tx: tx.events.list_events(tenant_id="default", space_id="default"))
    assert {e.type for e in rows} >= {"AdapterInvocationSucceeded", "ExternalOperationCompleted"}
    places["event payloads"] = json.dumps([e.payload for e in rows])
    delivered: list[bytes] = []
    relay = Relay(store, CallableSink(lambda event, outbox: delivered.append(envelope_bytes(event, outbox))),
                  RelayConfig(idle_seconds=0.01, batch_size=200))
    while relay.run_once():
        pass
    assert len(delivered) == len(rows) and all(i.encode() in b"".join(delivered) for i in ids.values())
    places["relay deliveries"] = b"\n".join(delivered).decode()
    places["logs"] = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert all(i in places["logs"] for i in ids.values())  # the default LogTelemetry sink's records
    _assert_clean(places)
