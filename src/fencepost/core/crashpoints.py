"""Named crash points for SIGKILL crash-window tests (DESIGN.md, testing shape).

A crash point is inert unless ``FENCEPOST_CRASHPOINT`` names it. The value is
``<name>`` or ``<name>@<n>`` (kill on the n-th hit, default 1), for example
``attempt.receipt:after-commit@3``. When armed and reached, the process SIGKILLs itself: no
``finally`` block, no atexit handler and no buffered write runs, exactly like a power cut of the process.

Unarmed cost: one module-level ``None`` check per call.
"""

from __future__ import annotations

import os
import signal
import threading

_ARMED: tuple[str, int] | None = None
_hits = 0
_lock = threading.Lock()


def _arm_from_env() -> None:
    global _ARMED
    raw = os.environ.get("FENCEPOST_CRASHPOINT", "").strip()
    if not raw:
        _ARMED = None
        return
    name, _, count = raw.partition("@")
    _ARMED = (name, int(count) if count else 1)


def crashpoint(name: str) -> None:
    """SIGKILL this process here if ``FENCEPOST_CRASHPOINT`` arms ``name`` (see module docstring)."""
    global _hits
    if _ARMED is None or _ARMED[0] != name:
        return
    with _lock:
        _hits += 1
        if _hits >= _ARMED[1]:
            os.kill(os.getpid(), signal.SIGKILL)


_arm_from_env()
