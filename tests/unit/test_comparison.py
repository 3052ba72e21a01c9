"""Semantic comparison (fencepost.evidence.comparison): what is volatile, and where two Attempts differ."""

from __future__ import annotations

import copy
from typing import Any

from fencepost.evidence.comparison import (
    VOLATILE_KEYS,
    attempt_semantics,
    compare_attempts,
    differences,
    semantic_fingerprint,
    semantic_view,
)
from unit.builders import receipts_for


class TestSemanticView:
    def test_every_volatile_key_is_removed_at_any_depth(self) -> None:
        value = {key: {"x": 1} for key in VOLATILE_KEYS}
        value["keep"] = {"nested": [{key: "gone" for key in VOLATILE_KEYS} | {"stay": 1}],
                         "deeper": {"sandbox": {"id": "sbx"}, "run_id": "run_x", "ok": True}}
        assert semantic_view(value) == {"keep": {"nested": [{"stay": 1}], "deeper": {"ok": True}}}

    def test_nothing_else_is_removed(self) -> None:
        value: dict[str, Any] = {
            "execution_time": 5, "sandboxes": ["a"], "run": "r", "attempt": 2, "receipt": {"id": "x"},
            "target": "local-file", "key": "k", "id": "some-id",
            "values_that_look_volatile": ["sandbox", "execution", {"name": "attempt_id"}],
            "list": [3, 1, 2], "null": None, "float": 1.5, "bool": False,
        }
        assert semantic_view(value) == value

    def test_list_order_is_kept_and_input_not_mutated(self) -> None:
        value = {"items": [{"b": 2, "execution": 1}, {"a": 1}], "sandbox": {}}
        before = copy.deepcopy(value)
        assert semantic_view(value) == {"items": [{"b": 2}, {"a": 1}]}
        assert value == before

    def test_scenario_results_are_package_data_and_kept_verbatim(self) -> None:
        # Table names are keys under ``result``: a table called "execution" or "run_id" must stay compared.
        evidence = {"execution": {"worker": "w"}, "sandbox": {"id": "s"},
                    "result": {"tables": {"execution": {"rows": 3}, "sandbox": {"rows": 1}, "run_id": {"rows": 2}}}}
        assert semantic_view(evidence) == {"result": evidence["result"]}
        assert semantic_view([{"position": 1, "evidence": evidence}])[0]["evidence"]["result"] == evidence["result"]

    def test_scalars_pass_through(self) -> None:
        for scalar in (None, 1, "execution", 2.5, True):
            assert semantic_view(scalar) == scalar


class TestDifferences:
    def test_equal_values_have_no_differences(self) -> None:
        value = {"a": [1, {"b": None}], "c": "x"}
        assert differences(value, copy.deepcopy(value)) == []

    def test_nested_changed_value_path(self) -> None:
        left = [{"evidence": {"result": {"tables": {"t": {"content_sha256": "a"}}}}}]
        right = [{"evidence": {"result": {"tables": {"t": {"content_sha256": "b"}}}}}]
        assert differences(left, right) == ["$[0].evidence.result.tables.t.content_sha256"]

    def test_missing_keys_on_either_side(self) -> None:
        assert differences({"a": 1, "b": 2}, {"a": 1, "c": 3}) == ["$.b", "$.c"]

    def test_list_length_difference_and_common_prefix(self) -> None:
        assert differences({"l": [1, 2, 3]}, {"l": [1, 9]}) == ["$.l (length 3 != 2)", "$.l[1]"]

    def test_type_differences_count_even_when_python_says_equal(self) -> None:
        assert differences({"n": 1}, {"n": 1.0}) == ["$.n"]
        assert differences({"n": 1}, {"n": True}) == ["$.n"]
        assert differences({"n": {"a": 1}}, {"n": [1]}) == ["$.n"]

    def test_custom_root_and_limit(self) -> None:
        left = {f"k{i}": i for i in range(10)}
        right = {f"k{i}": -i - 1 for i in range(10)}
        found = differences(left, right, path="root", limit=3)
        assert found == ["root.k0", "root.k1", "root.k2"]


class TestCompareAttempts:
    def test_attempts_that_differ_only_in_volatile_identity_are_equal(self) -> None:
        one, two = receipts_for("att_1"), receipts_for("att_2")
        assert [r.evidence_fingerprint for r in one] != [r.evidence_fingerprint for r in two]
        assert semantic_fingerprint(one) == semantic_fingerprint(two)
        comparison = compare_attempts(("att_1", 1, one), ("att_2", 2, two))
        assert comparison.equal and comparison.differing_paths == []
        assert comparison.baseline.raw[0]["evidence_fingerprint"] == one[0].evidence_fingerprint

    def test_a_semantic_change_names_its_path(self) -> None:
        one = receipts_for("att_1")
        two = receipts_for("att_2", {3: {"tables": {"t": {"rows": 99}}}})
        comparison = compare_attempts(("att_1", 1, one), ("att_2", 2, two))
        assert not comparison.equal
        assert comparison.differing_paths == ["$[2].evidence.result.tables.t.rows"]

    def test_receipt_order_comes_from_position_not_list_order(self) -> None:
        one = receipts_for("att_1")
        assert attempt_semantics(list(reversed(one))) == attempt_semantics(one)
        assert [item["position"] for item in attempt_semantics(one)] == [1, 2, 3, 4, 5, 6]
