"""Plan normalization (ADR-0224, decision 2, step 1): strict, deterministic, before any transaction.

A plan asks to admit one run of one workflow of one installed package::

    {"format": 1, "plan_id": "...", "package": "...", "publication_id": "...", "installation_id": "...",
     "lock": "sha256:...", "workflow_id": "...", "workflow_digest": "sha256:...", "inputs": {...},
     "steps": [{"key": "...", "task": "...", "task_digest": "sha256:...", "needs": [...]}],
     "target_id": "...",              # optional: the delivery target its tasks run on (ADR 0073)
     "digest": "sha256:..."}          # optional on input; recomputed on every normalization

Rules: exactly these keys (``digest`` and ``target_id`` optional; a plan without a target is admitted, but
its steps cannot start; a step may carry ``ready``, which must be right), plain
JSON data, steps sorted by key with unique keys, ``needs`` sorted, unique, known and acyclic, a step is
``ready`` exactly when it needs nothing, at most 128 steps and 256 KiB of canonical JSON, and a
domain-separated SHA-256 digest over everything but the digest itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fencepost.catalog.definitions import MAX_STEPS, check_id, normalize_dag
from fencepost.core.canonical import canonical_json
from fencepost.core.errors import InvalidPlan
from fencepost.core.fingerprint import fingerprint, is_fingerprint

PLAN_FORMAT = 1
MAX_PLAN_BYTES = 256 * 1024
PLAN_DOMAIN = "workflow-plan/v1"
PLAN_KEYS = frozenset({"format", "plan_id", "package", "publication_id", "installation_id", "lock", "workflow_id",
                       "workflow_digest", "inputs", "steps"})
OPTIONAL_KEYS = frozenset({"digest", "target_id"})
STEP_KEYS = frozenset({"key", "task", "task_digest", "needs"})
_PLAN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
#: The prefix of the Run ids fencepost derives (``bundle.run_id``): a plan id may not start with it, since
#: ``workflow status|show|cancel ID`` take either and must never name two Runs (a break-it trial).
RUN_ID_PREFIX = "wfr_"
_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


@dataclass(frozen=True)
class NormalizedPlan:
    """A plan that passed every rule. ``data`` includes ``digest``; ``text`` is its canonical JSON."""

    data: dict[str, Any]
    text: str

    @property
    def plan_id(self) -> str:
        return str(self.data["plan_id"])

    @property
    def digest(self) -> str:
        return str(self.data["digest"])

    @property
    def target_id(self) -> str | None:
        """The delivery target the Run's tasks run on, or None (its steps cannot start)."""
        value = self.data.get("target_id")
        return value if isinstance(value, str) else None

    @property
    def steps(self) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = self.data["steps"]
        return steps


def plan_digest(body: dict[str, Any]) -> str:
    """Digest of a plan body (everything except ``digest``)."""
    return fingerprint(PLAN_DOMAIN, {k: v for k, v in body.items() if k != "digest"})


