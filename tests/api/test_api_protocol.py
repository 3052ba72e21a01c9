"""HTTP-level behaviour every path shares: no interactive docs (the OpenAPI document is the reference), a 405
names the path's methods in ``Allow``, and the host guard answers with the same problem+json as everything else."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.conftest import TOKEN, Api, assert_problem
from fencepost.api import create_app
from fencepost.store import open_store


def test_no_interactive_docs_only_the_openapi_document(api: Api) -> None:
    # Swagger UI and ReDoc load assets from a CDN and run inline script: the CSP blocks both (and users may be
    # offline), so they are not served; /openapi.json works with any OpenAPI viewer.
    for path in ("/docs", "/docs/oauth2-redirect", "/redoc"):
        assert_problem(api.client.get(path), 404, "not-found")
    response = api.client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("DELETE", "/delivery-rehearsals/run_x", "GET"),
    ("PUT", "/health/live", "GET"),
    ("POST", "/health/ready", "GET"),
    ("PUT", "/delivery-rehearsals", "GET, POST"),
    ("DELETE", "/delivery-rehearsals/uploads", "POST"),  # concrete before templated, as in OpenAPI
    ("PATCH", "/delivery-rehearsals/run_x/attempts", "GET, POST"),
    ("DELETE", "/delivery-rehearsals/run_x/attempts/att_y", "GET"),
    ("GET", "/delivery-rehearsals/run_x/attempts/att_y/reconcile", "POST"),
    ("GET", "/delivery-rehearsals/run_x/attempts/att_y/abort", "POST"),
    ("POST", "/delivery-rehearsals/run_x/release-gate", "GET"),
    ("PUT", "/openapi.json", "GET, HEAD"),
    ("POST", "/", "GET"),
    ("DELETE", "/rehearsals/run_x", "GET"),
    ("POST", "/static/app.js", "GET, HEAD"),
])
def test_method_not_allowed_lists_the_methods_of_the_path(api: Api, method: str, path: str, allow: str) -> None:
    response = api.client.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"})
    body = assert_problem(response, 405, "method-not-allowed")
    assert response.headers["allow"] == allow
    assert body["instance"] == path


def test_allowed_methods_are_really_allowed(api: Api) -> None:
    # what Allow names for a path is served there (not 405)
    response = api.client.put("/delivery-rehearsals")
    for method in response.headers["allow"].split(", "):
        assert api.client.request(method, "/delivery-rehearsals").status_code != 405, method


def test_host_guard_answers_like_every_other_problem(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'h.db'}")
    store.migrate()
    app = create_app(store, api_token=TOKEN, allowed_hosts=["127.0.0.1", "localhost", "::1"])
    with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1") as client:
        refused = client.get("/delivery-rehearsals/run_x", headers={"host": "evil.example"})
        body = assert_problem(refused, 400, "invalid-host")
        assert body == {"type": "urn:fencepost:problem:invalid-host", "title": "Host not allowed", "status": 400,
                        "detail": "this server answers only to its loopback names",
                        "instance": "/delivery-rehearsals/run_x"}
        missing = client.get("/delivery-rehearsals/run_x")
        assert_problem(missing, 404, "not-found")
        # same serialization (compact JSON, same key order) and the same security headers
        assert refused.content.startswith(b'{"type":"urn:fencepost:problem:invalid-host","title":')
        assert missing.content.startswith(b'{"type":"urn:fencepost:problem:not-found","title":')
        for name in ("content-security-policy", "x-content-type-options", "content-type"):
            assert refused.headers[name].split(";")[0] == missing.headers[name].split(";")[0], name
    store.close()
