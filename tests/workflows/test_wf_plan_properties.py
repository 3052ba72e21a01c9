"""Property tests of plan normalization against an independent oracle (issue 6, "Proof").

Random DAGs are built, then damaged at random (cycles, self-needs, duplicate keys, duplicate needs,
unknown needs, wrong ``ready`` declarations, too many steps, too many bytes). The oracle below decides
validity and the normalized form on its own (Kahn's algorithm for cycles, its own key pattern, its own
canonical JSON size) and never calls the implementation; normalization must agree exactly, raise only
``InvalidPlan`` when refusing, and be idempotent and order-independent when accepting.
"""

from __future__ import annotations

import copy
import json
import string
from collections import deque
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencepost.core.errors import InvalidPlan
from fencepost.workflows.plan import normalize_plan

DIGEST = "sha256:" + "ab" * 32
TASK_DIGEST = "sha256:" + "cd" * 32
MAX_STEPS = 128
MAX_BYTES = 256 * 1024
KEY_FIRST = set(string.ascii_lowercase + string.digits)
KEY_REST = KEY_FIRST | {"_", "-"}


# ── the oracle ──
def key_ok(key: Any) -> bool:
    return (isinstance(key, str) and 1 <= len(key) <= 64 and key[0] in KEY_FIRST
            and all(c in KEY_REST for c in key))


def acyclic(graph: dict[str, list[str]]) -> bool:
    """Kahn's algorithm: every node can be removed once its needs are removed."""
    pending = {node: len(set(needs)) for node, needs in graph.items()}
    dependants: dict[str, list[str]] = {node: [] for node in graph}
    for node, needs in graph.items():
        for need in set(needs):
            dependants[need].append(node)
    queue = deque(node for node, count in pending.items() if count == 0)
    removed = 0
    while queue:
        node = queue.popleft()
        removed += 1
        for dependant in dependants[node]:
            pending[dependant] -= 1
            if pending[dependant] == 0:
                queue.append(dependant)
    return removed == len(graph)


def oracle(plan: dict[str, Any]) -> dict[str, Any] | None:
    """The normalized plan body (without digest) if ``plan`` is valid, else None."""
    steps = plan["steps"]
    if not 1 <= len(steps) <= MAX_STEPS:
        return None
    keys = [s["key"] for s in steps]
    if not all(key_ok(k) for k in keys) or len(set(keys)) != len(keys):
        return None
    for s in steps:
        needs = s["needs"]
        if len(set(needs)) != len(needs) or s["key"] in needs or any(n not in keys for n in needs):
            return None
        if "ready" in s and s["ready"] is not (not needs):
            return None
    if not acyclic({s["key"]: s["needs"] for s in steps}):
        return None
    body = {k: v for k, v in plan.items() if k != "digest"}
    body["steps"] = sorted(({"key": s["key"], "task": s["task"], "task_digest": s["task_digest"],
                             "needs": sorted(s["needs"]), "ready": not s["needs"]} for s in steps),
                           key=lambda s: s["key"])
    text = json.dumps({**body, "digest": DIGEST}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode("utf-8")) > MAX_BYTES:
        return None
    return body


# ── generators ──
KEYS = st.sampled_from([*"abcdefgh", "step-1", "step_2", "z9"])


