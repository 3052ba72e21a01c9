"""Fixtures of the HTTP API tests: a migrated SQLite store in ``tmp_path`` on a ``ManualClock``, an app built by
``create_app`` with no worker (so an enqueued Attempt stays PENDING until a test runs a worker), and clients."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from fencepost.api import create_app
from fencepost.cli.worker_cmd import build_worker
from fencepost.core.clock import ManualClock
from fencepost.outbox import WorkerConfig
from fencepost.store import Store, open_store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory"
TOKEN = "api-test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Api:
    """One app over one database, and what a test needs around it."""

    db_path: Path
    work_dir: Path
    clock: ManualClock
    store: Store
    app: FastAPI
    client: TestClient
    woken: list[int] = field(default_factory=list)

    def create_run(self, path: Path = EXAMPLE) -> str:
        response = self.client.post("/delivery-rehearsals", json={"package_path": str(path)}, headers=AUTH)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def enqueue(self, run_id: str) -> dict[str, Any]:
        response = self.client.post(f"/delivery-rehearsals/{run_id}/attempts", headers=AUTH)
        assert response.status_code == 202, response.text
        body: dict[str, Any] = response.json()
        return body

    def run_worker(self) -> None:
        """Run one in-process worker until the queue is empty."""
        config = WorkerConfig(poll_interval=0.01, lease_seconds=30, worker_id="api-test-worker")
        build_worker(self.store, self.work_dir, config).run(max_idle_polls=1)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Plain sqlite3 on the database file, bypassing fencepost (as someone with a shell would)."""
        conn = sqlite3.connect(self.db_path)
        try:
            rows = conn.execute(statement, params).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()


def build_api(tmp_path: Path, *, migrate: bool = True, **options: Any) -> Iterator[Api]:
    db_path = tmp_path / "control.db"
    clock = ManualClock()
    store = open_store(f"sqlite:///{db_path}", clock=clock)
    if migrate:
        store.migrate()
    woken: list[int] = []
    options.setdefault("on_work", lambda: woken.append(1))
    app = create_app(store, api_token=TOKEN, **options)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(db_path=db_path, work_dir=tmp_path / "work", clock=clock, store=store, app=app, client=client,
                  woken=woken)
    store.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from build_api(tmp_path)


@pytest.fixture
def api_with_log(tmp_path: Path) -> Iterator[Api]:
    """An app with the access log on, as ``fencepost serve`` builds it."""
    yield from build_api(tmp_path, access_log=True)


@pytest.fixture
def unmigrated_api(tmp_path: Path) -> Iterator[Api]:
    yield from build_api(tmp_path, migrate=False)


def assert_problem(response: Any, status: int, kind: str) -> dict[str, Any]:
    """The response is RFC 9457 problem+json of ``kind`` with ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:fencepost:problem:{kind}", body
    assert body["status"] == status
    assert body["title"] and body["detail"]
    return body
