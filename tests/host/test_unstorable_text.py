"""Text no backend stores as given (a NUL character, a lone surrogate) in what a caller names at submit, resolve
and approve, on every backend and through every surface (a break-it trial): bad input naming the field (exit 2,
HTTP 422), never a schema conflict on PostgreSQL (exit 3, HTTP 409) while SQLite stored it, nor a raw
``TypeError`` or ``UnicodeEncodeError``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.conftest import AUTH, TOKEN, assert_problem
from fencepost.api import create_app
from fencepost.cli.app import app as cli
from fencepost.core.errors import InvalidInput, NotFound
from fencepost.core.statuses import InvocationStatus
from fencepost.host import Host, HostConfig
from fencepost.host.resolution import RESOLVED
from fencepost.store.base import Store
from helpers.store_backends import StoreBackend, schema_url
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, events_of, make_host
from host.test_resolve import ambiguous

BAD = {"nul": "a\x00b", "surrogate": "a\ud800b"}
#: Every text a submit names, as ``Host.submit`` takes it.
SUBMITTED = ("action_id", "actor", "authority", "idempotency_key", "tenant", "space")


def cli_host(store: Store) -> Host:
    """The ``--app`` of the CLI cases: the charge action over a provider that never answers ambiguously."""
    return Host(store, actions=[charge_action(Spy())], adapters=[Scripted(Ledger())], config=HostConfig())


def _submit(host: Host, **text: str) -> Any:
    args = {"action_id": "shop.charge", "actor": "u1", "idempotency_key": "k1", **text}
    return host.submit(args.pop("action_id"), PARAMS, **args)


def _nothing_stored(store: Store, host: Host) -> None:
    assert host.list() == []
    assert store.read(lambda tx: tx.outbox.count_by_status()) == {}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_submit_refuses_an_identifier_no_backend_stores_as_given_naming_it(store: Store, ledger: Ledger,
                                                                            bad: str) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    for field in SUBMITTED:
        with pytest.raises(InvalidInput, match=f"^{field} holds a (NUL character|lone surrogate)"):
            _submit(host, **{field: bad})
    _nothing_stored(store, host)
    assert _submit(host).status is InvocationStatus.PENDING  # the same submit without it goes through


def test_the_api_answers_422_naming_the_field_on_every_backend(store: Store) -> None:
    host = cli_host(store)
    app = create_app(store, api_token=TOKEN, on_work=lambda: None, host=host, ui=False)
    body = {"action_id": "shop.charge", "params": PARAMS, "actor": "u1"}
    with TestClient(app, raise_server_exceptions=False) as client:
        for field in ("action_id", "actor", "authority", "tenant", "space"):
            answer = client.post("/v1/host/invocations", json={**body, field: "a\x00b"},
                                 headers={**AUTH, "Idempotency-Key": "k1"})
            problem = assert_problem(answer, 422, "invalid-input")
            assert problem["detail"].startswith(f"{field} holds a NUL character"), problem
            # JSON's escape of a lone surrogate never reaches the host: the body model refuses it
            raw = json.dumps({**body, field: "a"}).replace('"a"', '"a\\ud800"').encode()
            answer = client.post("/v1/host/invocations", content=raw, headers={
                **AUTH, "Idempotency-Key": "k1", "Content-Type": "application/json"})
            assert answer.status_code == 422, answer.text
    _nothing_stored(store, host)


def test_the_cli_exits_2_naming_the_field_on_every_backend(store: Store, backend: StoreBackend) -> None:
    url = schema_url(backend.schema) if backend.is_postgres else backend.url
    runner = CliRunner()
    for option, field in (("--actor", "actor"), ("--authority", "authority"), ("--key", "idempotency_key"),
                          ("--tenant", "tenant"), ("--space", "space")):
        for bad in BAD.values():
            options = {"--key": "k1", option: bad}
            result = runner.invoke(cli, [
                "host", "submit", "shop.charge", "--app", f"{__name__}:cli_host", "--params", json.dumps(PARAMS),
                "--database", url, *(part for pair in options.items() for part in pair)])
            assert result.exit_code == 2, (option, bad, result.output)
            assert f"{field} holds a" in result.output, result.output
    _nothing_stored(store, cli_host(store))


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_resolve_refuses_an_operator_or_note_no_backend_stores_as_given(store: Store, backend: StoreBackend,
                                                                         ledger: Ledger, bad: str) -> None:
    """A break-it trial: a lone surrogate in the note came out of ``Host.resolve`` as a raw error (the request's
    digest could not encode it) instead of the project's bad input."""
    host, inv = ambiguous(store, backend, ledger)
    for field in ("operator", "note"):
        args = {"operator": "ops:1", "note": "charge found", field: bad}
        with pytest.raises(InvalidInput, match=f"^{field} holds a (NUL character|lone surrogate)"):
            host.resolve(inv.id, "succeeded", **args)
    with pytest.raises(NotFound, match="no invocation"):  # an id holding one names no invocation
        host.resolve(inv.id[:-1] + bad, "succeeded", operator="ops:1", note="charge found")
    assert host.get(inv.id).status is InvocationStatus.RECONCILIATION_REQUIRED
    assert RESOLVED not in [e.type for e in events_of(store, inv.id)]

    url = schema_url(backend.schema) if backend.is_postgres else backend.url
    result = CliRunner().invoke(cli, [
        "host", "resolve", inv.id, "--succeeded", "--as", "ops:1", "--note", bad, "--database", url])
    assert result.exit_code == 2 and "note holds a" in result.output, result.output
    app = create_app(store, api_token=TOKEN, on_work=lambda: None, host=host, ui=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        # JSON's escape of a lone surrogate is refused by the body model; a NUL reaches the host
        raw = json.dumps({"outcome": "succeeded", "operator": "ops:1", "note": bad}).encode()
        answer = client.post(f"/v1/host/invocations/{inv.id}/resolve", content=raw,
                             headers={**AUTH, "Content-Type": "application/json"})
        assert answer.status_code == 422, answer.text
        if "\x00" in bad:
            assert answer.json()["detail"].startswith("note holds a NUL character"), answer.text
    assert host.resolve(inv.id, "succeeded", operator="ops:1", note="charge found").status == "succeeded"


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_an_approval_decision_refuses_text_no_backend_stores_as_given(store: Store, ledger: Ledger,
                                                                       bad: str) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    for field in ("approver", "authority", "note"):
        args = {"approver": "ops:1", "authority": "role:approver", "note": "", field: bad}
        with pytest.raises(InvalidInput, match=f"^{field} holds a"):
            host.approve("inv_none", **args)
        with pytest.raises(InvalidInput, match=f"^{field} holds a"):
            host.reject("inv_none", **args)
