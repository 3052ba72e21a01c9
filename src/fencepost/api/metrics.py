"""``GET /metrics``: the action host's counters and histograms in the Prometheus text format (host-spec S5, W1;
ADR 0047). Mounted by ``create_app(..., metrics=PrometheusTelemetry())``, which ``fencepost serve`` does; open like
every read on loopback, and behind the API token (``Authorization: Bearer``) otherwise."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from fencepost.api.routes import read_access
from fencepost.host.prometheus import CONTENT_TYPE, PrometheusTelemetry

metrics = APIRouter(tags=["metrics"])


@metrics.get("/metrics", dependencies=[Depends(read_access)], summary="Host metrics for Prometheus",
             response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text exposition format"}})
def scrape(request: Request) -> Response:
    """The counters of invocation verdicts, reconciliations by kind, evidence refusals, overdue sweeps and budget
    exhaustions, and the adapter step latency histogram by outcome."""
    sink: PrometheusTelemetry = request.app.state.metrics
    return Response(content=sink.exposition(), media_type=CONTENT_TYPE)
