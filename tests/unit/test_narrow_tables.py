"""From a new user's trial: at 80 columns (a pipe, a default terminal) ``fencepost workers`` and ``fencepost events
list`` cut ids to ``evt_60bbafa…``, so an operator could not copy one into ``events requeue``. Ids are printed
whole on any width; the other columns fold."""

from __future__ import annotations

import pytest
from rich.console import Console

from fencepost.cli import events_cmds, render
from fencepost.cli.workers_cmd import _table


def _rendered(table: object, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text()


@pytest.mark.parametrize("width", [60, 80])
def test_worker_ids_are_whole_on_a_narrow_terminal(width: int) -> None:
    worker_id = "ci-runner-worker-machine-42.internal:123456:beef"
    item = {"id": worker_id, "host": "ci-runner-worker-machine-42.internal", "pid": 123456,
            "kinds": ["host.invoke:fencepost.deliver@1", "host.invoke:fencepost.workflow.task@1"],
            "in_flight": 0, "concurrency": 1, "started_at": "2026-12-07T00:00:00.000000Z", "last_seen_seconds": 1.0}
    text = _rendered(_table([item]), width)
    assert worker_id in text and "…" not in text, text


def test_event_ids_are_whole_on_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    event_id = "evt_60bbafa2d1c94c4e9d0b7f3a5e8c1d2f4a6b8c0e"
    events_cmds._rows_text([{"event_id": event_id, "tenant_id": "default", "space_id": "payments-eu-west",
                             "type": "ActionInvocationReconciliationRequired", "status": "dead_lettered",
                             "attempts": 12, "available_at": "2026-12-07T00:00:00.000000Z",
                             "last_error": "http 503 from https://hooks.example.com/fencepost/events: retry later"}],
                           None)
    text = console.export_text()
    assert event_id in text and "…" not in text, text


@pytest.mark.parametrize(("columns", "tty", "expected"), [
    (None, False, render.PIPED_WIDTH),  # a pipe, watch, a CI log: rows stay one line each
    ("100", False, None),  # COLUMNS says: rich reads it
    (None, True, None),  # a terminal: rich asks it
])
def test_output_that_is_not_a_terminal_is_wide_unless_columns_says(
        monkeypatch: pytest.MonkeyPatch, columns: str | None, tty: bool, expected: int | None) -> None:
    """From a new user's trial: piped, ``fencepost workers`` and ``events list`` wrapped every cell at 80."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(render.sys.stdout, "isatty", lambda: tty)
    assert render._width() == expected


def test_a_piped_worker_table_keeps_each_row_on_one_line() -> None:
    item = {"id": "w1", "host": "h", "pid": 1,
            "kinds": ["host.invoke:fencepost.deliver@1", "host.invoke:fencepost.workflow.task@1",
                      "rehearsal.attempt", "delivery.target"],
            "in_flight": 0, "concurrency": 1, "started_at": "2026-12-07T00:00:00.000000Z", "last_seen_seconds": 1.0}
    text = _rendered(_table([item]), render.PIPED_WIDTH)
    assert all(kind in text for kind in item["kinds"]), text  # at 80 they broke mid-word: host.invoke:fen / cepost
