"""Canonical JSON: one byte string per value, so fingerprints are reproducible.

Rules: object keys sorted, no insignificant whitespace, UTF-8 without escaping, and
only plain JSON data (dict with str keys, list, str, int, bool, None; floats must be finite).
Tuples are accepted and encoded as lists. Anything else raises ``TypeError``.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from fencepost.core.errors import InvalidInput

JSONValue = Any  # a plain JSON value: dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None


#: The deepest nesting a canonical value may have. Every value written is read back later, often deeper in a
#: call stack (a worker's claim, a slot thread); the parser's recursion limit is shared with the stack, so a
#: value accepted near that limit could be written and then never read (a break-it trial). No plan, payload or
#: evidence comes near it.
MAX_DEPTH = 200

#: The deepest a value that fencepost wraps before storing it may nest (params, a provider's output): the
#: records and events that carry it add levels, so it is checked against this before any effect, not against
#: ``MAX_DEPTH`` after one (break-it trials).
WRAPPED_MAX_DEPTH = MAX_DEPTH - 10

#: Integers of more bits than this may have more decimal digits than Python parses back
#: (``sys.get_int_max_str_digits``; 0 is no limit): such an integer would be written and then refused on every
#: read. Past it, the digits are counted (``str`` itself refuses too many).
_MAX_INT_BITS = int(sys.get_int_max_str_digits() * math.log2(10)) - 1 if sys.get_int_max_str_digits() else None


def _too_long(value: int) -> bool:
    if _MAX_INT_BITS is None or value.bit_length() <= _MAX_INT_BITS:
        return False
    try:
        str(value)
    except ValueError:
        return True
    return False


def json_depth(value: Any) -> int:
    """How many containers plain JSON ``value`` nests (0 for a scalar); counting stops past ``MAX_DEPTH``."""
    deepest, level = 0, [(value, 0)]
    while level:
        item, depth = level.pop()
        if isinstance(item, dict | list | tuple) and depth <= MAX_DEPTH:
            deepest = max(deepest, depth + 1)
            level.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _no_surrogate(text: str, path: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # no UTF-8 form: accepted here, it failed later in the driver, after the effect
            raise TypeError(f"a string at {path[:200]} holds a lone surrogate, which has no UTF-8 form") from None


def _check(value: Any, path: str, depth: int = 0) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        _no_surrogate(value, path)
        return
    if isinstance(value, int):
        if _too_long(value):
            raise TypeError(f"integer at {path} has more digits than JSON readers accept")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"non-finite number at {path}")
        return
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        raise TypeError(f"value nests deeper than {MAX_DEPTH} levels at {path[:200]}")
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"non-string key {key!r} at {path}")
            _no_surrogate(key, path)
            _check(item, f"{path}.{key}", depth + 1)
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
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise TypeError("value nests too deeply to be canonical JSON") from None


def storable_text(text: str) -> str:
    """``text`` as every backend can store it: a lone surrogate (it has no UTF-8 form; ``os.fsdecode`` of a file
    name that is not UTF-8 makes one) as its ``\\udcXX`` escape, and NUL as ``\\0`` (PostgreSQL text cannot hold
    it). For free text such as a failure message: written as given, it made the write fail and the failed
    command run again (a break-it trial)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\0")


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as given on every backend, or None when it can.

    For text kept exactly as given (an actor, an idempotency key, a tenant, an operator's note), which is refused
    rather than escaped as ``storable_text`` escapes free failure text: a NUL character (PostgreSQL text cannot
    hold it, so it was a schema conflict there, while SQLite kept it) or a lone surrogate (no UTF-8 form, so the
    driver raised ``UnicodeEncodeError``). The answer reads after the field's name: "actor holds a NUL ...".
    """
    nul = text.find("\x00")
    if nul >= 0:
        return f"holds a NUL character (at position {nul}), which PostgreSQL cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            return (f"holds a lone surrogate ({text[error.start]!r} at position {error.start}), which has no "
                    "UTF-8 form")
    return None


def require_storable_text(**fields: str) -> None:
    """Refuse input text that no backend would store as given (``text_problem``), naming the field.

    Raises:
        InvalidInput: the first field, in the order given, that holds a NUL character or a lone surrogate
            (exit 2, HTTP 422 on every backend).
    """
    for name, text in fields.items():
        problem = text_problem(text) if isinstance(text, str) else None
        if problem is not None:
            raise InvalidInput(f"{name} {problem}")


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


def parse_input_json(text: str | bytes | bytearray) -> JSONValue:
    """Parse JSON that a person or a program hands in (a command-line option): as ``parse_json``, and an object
    that names one key twice is refused instead of keeping the last value, which would silently drop the first
    (``{"amount": 5, "amount": 500}``).

    Raises:
        ValueError: as ``parse_json``, or a duplicate key (named). ``json.JSONDecodeError`` (a ValueError) for
            malformed JSON.
    """
    if isinstance(text, bytes | bytearray):  # a request body
        text = text.decode(json.detect_encoding(text))
    return _decoded(_INPUT_DECODER, text)


def parse_json(text: str | bytes | bytearray) -> JSONValue:
    """Parse JSON text (or bytes in a UTF encoding, as ``json.loads`` takes them), refusing NaN/Infinity
    literals (they have no canonical form).

    Raises:
        ValueError: on malformed JSON, a non-finite literal, nesting too deep to parse, a number past Python's
            integer-digit limit, or bytes that are not text (``UnicodeDecodeError``).
    """
    if isinstance(text, bytes | bytearray):  # as json.loads takes them, but strictly: UTF-8 has no surrogates
        text = text.decode(json.detect_encoding(text))
    return _decoded(_DECODER, text)


def _decoded(decoder: json.JSONDecoder, text: str) -> JSONValue:
    """``decoder.decode(text)``, with the two errors Python words for a programmer said for whoever wrote it."""
    try:
        return decoder.decode(text)
    except RecursionError:
        raise ValueError("JSON nests too deeply") from None
    except ValueError as error:
        if "integer string conversion" not in str(error):
            raise
        # Python's own text ends "use sys.set_int_max_str_digits() to increase the limit": advice for a
        # programmer, not for whoever wrote the JSON (a break-it trial).
        raise ValueError(f"JSON holds an integer of more than {sys.get_int_max_str_digits()} digits, which is "
                         "more than fencepost reads") from None
