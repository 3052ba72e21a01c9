"""HTTP-level behaviour every path shares: no interactive docs (the OpenAPI document is the reference), and a 405
names the path's methods in ``Allow``."""

from __future__ import annotations

import pytest

from api.conftest import TOKEN, Api, assert_problem


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
