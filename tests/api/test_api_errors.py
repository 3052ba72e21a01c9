"""A guard refusal reaching a route answers 409 ``not-allowed`` naming the guard (ADR 0016), not a 500.

No route of today's API reaches a guard (packages and workflows are CLI only), so the test adds one to the app;
it goes through the same exception handlers as every real route.
"""

from __future__ import annotations

from api.conftest import AUTH, Api, assert_problem
from fencepost.catalog.lifecycle import not_allowed
from fencepost.store.base import StoreBusy


def test_not_allowed_answers_409_with_the_guard(api: Api) -> None:
    def refuse() -> None:
        raise not_allowed("release_gate", "the release gate of run r_1 is not passing")

    api.app.add_api_route("/test-only/refuse", refuse, methods=["POST"])
    body = assert_problem(api.client.post("/test-only/refuse", headers=AUTH), 409, "not-allowed")
    assert body["guard"] == "release_gate"
    assert body["title"] == "Not allowed by a guard"
    assert body["detail"] == "not allowed by guard release_gate: the release gate of run r_1 is not passing"
    assert body["instance"] == "/test-only/refuse"


def test_a_subclass_answers_with_its_parents_kind(api: Api) -> None:
    def busy() -> None:
        raise StoreBusy("the control store stayed busy")

    api.app.add_api_route("/test-only/busy", busy, methods=["GET"])
    body = assert_problem(api.client.get("/test-only/busy"), 503, "unavailable")
    assert "guard" not in body