def _text(value: Any, what: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidPlan(f"plan {what} is missing or malformed")
    return value


def _plan_id(value: Any) -> str:
    plan_id = _text(value, "plan_id", _PLAN_ID_RE)
    if plan_id.startswith(RUN_ID_PREFIX):
        raise InvalidPlan(f"plan plan_id {plan_id!r} starts with {RUN_ID_PREFIX!r}, the prefix of Run ids: a plan "
                          "id is also how commands name its Run, so it may not look like another Run's id")
    return plan_id


def _digest(value: Any, what: str) -> str:
    if not is_fingerprint(value):
        raise InvalidPlan(f"plan {what} must be sha256:<64 lowercase hex>")
    return str(value)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _first_bad_text(value: Any, path: str, bad: Callable[[str], bool]) -> str | None:
    """Where in ``value`` (plain JSON data, already walked by ``canonical_json``, so no deeper) the first string
    or key that ``bad`` refuses is: ``a key at <path>`` or ``the string at <path>`` (paths as ``canonical_json``
    names them), or None."""
    if isinstance(value, str):
        return f"the string at {path}" if bad(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = f"a key at {path}" if bad(key) else _first_bad_text(item, f"{path}.{key}", bad)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if (found := _first_bad_text(item, f"{path}[{i}]", bad)) is not None:
                return found
    return None


def _not_unicode(value: Any, path: str) -> str | None:
    """The first string or key with no UTF-8 form (a lone surrogate), as ``_first_bad_text`` names it."""
    return _first_bad_text(value, path, lambda text: not _encodes(text))


def _holding_nul(value: Any, path: str) -> str | None:
    """The first string or key holding a NUL character, as ``_first_bad_text`` names it: PostgreSQL's text cannot
    hold one, so such a plan was a schema conflict there while SQLite stored it (a break-it trial)."""
    return _first_bad_text(value, path, lambda text: "\x00" in text)


def normalize_plan(raw: Any) -> NormalizedPlan:
    """Normalize ``raw`` (parsed JSON) or raise ``InvalidPlan`` naming the first broken rule.

    Idempotent: ``normalize_plan(normalize_plan(x).data)`` equals ``normalize_plan(x)``.
    """
    # What a plan is comes before what its fields hold: `{"bad": 1}` was told it "names no target" (a trial).
    what = (f'a workflow plan is the JSON object `fencepost workflow plan` writes, with "format": {PLAN_FORMAT} '
            f"and the keys {sorted(PLAN_KEYS - {'format'})}")
    if not isinstance(raw, dict):
        raise InvalidPlan(f"this is not a workflow plan: it is not a JSON object ({what})")
    if "format" not in raw:
        raise InvalidPlan(f'this is not a workflow plan: its "format" field is missing ({what})')
    if raw["format"] != PLAN_FORMAT or isinstance(raw["format"], bool):
        raise InvalidPlan(f"plan format must be {PLAN_FORMAT}")
    keys = set(raw) - OPTIONAL_KEYS
    if keys != PLAN_KEYS:
        missing, extra = sorted(PLAN_KEYS - keys), sorted(keys - PLAN_KEYS)
        raise InvalidPlan(f"plan keys must be exactly {sorted(PLAN_KEYS)} (+ digest, target_id)"
                          + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else ""))
    try:
        canonical_json(raw).encode("utf-8")
    except TypeError as error:
        raise InvalidPlan(f"plan is not plain JSON data: {error}") from None
    except UnicodeEncodeError:
        where = _not_unicode(raw, "$") or "a string"
        raise InvalidPlan(f"plan is not plain JSON data: {where} is not Unicode text (it holds a lone surrogate "
                          "such as \\ud800, which has no UTF-8 form)") from None
    if (nul_at := _holding_nul(raw, "$")) is not None:
        raise InvalidPlan(f"plan is not storable text: {nul_at} holds a NUL character (\\u0000), which no "
                          "backend stores as given")
    if not isinstance(raw["inputs"], dict):
        raise InvalidPlan("plan inputs must be a JSON object")
    steps_raw = raw["steps"]
    if not isinstance(steps_raw, list):
        raise InvalidPlan("plan steps must be a list")
    if len(steps_raw) > MAX_STEPS:
        raise InvalidPlan(f"plan has {len(steps_raw)} steps; at most {MAX_STEPS} are allowed")
    digests: dict[str, str] = {}
    dag_input = []
    for step in steps_raw:
        if not isinstance(step, dict):
            raise InvalidPlan("every plan step must be an object")
        step_keys = set(step) - {"ready"}
        if step_keys != STEP_KEYS:
            raise InvalidPlan(f"a plan step has exactly the keys {sorted(STEP_KEYS)} (+ ready), got {sorted(step)}")
        key = step["key"]
        if isinstance(key, str) and key in digests:
            raise InvalidPlan(f"duplicate step key {key!r}")
        dag_input.append({"key": key, "task": step["task"], "needs": step["needs"]})
        if isinstance(key, str):
            digests[key] = _digest(step["task_digest"], f"step {key!r} task_digest")
    dag = normalize_dag(dag_input, what="plan")
    declared_ready = {s["key"]: s["ready"] for s in steps_raw if "ready" in s}
    steps = []
    for step in dag:
        ready = not step["needs"]
        if step["key"] in declared_ready and declared_ready[step["key"]] is not ready:
            raise InvalidPlan(f"step {step['key']!r} ready must be {str(ready).lower()} (ready means it needs nothing)")
        steps.append({"key": step["key"], "task": step["task"], "task_digest": digests[step["key"]],
                      "needs": step["needs"], "ready": ready})
    body = {
        "format": PLAN_FORMAT,
        "plan_id": _plan_id(raw["plan_id"]),
        "package": _text(raw["package"], "package", _REF_RE),
        "publication_id": _text(raw["publication_id"], "publication_id", _REF_RE),
        "installation_id": _text(raw["installation_id"], "installation_id", _REF_RE),
        "lock": _digest(raw["lock"], "lock"),
        "workflow_id": check_id(raw["workflow_id"], "plan workflow_id"),
        "workflow_digest": _digest(raw["workflow_digest"], "workflow_digest"),
        "inputs": raw["inputs"],
        "steps": steps,
    }
    if "target_id" in raw:  # absent, not null, when there is none: a plan without one keeps its old digest
        body["target_id"] = _text(raw["target_id"], "target_id", _REF_RE)
    body["digest"] = plan_digest(body)
    if "digest" in raw and raw["digest"] != body["digest"]:
        raise InvalidPlan("plan digest does not match its content (the plan was edited after planning)")
    text = canonical_json(body)
    if len(text.encode("utf-8")) > MAX_PLAN_BYTES:
        raise InvalidPlan(f"plan is {len(text.encode('utf-8'))} bytes; at most {MAX_PLAN_BYTES} are allowed")
    return NormalizedPlan(body, text)
