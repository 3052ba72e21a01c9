"""Rehearsals: create from a server path or an uploaded archive, list, read; auth, validation and unsafe archives."""

from __future__ import annotations

import io
import os
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.conftest import AUTH, EXAMPLE, Api, assert_problem, build_api


def _package_files(root: Path = EXAMPLE) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def make_zip(files: dict[str, bytes], prefix: str = "") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(prefix + name, data)
    return buf.getvalue()


def make_tar(files: dict[str, bytes], prefix: str = "", extra: list[tarfile.TarInfo] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(data))
        for info in extra or []:
            archive.addfile(info)
    return buf.getvalue()


def upload(api: Api, name: str, data: bytes, headers: dict[str, str] | None = AUTH):  # type: ignore[no-untyped-def]
    return api.client.post("/delivery-rehearsals/uploads", files={"archive": (name, data, "application/octet-stream")},
                           headers=headers)


# ── create from a path, list, read ──
def test_create_from_a_server_path_then_list_and_read(api: Api) -> None:
    response = api.client.post("/delivery-rehearsals", json={"package_path": str(EXAMPLE)}, headers=AUTH)
    assert response.status_code == 201, response.text
    run = response.json()
    assert run["id"].startswith("run_") and run["status"] == "READY"
    assert run["package"] == {"name": "inventory", "version": "1.2.0", "previous_version": "1.1.0"}
    assert response.headers["location"] == f"/delivery-rehearsals/{run['id']}"
    listed = api.client.get("/delivery-rehearsals").json()["items"]
    assert [r["id"] for r in listed] == [run["id"]]
    assert api.client.get(f"/delivery-rehearsals/{run['id']}").json() == run


def test_list_is_newest_first_and_honours_limit(api: Api) -> None:
    first, second = api.create_run(), api.create_run()
    ids = [r["id"] for r in api.client.get("/delivery-rehearsals").json()["items"]]
    assert set(ids) == {first, second}
    assert len(api.client.get("/delivery-rehearsals?limit=1").json()["items"]) == 1
    assert_problem(api.client.get("/delivery-rehearsals?limit=0"), 422, "validation-error")
    assert_problem(api.client.get("/delivery-rehearsals?limit=abc"), 422, "validation-error")


def test_unknown_rehearsal_is_404(api: Api) -> None:
    body = assert_problem(api.client.get("/delivery-rehearsals/run_doesnotexist"), 404, "not-found")
    assert "run_doesnotexist" in body["detail"]


