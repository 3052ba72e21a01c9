"""The documentation the checks rely on (host-spec U8, U9, U25, V6)."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _text(name: str) -> str:
    return " ".join((DOCS / name).read_text(encoding="utf-8").split())


def test_events_doc_lists_limits_false_failures_and_the_relay_warning() -> None:
    text = _text("events.md")
    for phrase in ("## Store conformance checks", "pause outbox relays for that tenant",
                   "rules comparing ordering fields in mixed directions", "store-wide uniqueness",
                   "the dead-letter state", "claims that lease foreign rows without returning them",
                   "buffering that merges fields the store never returns", "in-process cache",
                   "**sequence 50**", "unique keys over fields the controls share",
                   "published although nothing was sent", "fencepost check-store events"):
        assert phrase in text, phrase


def test_host_doc_warns_custom_stores_about_scope() -> None:
    assert "fails the isolation checks until every adapter-row read and update honours" in _text("host.md")
