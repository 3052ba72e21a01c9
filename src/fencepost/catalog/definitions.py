"""Workflow DAG rules shared by package manifests and plans (ADR-0224, decision 2).

A workflow is a DAG of at most 128 steps. A step has a key, names a task, and lists the steps it needs.
Normalization sorts steps by key and ``needs`` within each step, and refuses duplicates, unknown needs,
self-needs and cycles. The definition digest is a domain-separated SHA-256 over the normalized form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fencepost.core.errors import InvalidPlan
from fencepost.core.fingerprint import fingerprint

MAX_STEPS = 128
KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def check_id(value: Any, what: str) -> str:
    """Return ``value`` if it is a valid task/workflow id, else raise InvalidPlan."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise InvalidPlan(f"{what} must match [a-z0-9][a-z0-9_.-]* (at most 64 chars), got {value!r}")
    return value


def normalize_dag(steps: Sequence[Any], *, what: str = "workflow") -> list[dict[str, Any]]:
    """Validate and normalize DAG steps ``[{"key", "task", "needs"}]``.

    Returns:
        Steps sorted by key, each ``{"key", "task", "needs"}`` with ``needs`` sorted.
    Raises:
        InvalidPlan: not a list of objects with exactly those keys, more than ``MAX_STEPS`` steps, a bad
            or duplicate key, an unknown need, a self-need, a duplicate need, or a cycle (naming it).
    """
    if not isinstance(steps, list) or not steps:
        raise InvalidPlan(f"{what}: steps must be a non-empty list")
    if len(steps) > MAX_STEPS:
        raise InvalidPlan(f"{what}: {len(steps)} steps; at most {MAX_STEPS} are allowed")
    out: dict[str, dict[str, Any]] = {}
    for step in steps:
        if not isinstance(step, dict):
            raise InvalidPlan(f"{what}: every step must be an object")
        extra = set(step) - {"key", "task", "needs"}
        if extra or "key" not in step or "task" not in step:
            raise InvalidPlan(f"{what}: a step has exactly the keys key, task and needs (got {sorted(step)})")
        key = step["key"]
        if not isinstance(key, str) or not KEY_RE.fullmatch(key):
            raise InvalidPlan(f"{what}: step key {key!r} must match [a-z0-9][a-z0-9_-]* (at most 64 chars)")
        if key in out:
            raise InvalidPlan(f"{what}: duplicate step key {key!r}")
        needs = step.get("needs", [])
        if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
            raise InvalidPlan(f"{what}: step {key!r} needs must be a list of step keys")
        if len(set(needs)) != len(needs):
            raise InvalidPlan(f"{what}: step {key!r} lists a need twice")
        if key in needs:
            raise InvalidPlan(f"{what}: step {key!r} needs itself")
        out[key] = {"key": key, "task": check_id(step["task"], f"{what}: step {key!r} task"),
                    "needs": sorted(needs)}
    for key, step in out.items():
        unknown = [n for n in step["needs"] if n not in out]
        if unknown:
            raise InvalidPlan(f"{what}: step {key!r} needs unknown step(s) {', '.join(unknown)}")
    cycle = find_cycle({k: s["needs"] for k, s in out.items()})
    if cycle:
        raise InvalidPlan(f"{what}: steps form a cycle: {' -> '.join(cycle)}")
    return [out[k] for k in sorted(out)]


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A cycle in ``graph`` (node -> needs) as a closed path, or None when acyclic (iterative DFS)."""
    state: dict[str, int] = {}  # 1 = on stack, 2 = done
    for root in sorted(graph):
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = []
        while stack:
            node, index = stack.pop()
            if index == 0:
                state[node] = 1
                path.append(node)
            children = graph[node]
            if index < len(children):
                stack.append((node, index + 1))
                child = children[index]
                if state.get(child) == 1:
                    return [*path[path.index(child):], child]
                if not state.get(child):
                    stack.append((child, 0))
            else:
                state[node] = 2
                path.pop()
    return None


def workflow_digest(workflow_id: str, steps: list[dict[str, Any]]) -> str:
    """Digest of a normalized workflow definition (``normalize_dag`` output)."""
    return fingerprint("workflow-definition/v1", {"id": workflow_id, "steps": steps})
