"""Publication definitions and installation locks (pure).

A publication binds a package version to its exact content digest and its task and workflow digests. An
installation's lock binds it to one exact publication, so a quarantine of "this installation at this
lock" names precisely what was quarantined.
"""

from __future__ import annotations

from typing import Any

from fencepost.core.fingerprint import fingerprint

DEFINITION_DOMAIN = "package-publication/v1"
LOCK_DOMAIN = "installation-lock/v1"


def publication_definition(*, package: str, version: str, content_digest: str, tasks: dict[str, str],
                           workflows: dict[str, tuple[str, list[dict[str, Any]]]],
                           timeouts: dict[str, int] | None = None) -> dict[str, Any]:
    """The immutable definition a publication stores.

    Args:
        tasks: task id -> source digest.
        workflows: workflow id -> (definition digest, normalized steps).
        timeouts: task id -> declared ``timeout_seconds`` (ADR 0074); a task without one has no such key, so
            the definition of a package that declares none is what it always was.
    """
    timeouts = timeouts or {}
    return {"package": package, "version": version, "content_digest": content_digest,
            "tasks": {tid: {"digest": digest, **({"timeout_seconds": timeouts[tid]} if tid in timeouts else {})}
                      for tid, digest in sorted(tasks.items())},
            "workflows": {wid: {"digest": digest, "steps": steps}
                          for wid, (digest, steps) in sorted(workflows.items())}}


def definition_digest(definition: dict[str, Any]) -> str:
    return fingerprint(DEFINITION_DOMAIN, definition)


def lock_digest(publication_id: str, content_digest: str, definition_digest_: str) -> str:
    """The lock of an installation of exactly this publication."""
    return fingerprint(LOCK_DOMAIN, {"publication_id": publication_id, "content_digest": content_digest,
                                     "definition_digest": definition_digest_})