# ── authentication ──
@pytest.mark.parametrize("headers", [None, {"Authorization": "Bearer wrong-token-wrong-token"},
                                     {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer "}])
def test_create_needs_the_bearer_token(api: Api, headers: dict[str, str] | None) -> None:
    response = api.client.post("/delivery-rehearsals", json={"package_path": str(EXAMPLE)}, headers=headers)
    assert_problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"
    assert api.client.get("/delivery-rehearsals").json() == {"next_cursor": None, "items": []}


def test_upload_needs_the_bearer_token(api: Api) -> None:
    assert_problem(upload(api, "p.zip", make_zip(_package_files()), headers=None), 401, "unauthorized")


def test_reads_need_the_token_when_reads_are_closed(tmp_path: Path) -> None:
    gen: Iterator[Api] = build_api(tmp_path, open_reads=False)
    api = next(gen)
    try:
        assert_problem(api.client.get("/delivery-rehearsals"), 401, "unauthorized")
        run_id = api.create_run()
        assert_problem(api.client.get(f"/delivery-rehearsals/{run_id}"), 401, "unauthorized")
        assert api.client.get("/delivery-rehearsals", headers=AUTH).json()["items"][0]["id"] == run_id
        for page in (api.client.get("/"), api.client.get(f"/rehearsals/{run_id}")):
            assert page.status_code == 200
            assert "content_digest" not in page.text and "1.2.0" not in page.text
    finally:
        gen.close()


# ── invalid bodies and packages ──
@pytest.mark.parametrize("body", [None, {}, {"package_path": ""}, {"package_path": 7}, {"package_path": ["a"]},
                                  {"package_path": "x", "extra": 1}, [], "text"])
def test_invalid_create_bodies_are_422(api: Api, body: object) -> None:
    response = api.client.post("/delivery-rehearsals", json=body, headers=AUTH)
    problem = assert_problem(response, 422, "validation-error")
    assert isinstance(problem["errors"], list) and problem["errors"]


def test_malformed_json_is_422(api: Api) -> None:
    response = api.client.post("/delivery-rehearsals", content=b"{not json", headers=AUTH | {"content-type":
                                                                                             "application/json"})
    assert_problem(response, 422, "validation-error")


def test_an_invalid_package_is_422_and_writes_nothing(api: Api, tmp_path: Path) -> None:
    assert_problem(api.client.post("/delivery-rehearsals", json={"package_path": str(tmp_path / "absent")},
                                   headers=AUTH), 422, "invalid-input")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "fencepost-package.toml").write_text("[package]\nname = 'Bad Name'\nversion = '1'\n")
    body = assert_problem(api.client.post("/delivery-rehearsals", json={"package_path": str(bad)}, headers=AUTH),
                          422, "invalid-input")
    assert "name" in body["detail"]
    assert api.client.get("/delivery-rehearsals").json() == {"next_cursor": None, "items": []}


# ── uploads ──
def test_upload_zip_with_a_top_level_folder(api: Api) -> None:
    response = upload(api, "inventory.zip", make_zip(_package_files(), prefix="inventory/"))
    assert response.status_code == 201, response.text
    by_path = api.client.get(f"/delivery-rehearsals/{api.create_run()}").json()
    assert response.json()["content_digest"] == by_path["content_digest"]
    assert response.json()["package"]["name"] == "inventory"


def test_upload_flat_tar_gz(api: Api) -> None:
    response = upload(api, "inventory.tar.gz", make_tar(_package_files()))
    assert response.status_code == 201, response.text
    assert "fencepost-upload-" not in response.text


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


UNSAFE = {
    "zip-dotdot": ("p.zip", lambda: make_zip(_package_files() | {"../escaped.sql": b"x"})),
    "zip-absolute": ("p.zip", lambda: make_zip(_package_files() | {"/tmp/absolute.sql": b"x"})),
    "tar-dotdot": ("p.tar.gz", lambda: make_tar(_package_files(), prefix="a/../../")),
    "tar-absolute": ("p.tar.gz", lambda: make_tar({"/abs/fencepost-package.toml": b"x"})),
    "tar-symlink": ("p.tar.gz", lambda: make_tar(_package_files(), extra=[_link("seed/link.sql", "/etc/passwd",
                                                                                tarfile.SYMTYPE)])),
    "tar-hardlink": ("p.tar.gz", lambda: make_tar(_package_files(), extra=[_link("seed/hard.sql", "/etc/passwd",
                                                                                 tarfile.LNKTYPE)])),
    "tar-device": ("p.tar.gz", lambda: make_tar(_package_files(), extra=[_link("dev", "", tarfile.CHRTYPE)])),
    "not-a-zip": ("p.zip", lambda: b"this is not an archive"),
    "not-gzip": ("p.tar.gz", lambda: b"plain text, not gzip"),
    "truncated-gzip": ("p.tar.gz", lambda: make_tar(_package_files())[:200]),
    "wrong-extension": ("p.rar", lambda: make_zip(_package_files())),
    "no-manifest": ("p.zip", lambda: make_zip({"readme.txt": b"hello"})),
    "two-top-folders": ("p.zip", lambda: make_zip({f"a/{k}": v for k, v in _package_files().items()}
                                                  | {"b/other.txt": b"x"})),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_or_invalid_archives_are_422(api: Api, tmp_path: Path, case: str) -> None:
    name, build = UNSAFE[case]
    response = upload(api, name, build())
    assert_problem(response, 422, "invalid-input")
    assert api.client.get("/delivery-rehearsals").json() == {"next_cursor": None, "items": []}
    assert not (tmp_path / "escaped.sql").exists() and not Path("/tmp/absolute.sql").exists()
    assert "fencepost-upload-" not in response.text


def test_zip_symlink_member_is_refused(api: Api) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in _package_files().items():
            archive.writestr(name, data)
        link = zipfile.ZipInfo("seed/link.sql")
        link.external_attr = (0o120777 << 16)
        archive.writestr(link, "/etc/passwd")
    body = assert_problem(upload(api, "p.zip", buf.getvalue()), 422, "invalid-input")
    assert "symbolic link" in body["detail"]


def test_an_archive_expanding_past_the_limit_is_refused(tmp_path: Path) -> None:
    gen = build_api(tmp_path, max_package_bytes=100_000)
    api = next(gen)
    try:
        bomb = make_zip(_package_files() | {"seed/huge.sql": b"0" * 1_000_000})
        assert len(bomb) < 100_000
        body = assert_problem(upload(api, "bomb.zip", bomb), 422, "invalid-input")
        assert "100000 bytes" in body["detail"]
        tar_bomb = make_tar(_package_files() | {"seed/huge.sql": b"0" * 1_000_000})
        assert_problem(upload(api, "bomb.tar.gz", tar_bomb), 422, "invalid-input")
    finally:
        gen.close()


def test_a_body_past_the_upload_limit_is_413(tmp_path: Path) -> None:
    gen = build_api(tmp_path, max_upload_bytes=10_000)
    api = next(gen)
    try:
        response = upload(api, "big.zip", os.urandom(20_000))
        assert_problem(response, 413, "payload-too-large")
        assert api.client.get("/delivery-rehearsals").json() == {"next_cursor": None, "items": []}
    finally:
        gen.close()


def test_undecodable_bodies_are_422(api: Api) -> None:
    body = assert_problem(api.client.post("/delivery-rehearsals", content=b"\xff\xfe\x00{", headers=AUTH | {
        "content-type": "application/json"}), 422, "validation-error")
    assert body["errors"][0]["loc"][0] == "body"
    broken = b"--b\r\nContent-Disposition: form-data; name=\"archive\"\r\n\x8f[P--b--\r\n"
    assert_problem(api.client.post("/delivery-rehearsals/uploads", content=broken, headers=AUTH | {
        "content-type": "multipart/form-data; boundary=b"}), 422, "validation-error")


def test_a_path_too_long_for_the_file_system_is_422(api: Api) -> None:
    assert_problem(api.client.post("/delivery-rehearsals", json={"package_path": "0" * 4000}, headers=AUTH), 422,
                   "invalid-input")


def test_upload_without_a_file_is_422(api: Api) -> None:
    assert_problem(api.client.post("/delivery-rehearsals/uploads", headers=AUTH), 422, "validation-error")
