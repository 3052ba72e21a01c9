"""HTTP-level behaviour every path shares: no interactive docs (the OpenAPI document is the reference)."""

from __future__ import annotations

from api.conftest import Api, assert_problem


def test_no_interactive_docs_only_the_openapi_document(api: Api) -> None:
    # Swagger UI and ReDoc load assets from a CDN and run inline script: the CSP blocks both (and users may be
    # offline), so they are not served; /openapi.json works with any OpenAPI viewer.
    for path in ("/docs", "/docs/oauth2-redirect", "/redoc"):
        assert_problem(api.client.get(path), 404, "not-found")
    response = api.client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")
