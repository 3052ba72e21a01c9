"""``--telemetry log|otel`` of ``fencepost worker`` and ``fencepost serve`` (host-spec S1, W1; ADR 0046).

``log`` (the default) keeps the host's own sink (log records under ``fencepost.host``). ``otel`` adds the
OpenTelemetry sink (``fencepost.host.otel.OtelTelemetry``) over the global providers, which the process gets from
``opentelemetry-instrument`` and the standard ``OTEL_*`` variables, or from the ``--app`` module itself
(docs/operations.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from fencepost.core.errors import InvalidInput

if TYPE_CHECKING:
    from fencepost.host import Host

CHOICES = ("log", "otel")

# The backslash keeps rich markup from eating "[otel]" in --help.
TelemetryOpt = Annotated[str, typer.Option(
    "--telemetry", envvar="FENCEPOST_TELEMETRY", show_envvar=True,
    help="log: the host's telemetry as log records; otel: also as OpenTelemetry spans and metrics through the "
         "global providers (run under opentelemetry-instrument with OTEL_* variables; needs "
         "pip install 'fencepost\\[otel]'). Applies to --app's host.")]


def attach_telemetry(host: Host | None, choice: str) -> None:
    """Add the sink ``choice`` names to ``host`` (before its handler is built).

    Raises:
        InvalidInput: an unknown choice; ``otel`` without ``--app`` or without ``opentelemetry-api`` installed.
    """
    if choice not in CHOICES:
        raise InvalidInput(f"--telemetry must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "log":
        return
    if host is None:
        raise InvalidInput("--telemetry otel needs --app: it reports that host's invocations")
    try:
        from fencepost.host.otel import OtelTelemetry
    except ImportError:
        raise InvalidInput("--telemetry otel needs OpenTelemetry: pip install 'fencepost[otel]'") from None
    host.add_telemetry(OtelTelemetry())
