"""Bounded waiting for a condition, shared by every test folder that watches real processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 20.0, what: str = "condition",
               interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy and return it.

    Args:
        timeout: seconds before giving up.
        what: named in the failure message.
        interval: seconds between polls.
    Raises:
        AssertionError: after ``timeout`` seconds, with the last value seen.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last value: {value!r})")
        time.sleep(interval)
