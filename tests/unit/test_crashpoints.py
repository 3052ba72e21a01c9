"""Crash points are inert unless armed; parsing of ``FENCEPOST_CRASHPOINT`` (the process is never killed here).

``os.kill`` is replaced inside the module under test, so an armed hit is recorded instead of delivered.
"""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from fencepost.core import crashpoints


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Recorded ``os.kill`` calls of the crashpoints module; module state is restored afterwards."""
    recorded: list[tuple[int, int]] = []
    fake_os = SimpleNamespace(environ=crashpoints.os.environ, getpid=lambda: 4242,
                              kill=lambda pid, sig: recorded.append((pid, sig)))
    monkeypatch.setattr(crashpoints, "os", fake_os)
    monkeypatch.setattr(crashpoints, "_ARMED", None)
    monkeypatch.setattr(crashpoints, "_hits", 0)
    return recorded


def _arm(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("FENCEPOST_CRASHPOINT", raising=False)
    else:
        monkeypatch.setenv("FENCEPOST_CRASHPOINT", value)
    crashpoints._arm_from_env()


@pytest.mark.parametrize("value", [None, "", "   "])
def test_unarmed_crashpoints_do_nothing(monkeypatch: pytest.MonkeyPatch, kills: list[tuple[int, int]],
                                        value: str | None) -> None:
    _arm(monkeypatch, value)
    assert crashpoints._ARMED is None
    for _ in range(5):
        crashpoints.crashpoint("rehearsal.receipt:after-commit")
    assert kills == []
    assert crashpoints._hits == 0


def test_name_alone_arms_the_first_hit(monkeypatch: pytest.MonkeyPatch, kills: list[tuple[int, int]]) -> None:
    _arm(monkeypatch, "outbox.claim:before-commit")
    assert crashpoints._ARMED == ("outbox.claim:before-commit", 1)
    crashpoints.crashpoint("outbox.claim:before-commit")
    assert kills == [(4242, signal.SIGKILL)]


def test_count_suffix_kills_on_the_nth_hit_of_that_name_only(monkeypatch: pytest.MonkeyPatch,
                                                             kills: list[tuple[int, int]]) -> None:
    _arm(monkeypatch, "attempt.receipt:after-commit@3")
    assert crashpoints._ARMED == ("attempt.receipt:after-commit", 3)
    crashpoints.crashpoint("attempt.receipt:before-commit")  # another name: not counted
    crashpoints.crashpoint("attempt.receipt:after-commit")
    crashpoints.crashpoint("attempt.receipt:after-commit")
    assert kills == []
    crashpoints.crashpoint("attempt.receipt:after-commit")
    assert kills == [(4242, signal.SIGKILL)]


def test_other_names_never_fire_when_armed(monkeypatch: pytest.MonkeyPatch, kills: list[tuple[int, int]]) -> None:
    _arm(monkeypatch, "a:before-commit")
    for name in ("a:after-commit", "a", "b:before-commit", "A:before-commit"):
        crashpoints.crashpoint(name)
    assert kills == []
    assert crashpoints._hits == 0
