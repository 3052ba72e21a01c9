"""Stored text on a terminal: what would act on the terminal is escaped, what is text stays (cli.render.printable)."""

from __future__ import annotations

import pytest

from fencepost.cli.render import printable


@pytest.mark.parametrize(("stored", "shown"), [
    ("ops:eve\x1b[31mRED", "ops:eve\\x1b[31mRED"),         # an escape sequence would recolour the screen
    ("found\n  resolved failed", "found\\n  resolved failed"),  # a newline would forge a line of the output
    ("a\rb\x07\x7f\x85", "a\\rb\\x07\\x7f\\x85"),           # C0, DEL and C1 controls
    ("x\u2028y\u2029z", "x\\u2028y\\u2029z"),               # line and paragraph separators
    ("pay\u202eusd", "pay\\u202eusd"),                      # a bidirectional override reorders what follows
    ("a\u2066b\u2069", "a\\u2066b\\u2069"),                 # isolates likewise
])
def test_what_a_terminal_would_act_on_is_escaped(stored: str, shown: str) -> None:
    assert printable(stored) == shown


@pytest.mark.parametrize("text", [
    "charge ch_1 found",
    "Zoë, Ærø, ключ, 東京",
    "👨\u200d👩\u200d👧 family",          # zero-width joiners inside an emoji sequence
    "می\u200cخواهم",                      # a zero-width non-joiner in Persian
    "soft\u00adhyphen",
    "C:\\path\\to\\file",
])
def test_text_is_left_as_it_is(text: str) -> None:
    assert printable(text) == text
