"""The host's health: the schema version and the counts an operator watches (host-spec W2, §1.Y-15; ADR 0051).

``read_host_health(store)`` is what the readiness route's ``host`` object, ``fencepost host status`` and the
operator page show. The counts are work for an operator, never a reason to be unready: readiness fails only
when the store does not answer or its schema is not current (ADR 0051).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from fencepost.host.handler import KIND_PREFIX
from fencepost.outbox.registry import Backlog, KindBacklog, read_backlog
from fencepost.store.base import Store
from fencepost.store.host_records import HostHealthCounts

#: A running invocation unleased and unchanged this long is stuck (an inline caller or worker died and no
#: worker took it over). Longer than any lease fencepost takes by default (30 s), short enough to page on.
DEFAULT_STUCK_AFTER = timedelta(minutes=5)
#: At most this many actions' backlogs are listed (oldest first; the totals count the rest). An application has
#: far fewer action versions than this, so every one is checked for a live worker.
BACKLOG_KINDS = 1000
#: How far back budget exhaustions count (W2: "in the last hour").
BUDGET_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class HostHealth:
    """The host's health as of one read.

    Attributes:
        schema_version: the store's applied migration version. expected_schema_version: this fencepost's.
        stuck_after_seconds: the ``stuck_runs`` threshold used (seconds).
        counts: the counts (``HostHealthCounts``), or None when the schema is not current (nothing to count).
        backlog: the dispatched invocations still pending, per action kind, with the live workers that claim
            each kind (issue 10 item 6: a kind no live worker claims is work nobody will do).
    """

    schema_version: int
    expected_schema_version: int
    stuck_after_seconds: float
    counts: HostHealthCounts | None
    backlog: Backlog | None = None

    @property
    def unserved(self) -> list[KindBacklog]:
        """The backlog's kinds that no live worker claims."""
        return [b for b in self.backlog.kinds if b.live_workers_serving == 0] if self.backlog else []

    @property
    def schema_current(self) -> bool:
        """Whether the schema is exactly the version this fencepost expects."""
        return self.schema_version == self.expected_schema_version

    @property
    def attention(self) -> bool:
        """Whether any count asks for an operator (every count but the expected probe dead letters), or pending
        invocations wait for a kind no live worker claims."""
        if self.counts is None:
            return False
        values = asdict(self.counts)
        values.pop("probe_dead_letters")
        return any(v > 0 for v in values.values()) or bool(self.unserved)

    def as_json(self) -> dict[str, Any]:
        """Plain JSON: ``schema_version``, ``expected_schema_version``, ``schema_current``,
        ``stuck_after_seconds``, ``attention``, each count at the top level (absent counts: None), and
        ``pending_invocations`` (the backlog's total) with ``backlog`` (``KindBacklog.as_json`` per kind)."""
        counts: dict[str, Any] = asdict(self.counts) if self.counts is not None else {
            name: None for name in HostHealthCounts.__dataclass_fields__}
        return {"schema_version": self.schema_version, "expected_schema_version": self.expected_schema_version,
                "schema_current": self.schema_current, "stuck_after_seconds": self.stuck_after_seconds,
                "attention": self.attention, **counts,
                "pending_invocations": self.backlog.pending_total if self.backlog else 0,
                "backlog": [b.as_json() for b in self.backlog.kinds] if self.backlog else [],
                "backlog_kinds_total": self.backlog.kinds_total if self.backlog else 0}


def read_host_health(store: Store, *, stuck_after: timedelta = DEFAULT_STUCK_AFTER) -> HostHealth:
    """Read the host's health from ``store`` (host-spec W2).

    Args:
        store: the control store. stuck_after: the stuck-run threshold (not negative; default 5 minutes).
    Returns:
        ``HostHealth``; its ``counts`` are None when the schema is behind or ahead (they cannot be read).
    Raises:
        StoreUnavailable: the store does not answer. ValueError: a negative ``stuck_after``.
    """
    if stuck_after < timedelta(0):
        raise ValueError("stuck_after must not be negative")
    found, expected = store.schema_version(), store.expected_version
    counts = None
    backlog = None
    if found == expected:
        counts = store.read(lambda tx: tx.host.host_health(stuck_after=stuck_after, window=BUDGET_WINDOW))
        backlog = read_backlog(store, prefix=KIND_PREFIX, limit=BACKLOG_KINDS)
    return HostHealth(found, expected, stuck_after.total_seconds(), counts, backlog)
