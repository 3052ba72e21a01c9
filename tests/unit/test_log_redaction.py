"""Driver log lines keep flowing as JSON but never carry connection details."""

from __future__ import annotations

import io
import json
import logging

import pytest

from fencepost.cli import logs


def test_psycopg_pool_warning_is_json_without_host_or_port() -> None:
    stream = io.StringIO()
    logs.configure("json")
    handler = logging.getLogger("psycopg").handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    logging.getLogger("psycopg.pool").warning(
        'error connecting in "pool-1": connection failed: connection to server at "127.0.0.1", port 5432 failed')
    logging.getLogger("fencepost.worker").info("claimed", extra={"event": "claimed", "command_id": "cmd_1"})
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["logger"] == "psycopg.pool" and lines[0]["level"] == "warning"
    assert "127.0.0.1" not in lines[0]["msg"] and "5432" not in lines[0]["msg"]
    assert lines[0]["msg"].startswith('error connecting in "pool-1"')
    assert lines[1]["event"] == "claimed" and lines[1]["command_id"] == "cmd_1"


def test_auto_log_format_is_text_on_a_terminal_and_json_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new-user trial read JSON lines from `fencepost worker` in an interactive terminal; a collector reading a
    pipe still gets JSON."""
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    try:
        for stream, expected in [(Terminal(), logs.TextFormatter), (io.StringIO(), logs.JsonFormatter)]:
            monkeypatch.setattr(sys, "stderr", stream)
            logs.configure("auto")
            [handler] = logging.getLogger("fencepost").handlers
            assert type(handler.formatter) is expected
    finally:
        logging.getLogger("fencepost").handlers[:] = []
        logging.getLogger("psycopg").handlers[:] = []
