"""Where a claim starts among the kinds it serves: round robin over the kinds that had due work (issue 10 item 4).

A worker serves several kinds, some of them built in and usually empty (deliveries, workflow tasks). Starting each
claim at a kind that merely rotates from claim to claim let an empty kind hand its turn to whichever kind follows
it in sorted order: with one execution slot and six kinds, the first kind with work got five claims in six (a
trial). A claim now starts after the kind the previous claim served last, so kinds with work take turns whatever
the empty kinds between them.
"""

from __future__ import annotations

import bisect
import threading


class ClaimRotation:
    """The last kind a store's claim served, shared by the store's threads (one per ``Store``)."""

    def __init__(self) -> None:
        self._last: str | None = None
        self._lock = threading.Lock()

    def order(self, kinds: list[str]) -> list[str]:
        """``kinds`` (sorted, distinct) starting with the first one after the kind served last (wrapping)."""
        with self._lock:
            last = self._last
        if last is None:
            return list(kinds)
        start = bisect.bisect_right(kinds, last) % len(kinds)
        return kinds[start:] + kinds[:start]

    def served(self, kind: str) -> None:
        """Remember ``kind`` as the last one a claim took commands of."""
        with self._lock:
            self._last = kind
