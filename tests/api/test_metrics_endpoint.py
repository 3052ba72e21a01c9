"""``GET /metrics`` (host-spec S5, W1; ADR 0047): the Prometheus text format of the host's counters and step
histogram, fed by the same telemetry as every other sink, after real runs against SimPay on loopback, parsed
with ``prometheus_client``'s own text parser; open on loopback, behind the token otherwise; and ``fencepost serve``
serving it as a process whose in-process worker ran an invocation."""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from fencepost.api import create_app
from fencepost.core.statuses import InvocationStatus
from fencepost.demo.payments import SIMPAY_URL_ENV, build_host
from fencepost.demo.simpay import SimPay
from fencepost.host import Inline
from fencepost.host.prometheus import PrometheusTelemetry
from fencepost.store import open_store
from fencepost.store.base import Store
from helpers.processes import run_cli, start_piped, subprocess_env

TOKEN = "metrics-test-token-0123456789"


@pytest.fixture
def simpay(tmp_path: Path) -> Iterator[SimPay]:
    with SimPay(tmp_path / "simpay.db", slow_seconds=0.1) as provider:
        yield provider


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) -> value of every sample of an exposition text (raises on invalid text)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def submit(host: Any, key: str, mode: str = "ok") -> Any:
    return host.submit("demo.charge", {"order_id": key, "amount": 700, "mode": mode}, actor="u1",
                       idempotency_key=key, mode=Inline())


def test_metrics_after_a_real_run(store: Store, simpay: SimPay) -> None:
    """Two charges SimPay accepts and one it declines: the verdict counters, the step histogram by outcome and the
    declared-but-unmoved counters, as valid exposition text."""
    metrics = PrometheusTelemetry()
    host = build_host(store, simpay.url)
    host.add_telemetry(metrics)
    assert [submit(host, k, m).status for k, m in (("a", "ok"), ("b", "ok"), ("c", "decline"))] == [
        InvocationStatus.SUCCEEDED, InvocationStatus.SUCCEEDED, InvocationStatus.FAILED]
    client = TestClient(create_app(store, api_token=TOKEN, host=host, metrics=metrics, ui=False))
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = samples(response.text)
    assert found[("fencepost_host_invocation_verdicts_total", frozenset({("status", "succeeded")}))] == 2
    assert found[("fencepost_host_invocation_verdicts_total", frozenset({("status", "failed")}))] == 1
    step = {"adapter_type": "http", "vendor": "simpay", "operation": "charge"}
    assert found[("fencepost_host_adapter_step_duration_seconds_count",
                  frozenset({**step, "outcome": "succeeded"}.items()))] == 2
    assert found[("fencepost_host_adapter_step_duration_seconds_count",
                  frozenset({**step, "outcome": "failed"}.items()))] == 1
    assert found[("fencepost_host_invocation_budget_exhausted_total", frozenset())] == 0
    assert found[("fencepost_host_completion_overdue_swept_total", frozenset())] == 0
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert {"fencepost_host_invocation_reconciliations", "fencepost_host_invocation_adapter_evidence_refused",
            "fencepost_host_invocation_adapter_evidence_failed"} <= names
    submit(host, "a")  # a replay runs nothing and counts nothing
    again = samples(client.get("/metrics").text)
    assert again[("fencepost_host_invocation_verdicts_total", frozenset({("status", "succeeded")}))] == 2


def test_metrics_need_the_token_beyond_loopback(store: Store) -> None:
    """Like every read: open when reads are open, 401 without the bearer token otherwise; absent without a sink."""
    metrics = PrometheusTelemetry()
    closed = TestClient(create_app(store, api_token=TOKEN, open_reads=False, metrics=metrics, ui=False))
    assert closed.get("/metrics").status_code == 401
    assert closed.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert TestClient(create_app(store, api_token=TOKEN, ui=False)).get("/metrics").status_code == 404


def test_serve_exposes_metrics_of_its_workers(tmp_path: Path, simpay: SimPay) -> None:
    """``fencepost serve --app ...``: its in-process worker runs a dispatched charge against SimPay and ``GET
    /metrics`` of the same process counts its verdict."""
    database = f"sqlite:///{tmp_path / 'control.db'}"
    assert run_cli(["migrate", "--database", database]).returncode == 0
    store = open_store(database)
    try:
        queued = build_host(store, simpay.url).submit(
            "demo.charge", {"order_id": "served", "amount": 500}, actor="u1", idempotency_key="served")
    finally:
        store.close()
    proc = start_piped(["serve", "--database", database, "--port", "0", "--app", "fencepost.demo.payments:demo_host",
                        "--work-dir", str(tmp_path / "work"), "--api-token", TOKEN, "--lease-seconds", "5",
                        "--completion-secret", "simpay=METRICS_TEST_SECRET"],
                       stderr_path=tmp_path / "serve.err",
                       env=subprocess_env(**{SIMPAY_URL_ENV: simpay.url, "METRICS_TEST_SECRET": "s" * 32}))
    try:
        address = proc.next_line(timeout=60)
        url = address.split("serving on ", 1)[1].split(" ", 1)[0].rstrip("/")
        deadline = time.monotonic() + 30
        key = ("fencepost_host_invocation_verdicts_total", frozenset({("status", "succeeded")}))
        while True:
            try:
                with urllib.request.urlopen(url + "/metrics", timeout=2) as response:
                    found = samples(response.read().decode())
                if found.get(key) == 1:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.err").read_text()
            time.sleep(0.2)
        assert proc.stop(signal.SIGTERM, timeout=60) == 0
    finally:
        proc.stop(signal.SIGKILL)
    store = open_store(database)
    try:
        assert store.read(lambda tx: tx.host.get_invocation(queued.id)).status is InvocationStatus.SUCCEEDED
    finally:
        store.close()
