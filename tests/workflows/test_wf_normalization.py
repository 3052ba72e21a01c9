"""Plan normalization rules (ADR-0224 decision 2, step 1; issue 6 "Semantics"), one test per rule.

Pure: no store. The expected values are written out here (key sets, digest construction, limits), not
imported from the implementation, so a changed rule fails a test.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from typing import Any

import pytest

from fencepost.core.errors import InvalidPlan
from fencepost.workflows.bundle import derive_bundle
from fencepost.workflows.plan import normalize_plan

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64
TOP_KEYS = ("format", "plan_id", "package", "publication_id", "installation_id", "lock", "workflow_id",
            "workflow_digest", "inputs", "steps")
STEP_KEYS = ("key", "task", "task_digest", "needs")
LIMIT_BYTES = 256 * 1024


def step(key: str, *needs: str, task: str = "t", digest: str = D3, **extra: Any) -> dict[str, Any]:
    return {"key": key, "task": task, "task_digest": digest, "needs": list(needs), **extra}


def base_plan(steps: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "format": 1, "plan_id": "plan-1", "package": "pair", "publication_id": "pub_1",
        "installation_id": "ins_1", "lock": D1, "workflow_id": "pipeline", "workflow_digest": D2,
        "inputs": {"day": "2026-01-01"},
        "steps": steps if steps is not None else [step("extract"), step("load", "extract")],
    }
    plan.update(overrides)
    return plan


def refused(plan: Any, *needles: str) -> str:
    with pytest.raises(InvalidPlan) as caught:
        normalize_plan(plan)
    message = str(caught.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def oracle_digest(data: dict[str, Any]) -> str:
    """The documented digest: SHA-256 of ``fencepost:workflow-plan/v1\\0`` + canonical JSON (sorted keys,
    no whitespace, UTF-8) of every field but ``digest``."""
    body = {k: v for k, v in data.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(b"fencepost:workflow-plan/v1\x00" + text.encode("utf-8")).hexdigest()


# ── exact keys ──
def test_a_valid_plan_normalizes_with_its_digest_and_ready_flags() -> None:
    plan = normalize_plan(base_plan())
    assert [s["key"] for s in plan.steps] == ["extract", "load"]
    assert [s["ready"] for s in plan.steps] == [True, False]
    assert plan.digest == oracle_digest(plan.data)
    assert plan.text == json.dumps(plan.data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("key", TOP_KEYS)
def test_a_missing_plan_key_is_refused(key: str) -> None:
    plan = base_plan()
    del plan[key]
    refused(plan, "missing", key)


def test_an_unknown_plan_key_is_refused() -> None:
    refused(base_plan(priority=3), "unknown", "priority")


@pytest.mark.parametrize("key", STEP_KEYS)
def test_a_missing_step_key_is_refused(key: str) -> None:
    plan = base_plan()
    del plan["steps"][1][key]
    refused(plan, "exactly the keys")


def test_an_extra_step_key_is_refused() -> None:
    plan = base_plan()
    plan["steps"][0]["retries"] = 2
    refused(plan, "exactly the keys", "retries")


@pytest.mark.parametrize("bad", [None, [], "plan", 3])
def test_a_plan_that_is_not_an_object_is_refused(bad: Any) -> None:
    refused(bad)


@pytest.mark.parametrize(("key", "value"), [
    ("format", 2), ("format", True), ("format", "1"),
    ("plan_id", ""), ("plan_id", "x" * 129), ("plan_id", "has space"), ("plan_id", 7),
    ("package", ""), ("publication_id", None), ("installation_id", "-leading-dash"),
    ("lock", "sha256:" + "A" * 64), ("lock", "sha256:" + "1" * 63), ("workflow_digest", "md5:" + "1" * 64),
    ("workflow_id", "Upper"), ("inputs", []), ("inputs", "x"), ("steps", {}), ("steps", []),
])
def test_a_malformed_field_is_refused(key: str, value: Any) -> None:
    refused(base_plan(**{key: value}))


@pytest.mark.parametrize(("field", "value"), [
    ("key", "Bad Key"), ("key", 3), ("key", "k" * 65), ("task", "Upper"), ("task", None),
    ("task_digest", "sha256:xyz"), ("needs", "extract"), ("needs", [1]),
])
def test_a_malformed_step_field_is_refused(field: str, value: Any) -> None:
    plan = base_plan()
    plan["steps"][1][field] = value
    refused(plan)


def test_limits_of_ids_are_inclusive() -> None:
    plan = normalize_plan(base_plan(plan_id="p" * 128, steps=[step("k" * 64)]))
    assert plan.plan_id == "p" * 128


# ── plain data ──
@pytest.mark.parametrize("inputs", [
    {"x": float("nan")}, {"x": float("inf")}, {"x": [1.0, float("-inf")]}, {"x": {1: "int key"}},
    {"x": {"nested": {(1, 2): "tuple key"}}}, {"x": {1, 2}}, {"x": b"bytes"}, {"x": object()},
])
def test_inputs_must_be_plain_json_data(inputs: dict[str, Any]) -> None:
    refused(base_plan(inputs=inputs), "plain JSON")


@pytest.mark.parametrize(("plan", "where"), [
    (base_plan(inputs={"x": "\ud800"}), "$.inputs.x"),
    (base_plan(inputs={"x": ["ok", {"deep": "a\udfffb"}]}), "$.inputs.x[1].deep"),
    (base_plan(inputs={"\ud800": 1}), "$.inputs"),
    (base_plan(digest="sha256:\ud800"), "$.digest"),
])
def test_a_lone_surrogate_is_not_plain_json_data_and_is_named(plan: dict[str, Any], where: str) -> None:
    """JSON text may spell a lone surrogate (``"\\ud800"``); it has no UTF-8 form, so the plan is refused as bad
    input naming where, never a raw UnicodeEncodeError (found by breaking it)."""
    refused(plan, "plain JSON", where)


@pytest.mark.parametrize(("plan", "where"), [
    (base_plan(inputs={"x": "a\x00b"}), "the string at $.inputs.x"),
    (base_plan(inputs={"x": [{"deep": "\x00"}]}), "the string at $.inputs.x[0].deep"),
    (base_plan(inputs={"k\x00": 1}), "a key at $.inputs"),
])
def test_a_nul_is_refused_naming_where(plan: dict[str, Any], where: str) -> None:
    """PostgreSQL text cannot hold a NUL: such a plan was a schema conflict there (exit 3) and admitted on SQLite;
    it is bad input on both (found by breaking it)."""
    refused(plan, "NUL character", where)


def test_a_plan_id_may_not_look_like_a_run_id() -> None:
    """``workflow status|show|cancel ID`` take a Run id or a plan id: a plan id ``wfr_...`` could name another
    Run, so an operator could check one Run and cancel another (found by breaking it)."""
    refused(base_plan(plan_id="wfr_0123abcd"), "prefix of Run ids")
    assert normalize_plan(base_plan(plan_id="not-wfr_0123")).data["plan_id"] == "not-wfr_0123"


def test_finite_floats_and_nesting_are_plain_data() -> None:
    plan = normalize_plan(base_plan(inputs={"ratio": 0.25, "list": [1, "two", None, True, {"deep": -3.5}]}))
    assert plan.data["inputs"]["list"][4] == {"deep": -3.5}


# ── ordering ──
def test_steps_are_sorted_by_key_and_order_does_not_change_the_digest() -> None:
    steps = [step("c", "a"), step("a"), step("b", "c", "a")]
    plan = normalize_plan(base_plan(steps=steps))
    assert [s["key"] for s in plan.steps] == ["a", "b", "c"]
    assert plan.steps[1]["needs"] == ["a", "c"]
    reordered = normalize_plan(base_plan(steps=[steps[1], steps[2], steps[0]]))
    assert reordered.digest == plan.digest
    assert reordered.text == plan.text


def test_needs_are_sorted() -> None:
    plan = normalize_plan(base_plan(steps=[step("z"), step("m"), step("a", "z", "m")]))
    assert plan.steps[0] == {"key": "a", "task": "t", "task_digest": D3, "needs": ["m", "z"], "ready": False}


# ── unique keys, needs known, acyclic ──
def test_duplicate_step_keys_are_refused() -> None:
    refused(base_plan(steps=[step("a"), step("b"), step("a", "b")]), "duplicate step key", "'a'")


def test_a_duplicate_need_is_refused() -> None:
    refused(base_plan(steps=[step("a"), step("b", "a", "a")]), "need twice")


def test_an_unknown_need_is_refused() -> None:
    refused(base_plan(steps=[step("a"), step("b", "a", "ghost")]), "unknown", "ghost")


def test_a_self_need_is_refused() -> None:
    refused(base_plan(steps=[step("a"), step("b", "b")]), "needs itself")


@pytest.mark.parametrize("steps", [
    [step("a", "b"), step("b", "a")],
    [step("a", "c"), step("b", "a"), step("c", "b")],
    [step("root"), step("a", "root", "c"), step("b", "a"), step("c", "b")],
])
def test_a_cycle_is_refused_and_named(steps: list[dict[str, Any]]) -> None:
    message = refused(base_plan(steps=steps), "cycle")
    cycle = message.split("cycle: ")[1].split(" -> ")
    assert cycle[0] == cycle[-1] and len(cycle) >= 3
    needs = {s["key"]: set(s["needs"]) for s in steps}
    for node, nxt in itertools.pairwise(cycle):
        assert nxt in needs[node], f"{node} -> {nxt} is not an edge of {needs}"


def test_a_diamond_is_acyclic() -> None:
    plan = normalize_plan(base_plan(steps=[step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")]))
    assert [s["ready"] for s in plan.steps] == [True, False, False, False]


# ── ready ──
@pytest.mark.parametrize(("key", "ready"), [("extract", False), ("load", True)])
def test_a_wrong_declared_ready_is_refused(key: str, ready: bool) -> None:
    plan = base_plan()
    next(s for s in plan["steps"] if s["key"] == key)["ready"] = ready
    refused(plan, "ready", key)


@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_ready_must_be_a_boolean(value: Any) -> None:
    plan = base_plan()
    plan["steps"][0]["ready"] = value
    refused(plan, "ready")


def test_a_right_declared_ready_is_accepted() -> None:
    plan = base_plan()
    plan["steps"][0]["ready"] = True
    plan["steps"][1]["ready"] = False
    assert normalize_plan(plan).digest == normalize_plan(base_plan()).digest


# ── size limits ──
def chain(n: int) -> list[dict[str, Any]]:
    return [step(f"s{i:03d}", *([f"s{i - 1:03d}"] if i else [])) for i in range(n)]


def test_128_steps_are_accepted_and_129_refused() -> None:
    assert len(normalize_plan(base_plan(steps=chain(128))).steps) == 128
    refused(base_plan(steps=chain(129)), "129 steps", "128")


def _normalized_size(blob: str) -> int:
    data = normalize_plan(base_plan(inputs={"blob": blob})).data
    return len(json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def test_a_plan_of_exactly_256_kib_is_accepted_and_one_byte_more_refused() -> None:
    room = LIMIT_BYTES - _normalized_size("")
    assert len(normalize_plan(base_plan(inputs={"blob": "x" * room})).text.encode("utf-8")) == LIMIT_BYTES
    refused(base_plan(inputs={"blob": "x" * (room + 1)}), "bytes", str(LIMIT_BYTES))


def test_the_size_limit_counts_utf8_bytes_not_characters() -> None:
    room = LIMIT_BYTES - _normalized_size("")
    # Each "é" is two bytes: fewer characters than the limit, more bytes.
    refused(base_plan(inputs={"blob": "é" * (room // 2 + 1)}), "bytes")
    assert normalize_plan(base_plan(inputs={"blob": "é" * (room // 2)}))


def test_large_inputs_refuse_a_plan_even_with_few_steps() -> None:
    refused(base_plan(inputs={"rows": [{"n": i, "pad": "y" * 100} for i in range(3000)]}), "bytes")


# ── digest ──
def test_the_digest_is_recomputed_and_an_edited_plan_with_a_stale_digest_is_refused() -> None:
    plan = normalize_plan(base_plan()).data
    assert normalize_plan(copy.deepcopy(plan)).digest == plan["digest"]
    for edit in ({"inputs": {"day": "2026-01-02"}}, {"plan_id": "plan-2"}, {"lock": D3}):
        edited = {**copy.deepcopy(plan), **edit}
        refused(edited, "digest does not match")
        without = {k: v for k, v in edited.items() if k != "digest"}
        assert normalize_plan(without).digest == oracle_digest(normalize_plan(without).data) != plan["digest"]


def test_an_edited_step_with_a_stale_digest_is_refused() -> None:
    plan = normalize_plan(base_plan()).data
    edited = copy.deepcopy(plan)
    edited["steps"][1]["task_digest"] = D1
    refused(edited, "digest does not match")


@pytest.mark.parametrize("digest", ["sha256:" + "0" * 64, "garbage", None])
def test_a_wrong_declared_digest_is_refused(digest: Any) -> None:
    refused({**base_plan(), "digest": digest}, "digest")


@pytest.mark.parametrize(("field", "value"), [
    ("plan_id", "plan-2"), ("package", "other"), ("publication_id", "pub_2"), ("installation_id", "ins_2"),
    ("lock", D3), ("workflow_id", "other"), ("workflow_digest", D3), ("inputs", {}),
])
def test_every_field_is_covered_by_the_digest(field: str, value: Any) -> None:
    assert normalize_plan(base_plan(**{field: value})).digest != normalize_plan(base_plan()).digest


def test_every_step_field_is_covered_by_the_digest() -> None:
    digests = {normalize_plan(base_plan()).digest}
    for key, value in (("task", "other"), ("task_digest", D1)):
        plan = base_plan()
        plan["steps"][0][key] = value
        digests.add(normalize_plan(plan).digest)
    digests.add(normalize_plan(base_plan(steps=[step("extract"), step("load")])).digest)
    assert len(digests) == 4


def test_the_digest_is_domain_separated() -> None:
    plan = normalize_plan(base_plan())
    body = {k: v for k, v in plan.data.items() if k != "digest"}
    undomained = "sha256:" + hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
    assert plan.digest != undomained
    assert plan.digest == oracle_digest(plan.data)


def test_normalization_is_idempotent() -> None:
    first = normalize_plan(base_plan(steps=[step("c", "b", "a"), step("b", "a"), step("a")]))
    again = normalize_plan(first.data)
    assert again.data == first.data and again.text == first.text


# ── derived identities ──
def _ids(plan: dict[str, Any]) -> list[str]:
    b = derive_bundle(normalize_plan(plan))
    return [b.run_id, b.receipt_id, b.admitted_event_id, *b.step_run_ids.values(), *b.step_event_ids.values(),
            *b.mutation_ids.values()]


def test_derived_ids_are_deterministic_and_distinct_per_step() -> None:
    plan = base_plan(steps=chain(128))
    ids = _ids(plan)
    assert ids == _ids(copy.deepcopy(plan))
    assert len(ids) == 3 + 3 * 128
    assert len(set(ids)) == len(ids), "two records of one admission share an id"
    bundle = derive_bundle(normalize_plan(plan))
    assert set(bundle.step_run_ids) == {s["key"] for s in plan["steps"]}
    assert all(i.startswith(p) for i, p in ((bundle.run_id, "wfr_"), (bundle.receipt_id, "wrc_")))


@pytest.mark.parametrize("edit", [{"plan_id": "plan-2"}, {"inputs": {"day": "2026-01-02"}}])
def test_another_plan_derives_entirely_other_ids(edit: dict[str, Any]) -> None:
    assert not set(_ids(base_plan())) & set(_ids(base_plan(**edit)))


def test_derived_ids_do_not_depend_on_input_order() -> None:
    steps = [step("b", "a"), step("a")]
    assert _ids(base_plan(steps=steps)) == _ids(base_plan(steps=list(reversed(steps))))
