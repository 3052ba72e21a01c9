"""Health endpoints: liveness always; readiness (and every rehearsal endpoint) 503 on an unmigrated schema."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.conftest import AUTH, TOKEN, Api, assert_problem
from fencepost.api import create_app
from fencepost.core.statuses import InvocationStatus
from fencepost.host import Ambiguous, Inline
from fencepost.store import open_store
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host


def test_live_answers(api: Api) -> None:
    response = api.client.get("/health/live")
    assert response.status_code == 200
    assert response.json() == {"status": "live"}


def test_ready_reports_the_schema_version(api: Api) -> None:
    response = api.client.get("/health/ready")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready" and body["backend"] == "sqlite"
    assert body["schema_version"] == api.store.expected_version


def test_ready_is_503_on_an_unmigrated_schema(unmigrated_api: Api) -> None:
    response = unmigrated_api.client.get("/health/ready")
    body = assert_problem(response, 503, "schema-not-ready")
    assert "fencepost migrate" in body["detail"]
    assert str(unmigrated_api.db_path) not in response.text
    assert unmigrated_api.client.get("/health/live").status_code == 200


def test_ready_is_503_when_the_database_file_is_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "absent.db"
    store = open_store(f"sqlite:///{missing}", create=False)
    with TestClient(create_app(store, api_token=TOKEN), raise_server_exceptions=False) as client:
        response = client.get("/health/ready")
        body = assert_problem(response, 503, "schema-not-ready")
        assert "fencepost migrate" in body["detail"]
        assert str(missing) not in response.text and "absent.db" not in response.text
    assert not missing.exists()


def test_rehearsal_endpoints_and_pages_refuse_an_unmigrated_schema(unmigrated_api: Api) -> None:
    client = unmigrated_api.client
    assert_problem(client.get("/delivery-rehearsals"), 503, "schema-not-ready")
    assert_problem(client.post("/delivery-rehearsals", json={"package_path": "x"}, headers=AUTH), 503,
                   "schema-not-ready")
    page = client.get("/")
    assert page.status_code == 503 and "fencepost migrate" in page.text
    assert page.headers["content-type"].startswith("text/html")


def test_readiness_recovers_once_migrated(unmigrated_api: Api) -> None:
    assert unmigrated_api.client.get("/health/ready").status_code == 503
    unmigrated_api.store.migrate()
    assert unmigrated_api.client.get("/health/ready").status_code == 200
    assert unmigrated_api.client.get("/delivery-rehearsals").json() == {"next_cursor": None, "items": []}


def test_a_loopback_app_refuses_foreign_host_headers(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'h.db'}")
    store.migrate()
    app = create_app(store, api_token=TOKEN, allowed_hosts=["127.0.0.1", "localhost", "::1"])
    with TestClient(app, raise_server_exceptions=False) as client:
        for host in ("127.0.0.1:8080", "localhost", "[::1]:9000", "LOCALHOST:1"):
            assert client.get("/health/live", headers={"host": host}).status_code == 200, host
        for host in ("evil.example:8080", "127.0.0.1.evil.example", "", "[::1"):
            response = client.get("/delivery-rehearsals", headers={"host": host})
            assert_problem(response, 400, "invalid-host")
    store.close()


def test_ready_carries_the_host_counts_and_stays_ready_with_open_reconciliations(api: Api) -> None:
    """ADR 0051: open reconciliations are an operator's work, not a reason to take the server out of rotation."""
    body = api.client.get("/health/ready").json()
    assert body["host"]["open_reconciliations"] == 0 and body["host"]["attention"] is False
    assert body["host"]["schema_current"] is True and body["host"]["schema_version"] == body["schema_version"]
    ledger = Ledger()
    host = make_host(api.store, charge_action(Spy()), Scripted(ledger, Ambiguous("reset after the request left")))
    done = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert done.status is InvocationStatus.RECONCILIATION_REQUIRED
    response = api.client.get("/health/ready")
    assert response.status_code == 200 and response.json()["status"] == "ready"
    assert response.json()["host"] == {**body["host"], "open_reconciliations": 1, "attention": True}


def test_the_operator_page_shows_the_host_counts(api: Api) -> None:
    page = api.client.get("/")
    assert page.status_code == 200 and 'id="host-health"' in page.text and "Nothing needs attention." in page.text
    host = make_host(api.store, charge_action(Spy()), Scripted(Ledger(), Ambiguous("reset after the request left")))
    host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    page = api.client.get("/")
    assert '<dd data-field="host-open_reconciliations">1</dd>' in page.text
    assert "An operator has work" in page.text
