"""The delivery routes over real HTTP semantics (TestClient on the real app): targets read openly and written
with the bearer token, an unsupported scheme refused by name, and a package's deliveries with their steps,
ledger rows and evidence (ADRs 0055, 0058)."""

from __future__ import annotations

from api.conftest import AUTH, Api, assert_problem
from delivery.kit import THREE, add_target, deliver, release, write_package
from fencepost.core.statuses import InvocationStatus


def test_targets_over_http(api: Api) -> None:
    url = f"sqlite://{api.work_dir}/a.db"
    assert_problem(api.client.post("/v1/targets", json={"name": "tenant-a", "url": url}), 401, "unauthorized")
    created = api.client.post("/v1/targets", json={"name": "tenant-a", "url": url, "labels": {"env": "prod"}},
                              headers=AUTH)
    assert created.status_code == 201, created.text
    assert created.json()["labels"] == {"env": "prod"}
    refused = api.client.post("/v1/targets", json={"name": "tenant-b", "url": "postgresql://db/x"}, headers=AUTH)
    problem = assert_problem(refused, 422, "invalid-input")
    assert "scheme 'postgresql' is not supported" in problem["detail"]
    conflict = api.client.post("/v1/targets", json={"name": "tenant-a", "url": f"sqlite://{api.work_dir}/b.db"},
                               headers=AUTH)
    assert_problem(conflict, 409, "conflict")
    assert [t["name"] for t in api.client.get("/v1/targets", params={"label": "env=prod"}).json()["items"]] == [
        "tenant-a"]
    assert api.client.get("/v1/targets", params={"label": "env=dev"}).json()["items"] == []
    assert api.client.get("/v1/targets/tenant-a").json()["url"] == url
    assert_problem(api.client.delete("/v1/targets/tenant-a"), 401, "unauthorized")
    removed = api.client.delete("/v1/targets/tenant-a", headers=AUTH)
    assert removed.status_code == 200 and removed.json()["removed_at"] is not None
    assert_problem(api.client.get("/v1/targets/tenant-a"), 404, "not-found")
    assert api.client.get("/v1/targets").json()["items"] == []  # removed: hidden unless asked for
    (shown,) = api.client.get("/v1/targets", params={"include_removed": "true"}).json()["items"]
    assert (shown["name"], shown["last_deliveries"]) == ("tenant-a", []) and shown["removed_at"] is not None


def test_package_deliveries_over_http(api: Api) -> None:
    release(api.store, write_package(api.work_dir, "shop", "1.0.0", THREE), api.work_dir / "work")
    add_target(api.store, api.work_dir, "tenant-a")
    view = deliver(api.store, "shop", "tenant-a", api.work_dir / "work")
    assert view.status is InvocationStatus.SUCCEEDED, view.error
    body = api.client.get("/v1/packages/shop/deliveries")
    assert body.status_code == 200, body.text
    (item,) = body.json()["items"]
    assert (item["target"], item["version"], item["status"]) == ("tenant-a", "1.0.0", "succeeded")
    assert [s["migration"] for s in item["steps"] if s["migration"]] == list(THREE)
    assert all(s["ledger"]["state"] == "applied" for s in item["steps"] if s["migration"])
    assert item["evidence"]["comparison"] == "matches rehearsal"
    assert_problem(api.client.get("/v1/packages/nothing/deliveries"), 404, "not-found")
    assert "ETag" in body.headers
    unchanged = api.client.get("/v1/packages/shop/deliveries", headers={"If-None-Match": body.headers["ETag"]})
    assert (unchanged.status_code, unchanged.content) == (304, b"")
    (target,) = api.client.get("/v1/targets").json()["items"]
    assert target["last_deliveries"] == [{"package": "shop", "version": "1.0.0", "status": "succeeded",
                                          "invocation_id": view.id, "error": None,
                                          "updated_at": item["updated_at"]}]
    packages = api.client.get("/v1/packages")
    assert packages.json()["items"] == [{"name": "shop", "versions": ["1.0.0"], "installed_version": "1.0.0",
                                         "targets": 1}]
    assert api.client.get("/v1/packages", headers={"If-None-Match": packages.headers["ETag"]}).status_code == 304
