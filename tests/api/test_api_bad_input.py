"""Issue 11 item 8, over HTTP: bad input gets a clear answer.

A NUL byte in package SQL is refused at create (naming the file and the offset); an encrypted zip is 422, not
500; a chunked upload past the limit is 413, not 422; an upload without the token is refused with 401 before
its body is read (over a real server on loopback); a NUL in an id answers the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient

from api.conftest import AUTH, EXAMPLE, TOKEN, Api, assert_problem
from fencepost.api import create_app
from fencepost.host import Host, HostConfig
from fencepost.store import Store, open_store
from host.kit import Ledger, Scripted, Spy, charge_action


def _package_with_nul(tmp_path: Path) -> tuple[Path, str, int]:
    package = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, package)
    target = package / "migrations" / "0002_stock.up.sql"
    if not target.exists():
        target = sorted((package / "migrations").glob("*.up.sql"))[-1]
    text = target.read_bytes()
    target.write_bytes(text + b"\x00-- after the NUL")
    return package, str(target.relative_to(package)), len(text)


def test_a_nul_byte_in_package_sql_is_refused_at_create_naming_file_and_offset(api: Api, tmp_path: Path) -> None:
    package, rel, offset = _package_with_nul(tmp_path)
    body = assert_problem(api.client.post("/delivery-rehearsals", json={"package_path": str(package)},
                                          headers=AUTH), 422, "invalid-input")
    assert f"{rel!r} contains a NUL byte at offset {offset}" in body["detail"]
    assert api.client.get("/delivery-rehearsals").json() == {"items": [], "next_cursor": None}


def test_an_encrypted_zip_upload_is_422(api: Api, tmp_path: Path) -> None:
    archive = tmp_path / "secret.zip"
    # the real zip tool with a password (Python's zipfile cannot write encrypted members)
    subprocess.run(["zip", "-q", "-r", "-P", "a-password", str(archive), "inventory"], cwd=EXAMPLE.parent,
                   check=True)
    response = api.client.post("/delivery-rehearsals/uploads", headers=AUTH,
                               files={"archive": ("secret.zip", archive.read_bytes(), "application/zip")})
    body = assert_problem(response, 422, "invalid-input")
    assert "is encrypted" in body["detail"]
    assert api.client.get("/delivery-rehearsals").json() == {"items": [], "next_cursor": None}


# ── a real server on loopback ──
class _Server:
    def __init__(self, store: Store, max_upload_bytes: int) -> None:
        app = create_app(store, api_token=TOKEN, on_work=lambda: None, max_upload_bytes=max_upload_bytes, ui=False)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()

    def chunked(self, headers: dict[str, str], chunks: Iterator[bytes]) -> tuple[int, bytes]:
        """POST an upload with ``Transfer-Encoding: chunked`` (no length declared); returns status and body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.putrequest("POST", "/delivery-rehearsals/uploads")
            for name, value in {"Content-Type": "multipart/form-data; boundary=xyz",
                                "Transfer-Encoding": "chunked", **headers}.items():
                conn.putheader(name, value)
            conn.endheaders()
            try:
                for chunk in chunks:
                    conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                conn.send(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed before the whole body was sent
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    store.migrate()
    yield store
    store.close()


def _multipart(size: int) -> Iterator[bytes]:
    yield b'--xyz\r\nContent-Disposition: form-data; name="archive"; filename="p.zip"\r\n\r\n'
    for _ in range(size // 8192):
        yield b"x" * 8192
    yield b"\r\n--xyz--\r\n"


def test_a_chunked_upload_past_the_limit_is_413(sqlite_store: Store) -> None:
    with _Server(sqlite_store, max_upload_bytes=64 * 1024) as server:
        status, body = server.chunked(AUTH, _multipart(512 * 1024))
    assert status == 413, body
    assert b"urn:fencepost:problem:payload-too-large" in body


def test_an_unauthenticated_upload_is_401_before_its_body_is_read(sqlite_store: Store) -> None:
    head = b'--xyz\r\nContent-Disposition: form-data; name="archive"; filename="p.zip"\r\n\r\n'
    with _Server(sqlite_store, max_upload_bytes=64 * 1024 * 1024) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        try:
            conn.putrequest("POST", "/delivery-rehearsals/uploads")
            conn.putheader("Content-Type", "multipart/form-data; boundary=xyz")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            # The first chunk only, and the body never ends: a server that parsed the upload before checking the
            # token would wait for the rest, and getresponse would time out instead of reading an answer.
            conn.send(f"{len(head):x}\r\n".encode() + head + b"\r\n")
            response = conn.getresponse()
            status, body = response.status, response.read()
        finally:
            conn.close()
        wrong_status, _ = server.chunked({"Authorization": "Bearer not-the-token"}, _multipart(16 * 1024))
    assert status == 401, body
    assert b"urn:fencepost:problem:unauthorized" in body
    assert wrong_status == 401


# ── a NUL in an id: the same answer on both backends ──
NUL_READS = [
    ("/delivery-rehearsals/run_%00x", 404, "not-found"),
    ("/delivery-rehearsals/run_%00x/attempts", 404, "not-found"),
    ("/delivery-rehearsals/run_%00x/attempts/att_%00y", 404, "not-found"),
    ("/delivery-rehearsals/run_%00x/release-gate", 404, "not-found"),
    ("/delivery-rehearsals/run_%00x/attempt-comparison", 404, "not-found"),
    ("/v1/host/invocations/inv_%00y", 404, "not-found"),
    ("/v1/host/invocations?cursor=inv_%00y", 422, "invalid-input"),
]


def test_a_nul_in_an_id_answers_alike_on_both_backends(store: Store) -> None:
    host = Host(store, actions=[charge_action(Spy())], adapters=[Scripted(Ledger())], config=HostConfig())
    app = create_app(store, api_token=TOKEN, on_work=lambda: None, host=host, ui=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        run_id = client.post("/delivery-rehearsals", json={"package_path": str(EXAMPLE)}, headers=AUTH).json()["id"]
        for path, status, kind in NUL_READS:
            assert_problem(client.get(path), status, kind)
        # a real run's attempts under a NUL attempt id, and the writes that look an id up first
        assert_problem(client.get(f"/delivery-rehearsals/{run_id}/attempts/att_%00y"), 404, "not-found")
        assert_problem(client.post("/delivery-rehearsals/run_%00x/attempts", headers=AUTH), 404, "not-found")
        assert_problem(client.post(f"/delivery-rehearsals/{run_id}/attempts/att_%00y/abort", headers=AUTH), 404,
                       "not-found")
        # a filter with a NUL matches nothing, as on SQLite
        listed = client.get("/v1/host/invocations?tenant=t%00")
        assert listed.status_code == 200 and listed.json()["items"] == []
