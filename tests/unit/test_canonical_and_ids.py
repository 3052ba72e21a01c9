"""Canonical JSON, fingerprints and derived ids (fencepost.core)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from fencepost.core.canonical import canonical_bytes, canonical_json, parse_input_json, parse_json
from fencepost.core.fingerprint import fingerprint, is_fingerprint, sha256_bytes
from fencepost.core.ids import derived_id, new_id
from fencepost.store.open import open_store


class TestCanonicalJson:
    def test_keys_are_sorted_at_every_depth_and_whitespace_is_dropped(self) -> None:
        value = {"b": 1, "a": {"z": [3, {"y": 2, "x": 1}], "c": None}}
        assert canonical_json(value) == '{"a":{"c":null,"z":[3,{"x":1,"y":2}]},"b":1}'

    def test_insertion_order_never_changes_the_text(self) -> None:
        one = {"alpha": 1, "beta": [1, 2], "gamma": {"k": "v", "j": True}}
        two = {"gamma": {"j": True, "k": "v"}, "beta": [1, 2], "alpha": 1}
        assert canonical_json(one) == canonical_json(two)

    def test_list_order_is_significant(self) -> None:
        assert canonical_json([1, 2]) != canonical_json([2, 1])

    def test_unicode_is_written_as_utf8_not_escaped(self) -> None:
        assert canonical_json({"name": "Motörhead – ∑"}) == '{"name":"Motörhead – ∑"}'
        assert canonical_bytes({"n": "ö"}) == '{"n":"ö"}'.encode()

    def test_tuples_encode_as_lists(self) -> None:
        assert canonical_json({"t": (1, "a")}) == '{"t":[1,"a"]}'

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_non_finite_numbers_are_refused_with_their_path(self, bad: float) -> None:
        with pytest.raises(TypeError, match=r"non-finite number at \$\.outer\[1\]"):
            canonical_json({"outer": [1.5, bad]})

    @pytest.mark.parametrize("key", [1, 2.5, None, True, ("a",)])
    def test_non_string_keys_are_refused(self, key: object) -> None:
        with pytest.raises(TypeError, match="non-string key"):
            canonical_json({"ok": {key: 1}})

    @pytest.mark.parametrize("bad", [{1, 2}, b"bytes", object()])
    def test_values_that_are_not_plain_json_are_refused(self, bad: object) -> None:
        with pytest.raises(TypeError, match="not plain JSON data"):
            canonical_json({"x": bad})

    def test_parse_refuses_non_finite_literals(self) -> None:
        for literal in ("NaN", "Infinity", "-Infinity"):
            with pytest.raises(ValueError, match="non-finite"):
                parse_json(f'{{"x": {literal}}}')

    def test_parse_takes_utf8_and_utf16_bytes_as_json_loads_does(self) -> None:
        text = '{"name": "Zoë", "n": [1, 2.5]}'
        assert parse_json(text.encode("utf-8")) == parse_json(text.encode("utf-16")) == parse_json(text)

    def test_a_refused_literal_does_not_spoil_the_next_parse(self) -> None:
        with pytest.raises(ValueError, match="non-finite"):
            parse_json("[NaN]")
        assert parse_json('{"x": 1}') == {"x": 1}

    def test_parse_then_canonical_round_trips(self) -> None:
        text = canonical_json({"b": [1, 2.5, "x"], "a": {"c": False}})
        assert canonical_json(parse_json(text)) == text


class TestFingerprint:
    def test_shape_is_sha256_prefix_and_64_lowercase_hex(self) -> None:
        fp = fingerprint("receipt-evidence/v1", {"a": 1})
        assert is_fingerprint(fp)
        assert fp.startswith("sha256:") and len(fp) == 71

    def test_same_value_same_domain_is_stable_across_key_order(self) -> None:
        assert fingerprint("d/v1", {"a": 1, "b": 2}) == fingerprint("d/v1", {"b": 2, "a": 1})

    def test_domains_separate_identical_content(self) -> None:
        value = {"scenario": "integrity_check"}
        assert fingerprint("receipt-evidence/v1", value) != fingerprint("attempt-semantics/v1", value)

    def test_hash_input_is_prefix_domain_nul_then_canonical_bytes(self) -> None:
        value = {"b": [1, "ö"], "a": None}
        expected = hashlib.sha256(b"fencepost:receipt-evidence/v1\x00" + canonical_bytes(value)).hexdigest()
        assert fingerprint("receipt-evidence/v1", value) == "sha256:" + expected

    def test_nul_in_domain_is_refused_so_the_boundary_cannot_shift(self) -> None:
        with pytest.raises(ValueError, match="NUL"):
            fingerprint("a\x00b", "c")

    def test_fingerprint_is_not_the_plain_hash_of_the_canonical_bytes(self) -> None:
        value = {"a": 1}
        assert fingerprint("d/v1", value) != sha256_bytes(canonical_bytes(value))

    def test_empty_domain_is_refused(self) -> None:
        with pytest.raises(ValueError, match="domain"):
            fingerprint("", {"a": 1})

    def test_value_must_be_plain_json(self) -> None:
        with pytest.raises(TypeError):
            fingerprint("d/v1", {"a": math.nan})

    @pytest.mark.parametrize("text", ["sha256:" + "A" * 64, "sha256:" + "a" * 63, "md5:" + "a" * 64, 42, None])
    def test_is_fingerprint_refuses_other_shapes(self, text: object) -> None:
        assert not is_fingerprint(text)


class TestIds:
    def test_derived_ids_are_deterministic(self) -> None:
        identity = {"run": "run_1", "steps": ["a", "b"]}
        reordered = {"steps": ["a", "b"], "run": "run_1"}
        assert derived_id("plan", "workflow-plan/v1", identity) == derived_id("plan", "workflow-plan/v1", reordered)

    def test_derived_ids_differ_by_identity_and_by_domain(self) -> None:
        base = derived_id("x", "d/v1", {"k": 1})
        assert base != derived_id("x", "d/v1", {"k": 2})
        assert base != derived_id("x", "d/v2", {"k": 1})

    def test_derived_id_shape(self) -> None:
        value = derived_id("run", "d/v1", [1, 2, 3])
        prefix, _, digest = value.partition("_")
        assert prefix == "run"
        assert len(digest) == 32 and all(c in "0123456789abcdef" for c in digest)
        assert digest == fingerprint("d/v1", [1, 2, 3])[7:39]

    def test_new_ids_are_random_with_prefix(self) -> None:
        ids = {new_id("att") for _ in range(200)}
        assert len(ids) == 200
        assert all(i.startswith("att_") and len(i) == 4 + 26 for i in ids)


def test_json_nested_too_deeply_is_a_value_error_not_a_crash() -> None:
    from fencepost.core.canonical import parse_json

    with pytest.raises(ValueError, match="nests too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000)


def test_an_enqueue_with_a_lone_surrogate_is_refused_as_not_plain_json_data(tmp_path: Path) -> None:
    """Found by the break-it trial of issue 10: an enqueue with one raised a raw UnicodeEncodeError from the driver."""
    store = open_store(f"sqlite:///{tmp_path / 'fp.db'}")
    store.migrate()
    with pytest.raises(TypeError, match="lone surrogate"):
        store.transact(lambda tx: tx.outbox.insert(command_id="c1", kind="k", payload={"x": "\udfff"}))
    assert store.read(lambda tx: tx.outbox.get("c1")) is None
    store.close()


@pytest.mark.parametrize("payload", [[1], 3, "text", None])
def test_an_enqueued_payload_that_is_not_a_json_object_is_refused(tmp_path: Path, payload: object) -> None:
    """Found by the break-it trial of ADR 0093: ``insert(payload=[1])`` was stored, and every worker that later
    claimed the command failed reading it back as an object and exited, leaving its batch to be run again."""
    store = open_store(f"sqlite:///{tmp_path / 'fp.db'}")
    store.migrate()
    with pytest.raises(TypeError, match="must be a JSON object"):
        store.transact(lambda tx: tx.outbox.insert(command_id="c1", kind="k", payload=payload))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a JSON object"):
        store.transact(lambda tx: tx.outbox.insert_leased(command_id="c2", kind="k", payload=payload,  # type: ignore[arg-type]
                                                          owner="w", lease_seconds=5))
    assert store.read(lambda tx: (tx.outbox.get("c1"), tx.outbox.get("c2"))) == (None, None)
    store.close()


def test_a_value_nested_deeper_than_it_could_be_read_back_is_refused_at_write() -> None:
    """A break-it trial: a payload nested 988 deep was written and then failed every claim that read it back
    (the parser ran deeper in the stack than the writer's check)."""
    from fencepost.core.canonical import MAX_DEPTH

    def nested(depth: int) -> object:
        value: object = 1
        for _ in range(depth):
            value = [value]
        return value

    assert parse_json(canonical_json({"pad": nested(MAX_DEPTH - 1)})) == {"pad": nested(MAX_DEPTH - 1)}
    with pytest.raises(TypeError, match=f"nests deeper than {MAX_DEPTH} levels"):
        canonical_json({"pad": nested(MAX_DEPTH)})
    with pytest.raises(TypeError, match=r"nests too deeply|nests deeper"):
        canonical_json(nested(5000))


def test_an_integer_too_long_to_be_read_back_is_refused_at_write() -> None:
    with pytest.raises(TypeError, match="more digits than JSON readers accept"):
        canonical_json({"n": 10 ** 5000})  # built by arithmetic: int("1" * 5000) is refused by Python itself
    for digits in (4000, 4299, 4300):  # every integer Python reads back is accepted (a break-it trial: 4,298-4,300)
        big = 10 ** (digits - 1) + 7
        assert parse_json(canonical_json({"n": big})) == {"n": big}
    with pytest.raises(TypeError, match="more digits"):
        canonical_json({"n": 10 ** 4300})  # 4,301 digits


def test_an_integer_too_long_to_read_is_named_without_pythons_advice() -> None:
    """A break-it trial: a plan with a 5,000-digit integer was refused with "use sys.set_int_max_str_digits() to
    increase the limit", advice for a programmer shown to an operator."""
    text = '{"n": ' + "9" * 5000 + "}"
    for parse in (parse_json, parse_input_json):
        with pytest.raises(ValueError) as refused:
            parse(text)
        assert "integer of more than 4300 digits" in str(refused.value)
        assert "sys." not in str(refused.value)


def test_bytes_that_encode_a_surrogate_are_not_text() -> None:
    """A break-it trial: stored bytes ED A0 80 (a surrogate, which UTF-8 forbids) were decoded leniently and the
    command's handler ran on a lone surrogate; they are unreadable text like any other invalid UTF-8."""
    with pytest.raises(ValueError):
        parse_json(b'{"a":"\xed\xa0\x80"}')


def test_a_lone_surrogate_is_refused_as_not_plain_json() -> None:
    """A break-it trial: a handler's result holding ``os.fsdecode(b"report-\\xff.csv")`` passed the canonical check,
    the step charged the provider, and only the driver's UTF-8 encoding failed, at finalization."""
    import os

    odd = os.fsdecode(b"report-\xff.csv")
    for value in ({"file": odd}, {odd: 1}, [odd]):
        with pytest.raises(TypeError, match="lone surrogate"):
            canonical_json(value)
    assert canonical_json({"café": "naïve ✓"}) == '{"café":"naïve ✓"}'
