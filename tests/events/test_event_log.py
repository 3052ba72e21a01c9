"""Reading the event log itself: ``fencepost events log`` and ``GET /v1/events`` (every backend)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fencepost.cli.app import app
from fencepost.store.base import Store
from fencepost.store.host_records import NewEvent, Subject
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import StoreBackend, schema_url

from .kit import append


def _url(backend: StoreBackend) -> str:
    return schema_url(backend.schema) if backend.schema else backend.url


def _log(backend: StoreBackend, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["events", "log", "--database", _url(backend), *args])
    return result.exit_code, result.output


def test_an_empty_store_says_no_events_yet(backend: StoreBackend) -> None:
    backend.migrated()
    code, out = _log(backend)
    assert (code, out.strip()) == (0, "no events yet: the host appends them as invocations change")


def test_the_only_space_is_read_in_sequence_order_and_paged_with_after(backend: StoreBackend,
                                                                       store: Store) -> None:
    ids = append(store, 5)
    code, out = _log(backend, "--json", "--limit", "3")
    assert code == 0, out
    page = json.loads(out)
    assert (page["tenant_id"], page["space_id"]) == ("acme", "shop")
    assert [(e["id"], e["sequence"]) for e in page["items"]] == [(ids[i], i + 1) for i in range(3)]
    assert page["items"][0]["subject"] == {"subject_type": "ActionInvocation", "subject_id": ids[0]}
    assert page["items"][0]["payload"] == {"id": ids[0]} and page["next_after"] == 3
    code, out = _log(backend, "--json", "--limit", "3", "--after", str(page["next_after"]))
    rest = json.loads(out)
    assert [e["id"] for e in rest["items"]] == ids[3:] and rest["next_after"] is None
    code, text = _log(backend, "--limit", "3")
    assert code == 0 and "acme/shop" in text and "StateTransitioned" in text and "--after 3" in text


def test_a_narrow_terminal_gets_every_event_whole(backend: StoreBackend, store: Store) -> None:
    """At 80 columns the table folded subject and payload to a few letters (a new-user trial): one block per
    event instead, every id and payload whole; a wide terminal keeps the table."""
    from fencepost.cli import render

    ids = append(store, 2)
    before = render.console.width
    try:
        render.console.width = 80
        code, text = _log(backend)
        assert code == 0, text
        for event_id in ids:
            assert f"ActionInvocation:{event_id}" in text and f'{{"id":"{event_id}"}}' in text, text
        assert "#1  " in text and "#2  " in text
        render.console.width = 200
        code, text = _log(backend)
        assert code == 0 and "seq" in text.splitlines()[1] and "#1  " not in text, text
        for event_id in ids:  # the table keeps every subject id on one line
            assert f"ActionInvocation:{event_id}" in text, text
    finally:
        render.console.width = before


def test_several_spaces_must_be_named_and_a_subject_filters(backend: StoreBackend, store: Store) -> None:
    append(store, 2, space="shop")
    append(store, 1, prefix="other", space="books")
    code, out = _log(backend)
    assert code == 2
    assert "2 spaces" in out and "--tenant acme --space books" in out and "--tenant acme --space shop" in out
    code, out = _log(backend, "--tenant", "acme", "--space", "books", "--json")
    assert [e["id"] for e in json.loads(out)["items"]] == ["other-00000"]

    def another(tx: UnitOfWork) -> None:
        tx.events.append_event(NewEvent(id="ev-x", tenant_id="acme", space_id="shop",
                                        subject=Subject("AdapterInvocation", "ai_1"),
                                        type="AdapterInvocationSucceeded"))

    store.transact(another)
    code, out = _log(backend, "--tenant", "acme", "--space", "shop", "--subject", "AdapterInvocation:ai_1", "--json")
    assert code == 0 and [e["id"] for e in json.loads(out)["items"]] == ["ev-x"]


def test_bad_input_is_refused_with_exit_2(backend: StoreBackend, store: Store) -> None:
    append(store, 1)
    for args, message in [(["--subject", "inv_1"], "--subject must be TYPE:ID"),
                          (["--tenant", "acme"], "give both"),
                          (["--after", "-1"], "--after"),
                          (["--after", str(2**63)], "--after"),  # past any sequence: an overflow on SQLite
                          (["--limit", "0"], "--limit")]:
        code, out = _log(backend, *args)
        assert code == 2 and message in out, (args, out)


def test_events_spaces_lists_every_space_to_name(backend: StoreBackend, store: Store) -> None:
    append(store, 1, space="shop")
    append(store, 2, prefix="other", space="books and more")
    result = CliRunner().invoke(app, ["events", "spaces", "--database", _url(backend), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["items"] == [
        {"tenant_id": "acme", "space_id": "books and more", "last_sequence": 2},
        {"tenant_id": "acme", "space_id": "shop", "last_sequence": 1}]
    text = CliRunner().invoke(app, ["events", "spaces", "--database", _url(backend)]).output
    assert "--tenant acme --space 'books and more'   (2 events)" in text
