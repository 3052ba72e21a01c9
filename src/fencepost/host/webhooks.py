"""Completion parsers: a provider's webhook body mapped to the fields of a completion (host-spec §2.6, §1.Y-14;
ADR 0036).

The HTTP endpoint (``fencepost.api.completions``) authenticates the request first, then hands the raw body and
headers to the provider's parser, then calls ``Host.complete`` with what the parser returned. A parser lives here,
in the host layer, so that an application defines its vendors' parsers next to its ``Host`` without importing the
HTTP layer.

A parser must map a delivery to the same fields every time the provider re-sends it: a delivery id, an attempt
counter or the signature's timestamp put into ``evidence`` would make a retry differ from the first delivery, and
the host would take it for a contradiction (N6, N7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import CompletionOutcome
from fencepost.host.completion import MAX_ERROR, MAX_REFERENCE


@dataclass(frozen=True)
class CompletionFields:
    """What a provider reported, without the provider (the endpoint's path names it).

    Attributes: the arguments of ``Host.complete`` after ``provider``: external_reference, outcome
    (``completed`` or ``failed``), result and evidence (JSON objects or None), error (text or None).
    """

    external_reference: str
    outcome: CompletionOutcome | str
    result: dict[str, Any] | None = None
    error: str | None = None
    evidence: dict[str, Any] | None = None


class CompletionParser(Protocol):
    """Maps one authenticated webhook delivery to a completion.

    ``parse`` gets the raw body bytes (exactly what was signed) and the request headers (lower-case names). It
    returns ``CompletionFields`` and raises ``InvalidInput`` for a body it cannot map (the endpoint answers 422;
    ``ValueError``, ``KeyError`` and ``TypeError`` are answered alike, anything else is a bug: 500).
    """

    def parse(self, body: bytes, headers: Mapping[str, str]) -> CompletionFields: ...


class CompletionPayload(BaseModel):
    """fencepost's own completion body, read by ``JsonCompletionParser`` (published in the OpenAPI document)."""

    model_config = ConfigDict(extra="forbid")
    external_reference: str = Field(min_length=1, max_length=MAX_REFERENCE,
                                    description="The reference the provider gave when it accepted the operation.")
    outcome: Literal["completed", "failed"]
    result: dict[str, Any] | None = Field(default=None, description="The provider's result (completed).")
    error: str | None = Field(default=None, max_length=MAX_ERROR, description="The provider's error text (failed).")
    evidence: dict[str, Any] | None = Field(default=None, description="Anything else worth keeping.")


class JsonCompletionParser:
    """The default parser: the body is a ``CompletionPayload`` in JSON (UTF-8), unknown keys refused."""

    def parse(self, body: bytes, headers: Mapping[str, str]) -> CompletionFields:
        """Returns the payload's fields. Raises ``InvalidInput`` naming the first problem (never echoing values)."""
        try:
            payload = CompletionPayload.model_validate_json(body)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ())) or "body"
            raise InvalidInput(f"the completion body is not valid: {where}: {first.get('msg', 'invalid')} "
                               f"({error.error_count()} error(s))") from None
        return CompletionFields(payload.external_reference, CompletionOutcome(payload.outcome), payload.result,
                                payload.error, payload.evidence)


JSON_PARSER = JsonCompletionParser()
