"""Canonical JSON: one byte string per value, so fingerprints are reproducible.

Rules: object keys sorted, no insignificant whitespace, UTF-8 without escaping, and
only plain JSON data (dict with str keys, list, str, int, bool, None; floats must be finite).
Tuples are accepted and encoded as lists. Anything else raises ``TypeError``.
"""

from __future__ import annotations

import json
import math
from typing import Any

JSONValue = Any  # a plain JSON value: dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"non-finite number at {path}")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"non-string key {key!r} at {path}")
            _check(item, f"{path}.{key}")
        return
    raise TypeError(f"value of type {type(value).__name__} at {path} is not plain JSON data")


def canonical_json(value: JSONValue) -> str:
    """Return the canonical JSON text of ``value``.

    Args:
        value: plain JSON data (see module docstring).
    Returns:
        The canonical text (``str``); encode as UTF-8 for hashing.
    Raises:
        TypeError: if ``value`` holds anything that is not plain JSON data.
    """
    try:
        _check(value, "$")
    except RecursionError:
        raise TypeError("value nests too deeply to be canonical JSON") from None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: JSONValue) -> bytes:
    """Return ``canonical_json(value)`` encoded as UTF-8 bytes."""
    return canonical_json(value).encode("utf-8")


def _refuse_constant(literal: str) -> Any:
    raise ValueError(f"non-finite number literal {literal!r} in JSON")


#: One decoder for every parse: ``json.loads`` with a keyword builds a new ``JSONDecoder`` on each call, which
#: was a third of the time a worker spent parsing its claimed payloads (py-spy, 100-command claims).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r} in a JSON object")
        seen[key] = value
    return seen


_INPUT_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)


def parse_input_json(text: str) -> JSONValue:
    """Parse JSON that a person or a program hands in (a command-line option): as ``parse_json``, and an object
    that names one key twice is refused instead of keeping the last value, which would silently drop the first
    (``{"amount": 5, "amount": 500}``).

    Raises:
        ValueError: as ``parse_json``, or a duplicate key (named). ``json.JSONDecodeError`` (a ValueError) for
            malformed JSON.
    """
    try:
        return _INPUT_DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nests too deeply") from None


def parse_json(text: str) -> JSONValue:
    """Parse JSON text, refusing NaN/Infinity literals (they have no canonical form).

    Raises:
        ValueError: on malformed JSON, a non-finite literal, or nesting too deep to parse.
    """
    if isinstance(text, bytes | bytearray):  # as json.loads takes them
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nests too deeply") from None