@st.composite
def dags(draw: st.DrawFn) -> dict[str, Any]:
    """A random DAG (needs only point to earlier steps), then random damage."""
    size = draw(st.one_of(st.integers(1, 8), st.integers(1, 8), st.integers(126, 130)))
    if size > 8:
        keys = [f"s{i:03d}" for i in range(size)]
    else:
        keys = draw(st.lists(KEYS, min_size=size, max_size=size, unique=True))
    steps: list[dict[str, Any]] = []
    for i, key in enumerate(keys):
        if size > 8:  # a long chain, built without a draw per step (keeps the examples cheap)
            steps.append({"key": key, "task": "load", "task_digest": TASK_DIGEST, "needs": keys[i - 1:i]})
            continue
        needs = draw(st.lists(st.sampled_from(keys[:i]), unique=True, max_size=3)) if i else []
        steps.append({"key": key, "task": draw(st.sampled_from(["extract", "load"])), "task_digest": TASK_DIGEST,
                      "needs": needs})
        ready = draw(st.sampled_from(["absent", "absent", "right", "wrong"]))
        if ready != "absent":
            steps[-1]["ready"] = (not needs) if ready == "right" else bool(needs)
    for _ in range(draw(st.integers(0, 2))):
        damage = draw(st.sampled_from(["cycle", "self", "duplicate-key", "duplicate-need", "unknown", "bad-key",
                                       "none"]))
        target = draw(st.integers(0, len(steps) - 1))
        other = draw(st.integers(0, len(steps) - 1))
        if damage == "cycle":
            steps[other]["needs"].append(steps[target]["key"])   # may or may not close a cycle
        elif damage == "self":
            steps[target]["needs"].append(steps[target]["key"])
        elif damage == "duplicate-key":
            steps.append({**copy.deepcopy(steps[target]), "needs": []})
        elif damage == "duplicate-need" and steps[target]["needs"]:
            steps[target]["needs"].append(steps[target]["needs"][0])
        elif damage == "unknown":
            steps[target]["needs"].append("ghost")
        elif damage == "bad-key":
            steps[target]["key"] = draw(st.sampled_from(["", "Upper", "-dash", "k" * 65, "sp ace"]))
    order = draw(st.permutations(list(range(len(steps)))))
    pad = draw(st.one_of(st.just(0), st.integers(MAX_BYTES - 2000, MAX_BYTES)))
    return {"format": 1, "plan_id": "prop-plan", "package": "pair", "publication_id": "pub_1",
            "installation_id": "ins_1", "lock": DIGEST, "workflow_id": "pipeline", "workflow_digest": DIGEST,
            "inputs": {"pad": "p" * pad} if pad else {}, "steps": [steps[i] for i in order]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_normalization_agrees_with_the_oracle(plan: dict[str, Any]) -> None:
    expected = oracle(copy.deepcopy(plan))
    try:
        normalized = normalize_plan(copy.deepcopy(plan))
    except InvalidPlan:
        assert expected is None, f"refused a plan the rules accept: {json.dumps(plan)[:400]}"
        return
    assert expected is not None, f"accepted a plan the rules refuse: {json.dumps(plan)[:400]}"
    assert {k: v for k, v in normalized.data.items() if k != "digest"} == expected
    # idempotent, and independent of the order of steps and needs
    again = normalize_plan(normalized.data)
    assert (again.data, again.text) == (normalized.data, normalized.text)
    shuffled = copy.deepcopy(plan)
    shuffled["steps"] = [{**s, "needs": list(reversed(s["needs"]))} for s in reversed(shuffled["steps"])]
    assert normalize_plan(shuffled).text == normalized.text


@settings(max_examples=100, deadline=None)
@given(dags())
def test_refusal_is_always_invalid_plan_never_another_error(plan: dict[str, Any]) -> None:
    # Damage the types too: the refusal must still be an InvalidPlan (never TypeError/KeyError).
    plan["steps"][0]["needs"] = [plan["steps"][0]["needs"], 3]
    try:
        normalize_plan(plan)
    except InvalidPlan:
        return
    raise AssertionError("a step with non-string needs was accepted")


def test_the_generator_reaches_both_verdicts_and_every_damage() -> None:
    """Guard against a vacuous property: the strategy yields valid and invalid plans of every kind."""
    seen: set[str] = set()

    # Derandomized: a coverage check of the strategy itself must not depend on the run's luck (200 random
    # examples missed a category about once in a few hundred full runs).
    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(dags())
    def collect(plan: dict[str, Any]) -> None:
        steps = plan["steps"]
        keys = [s["key"] for s in steps]
        seen.add("valid" if oracle(copy.deepcopy(plan)) is not None else "invalid")
        if len(steps) > MAX_STEPS:
            seen.add("oversize-steps")
        if len(set(keys)) != len(keys):
            seen.add("duplicate-key")
        if any(s["key"] in s["needs"] for s in steps):
            seen.add("self")
        if any("ghost" in s["needs"] for s in steps):
            seen.add("unknown")
        if any(len(set(s["needs"])) != len(s["needs"]) for s in steps):
            seen.add("duplicate-need")
        known = set(keys)
        graph = {s["key"]: [n for n in s["needs"] if n in known and n != s["key"]] for s in steps}
        if len(set(keys)) == len(keys) and not acyclic(graph):
            seen.add("cycle")
        if len(json.dumps(plan).encode()) > MAX_BYTES:
            seen.add("oversize-bytes")

    collect()
    assert seen >= {"valid", "invalid", "oversize-steps", "duplicate-key", "self", "unknown", "duplicate-need",
                    "cycle", "oversize-bytes"}, seen
