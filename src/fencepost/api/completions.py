"""``POST /v1/host/completions/{provider}``: a provider's signed callback for a handoff (host-spec N, §2.6,
§1.Y-14; ADR 0036).

Order of work, each step before the next: the raw body is read; the provider is looked up and the
``Fencepost-Signature`` header verified over those bytes (any failure, an unknown provider included, is one 401 and
a log line, and nothing else happens); the schema is checked; the provider's parser maps the body (422 when it
cannot); ``Host.complete`` decides (200, 404, 409) under the invocation's row lock. The bearer token plays no part:
the signature is this endpoint's authentication.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from fencepost.api import models, problems, signatures
from fencepost.api.context import ApiContext
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import CompletionDisposition
from fencepost.host.webhooks import JSON_PARSER, CompletionParser, CompletionPayload

log = logging.getLogger("fencepost.api")

PATH = "/v1/host/completions/{provider}"
SECURITY_SCHEME = "completionSignature"
MIN_SECRET = 16

#: The one answer to every refused signature: it never says which check failed.
REFUSED = ("the request is not signed for this provider: send a valid, current Fencepost-Signature "
           "(see docs/api.md)")

#: Dispositions answered 200: the completion was taken (recorded, or already on record). The provider must stop
#: re-sending, also after a contradiction (the host kept it for an operator; a 409 would be retried forever).
ANSWERED = {CompletionDisposition.SETTLED, CompletionDisposition.ABSORBED, CompletionDisposition.EVIDENCE_ONLY,
            CompletionDisposition.CONTRADICTED}


@dataclass(frozen=True)
class CompletionProvider:
    """One provider allowed to call back.

    Attributes:
        secrets: the shared secrets it may sign with (one, or the old and the new one while rotating); each at
            least 16 characters. parser: maps its webhook bodies (default: fencepost's JSON body).
    Raises:
        ValueError: no secret, or one shorter than 16 characters.
    """

    secrets: tuple[str, ...]
    parser: CompletionParser = field(default=JSON_PARSER)

    def __post_init__(self) -> None:
        if not self.secrets or any(not isinstance(s, str) or len(s) < MIN_SECRET for s in self.secrets):
            raise ValueError(f"a completion provider needs secrets of at least {MIN_SECRET} characters")
        if not callable(getattr(self.parser, "parse", None)):
            raise ValueError("a completion parser has a parse(body, headers) method")


def providers_of(given: Mapping[str, CompletionProvider | str | Sequence[str]] | None
                 ) -> dict[str, CompletionProvider]:
    """``create_app``'s ``completion_providers``: each value a ``CompletionProvider``, a secret or secrets (the
    JSON parser then). Raises ``ValueError`` for an empty name or a weak secret."""
    found: dict[str, CompletionProvider] = {}
    for name, value in (given or {}).items():
        if not name or len(name) > 100:
            raise ValueError("a completion provider's name is 1 to 100 characters")
        if isinstance(value, CompletionProvider):
            found[name] = value
        else:
            found[name] = CompletionProvider((value,) if isinstance(value, str) else tuple(value))
    return found


def _openapi() -> dict[str, Any]:
    """The request as the default parser reads it; the signature as the operation's security requirement."""
    return {
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": CompletionPayload.model_json_schema()}}},
        "security": [{SECURITY_SCHEME: []}],
    }


completions = APIRouter(tags=["external completions"])


async def _raw_body(request: Request) -> bytes:
    return await request.body()


@completions.post(
    PATH, response_model=models.CompletionAnswer,
    responses={code: {"model": models.Problem, "description": text} for code, text in (
        (401, "invalid-signature: unsigned, wrongly signed, stale, or an unknown provider"),
        (404, "unknown-reference: no handoff has this reference yet; retry later"),
        (409, "still-executing (retry after the invocation parks), or conflict (two invocations hold it)"),
        (413, "payload-too-large"), (422, "the body cannot be parsed as a completion"),
        (503, "the store is unavailable or its schema not ready; nothing was recorded, retry"))},
    openapi_extra=_openapi(),
    summary="Receive a provider's signed completion of a handoff (settles, absorbs, or records it)")
async def receive_completion(provider: str, request: Request) -> Any:
    """Authenticate, parse and decide one callback (module docstring)."""
    ctx: ApiContext = request.app.state.fencepost
    body = await _raw_body(request)
    registered = ctx.completion_providers.get(provider)
    header = request.headers.get(signatures.HEADER)
    reason = "unknown-provider" if registered is None else signatures.refusal(
        header, body, registered.secrets, now=ctx.signature_clock(), window_seconds=ctx.signature_window)
    if reason is not None:
        # The provider named in the path is the caller's text: logged bounded and quoted, never the header or body.
        log.warning("completion refused", extra={"event": "completion_refused", "provider": repr(provider[:100]),
                                                 "reason": reason})
        return problems.problem("invalid-signature", REFUSED, instance=request.url.path,
                                headers={"WWW-Authenticate": signatures.HEADER})
    assert registered is not None and ctx.host is not None  # a registered provider implies a host (create_app)
    return await run_in_threadpool(_decide, ctx, provider, registered, body, dict(request.headers),
                                   request.url.path)


def _decide(ctx: ApiContext, provider: str, registered: CompletionProvider, body: bytes, headers: dict[str, str],
            path: str) -> Any:
    """Parse and complete (in the threadpool: the parser is the application's code, the store blocks)."""
    assert ctx.host is not None
    ctx.require_ready()
    try:
        fields = registered.parser.parse(body, headers)
    except InvalidInput:
        raise
    except (ValueError, KeyError, TypeError) as error:  # a parser reading hostile input: still the caller's input
        log.info("completion body refused by its parser", extra={"event": "completion_unparsable",
                                                                  "provider": provider,
                                                                  "error_type": type(error).__name__})
        raise InvalidInput(f"the body cannot be parsed as a completion of {provider}") from None
    receipt = ctx.host.complete(provider, fields.external_reference, fields.outcome, result=fields.result,
                                error=fields.error, evidence=fields.evidence)
    if receipt.disposition is CompletionDisposition.STILL_EXECUTING:
        return problems.problem("still-executing", receipt.detail, instance=path)
    if receipt.disposition is CompletionDisposition.NOT_FOUND:
        return problems.problem("unknown-reference", receipt.detail, instance=path)
    if receipt.disposition not in ANSWERED:  # pragma: no cover - every disposition is handled above
        raise AssertionError(f"unhandled disposition {receipt.disposition}")
    log.info("completion received", extra={"event": "completion_received", "provider": provider,
                                           "disposition": str(receipt.disposition),
                                           "invocation_id": receipt.invocation_id})
    return JSONResponse({"disposition": str(receipt.disposition), "invocation_id": receipt.invocation_id,
                         "status": str(receipt.status) if receipt.status is not None else None,
                         "detail": receipt.detail})
