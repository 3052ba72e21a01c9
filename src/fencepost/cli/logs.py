"""Structured logging for long-running commands: one JSON object per line on stderr.

Log records carry their fields in ``extra``; no field ever holds a lease token (tokens never leave the
store layer except inside ``Lease`` objects, which are not logged).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
                                 "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None), list)) else str(value)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_"))
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S")
        return f"{stamp} {record.levelname.lower():7} {record.getMessage()} {fields}".rstrip()


class DriverRedaction(logging.Filter):
    """Keeps database driver log lines (psycopg's pool reports failed connections with host and port) in
    the same structured stream, but reduced to their first clause: no connection details ever reach a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("psycopg"):
            return True
        message = record.getMessage()
        record.msg = message.split(":", 1)[0].strip() + " (driver details withheld)"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


#: The ``--log-format`` values: ``auto`` is text on a terminal and json otherwise (a new-user trial read JSON lines
#: in an interactive terminal; a log collector reads the same process's JSON when stderr is a pipe or a file).
FORMATS = ("auto", "json", "text")
FORMAT_HELP = "Log lines as json or text; auto: text on a terminal, json otherwise."


class LogFormat(StrEnum):
    """A ``--log-format`` value (``FORMATS``): a ``str``, so ``configure`` takes it as it is."""

    AUTO = "auto"
    JSON = "json"
    TEXT = "text"


#: The one ``--log-format`` option of ``worker``, ``serve`` and ``relay``: its help shows the choices
#: (``[auto|json|text]``), and click refuses any other value with exit 2 before the command runs.
LogFormatOpt = Annotated[LogFormat, typer.Option("--log-format", envvar="FENCEPOST_LOG_FORMAT", show_envvar=True,
                                                 case_sensitive=False, help=FORMAT_HELP)]


def configure(fmt: str = "json", level: int = logging.INFO) -> None:
    """Send fencepost's logs, and the database driver's (redacted), to stderr as ``json`` or ``text`` lines
    (``auto``: text when stderr is a terminal, json otherwise)."""
    if fmt == "auto":
        fmt = "text" if sys.stderr.isatty() else "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(DriverRedaction())
    root = logging.getLogger("fencepost")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    driver = logging.getLogger("psycopg")
    driver.handlers[:] = [handler]
    driver.setLevel(logging.WARNING)
    driver.propagate = False
