"""No response, error or log line carries a lease token, the database path or a connection string."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from api.conftest import AUTH, Api, assert_problem
from api.test_api_attempts import attempt_url, claim


def _texts(response: Any) -> str:
    return response.text + "\n" + "\n".join(f"{k}: {v}" for k, v in response.headers.items())


def test_no_token_or_path_in_any_response_while_processing(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    run_id = api.create_run()
    done = api.enqueue(run_id)
    api.run_worker()
    attempt = api.enqueue(run_id)
    claim(api, lease_seconds=60)
    (token,) = api.sql("SELECT lease_token FROM commands WHERE status = 'PROCESSING'")[0]
    assert token and len(token) >= 16
    forbidden = [token, str(api.db_path), api.db_path.name, str(api.db_path.parent), f"sqlite:///{api.db_path}"]

    responses = [
        api.client.get("/health/ready"), api.client.get("/health/live"), api.client.get("/openapi.json"),
        api.client.get("/delivery-rehearsals"), api.client.get(f"/delivery-rehearsals/{run_id}"),
        api.client.get(f"/delivery-rehearsals/{run_id}/attempts"),
        api.client.get(attempt_url(run_id, attempt["id"], "?evidence=true")),
        api.client.get(attempt_url(run_id, done["id"], "?evidence=true")),
        api.client.get(f"/delivery-rehearsals/{run_id}/attempt-comparison"),
        api.client.get(f"/delivery-rehearsals/{run_id}/release-gate"),
        api.client.get("/"), api.client.get(f"/rehearsals/{run_id}"), api.client.get("/rehearsals/run_nope"),
        api.client.post(attempt_url(run_id, attempt["id"], "/reconcile"), headers=AUTH),  # 409 lease-active
        api.client.post(attempt_url(run_id, attempt["id"], "/reconcile")),  # 401
        api.client.get(attempt_url(run_id, "att_nope")),  # 404
        api.client.post("/delivery-rehearsals", json={"package_path": 1}, headers=AUTH),  # 422
    ]
    assert [r.status_code for r in responses][-4:] == [409, 401, 404, 422]
    assert all(r.status_code < 500 for r in responses)
    for response in responses:
        text = _texts(response)
        for secret in forbidden:
            assert secret not in text, f"{response.request.url} leaks {secret[:6]}…"
    for record in caplog.records:
        line = record.getMessage() + " " + " ".join(str(v) for v in vars(record).values())
        for secret in forbidden:
            assert secret not in line, f"log line {record.getMessage()!r} leaks"


def test_an_unexpected_error_is_a_500_problem_without_its_message(api: Api, monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    secret = f"boom at {api.db_path}"

    def explode(limit: int = 100) -> list[Any]:
        raise RuntimeError(secret)

    monkeypatch.setattr(api.app.state.fencepost.service, "list_runs", explode)
    response = api.client.get("/delivery-rehearsals")
    body = assert_problem(response, 500, "internal")
    assert secret not in response.text and str(api.db_path) not in response.text
    assert "see its log" in body["detail"]
    assert any(getattr(r, "error_type", None) == "RuntimeError" for r in caplog.records)
    assert all(secret not in r.getMessage() for r in caplog.records)
