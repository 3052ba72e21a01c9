"""What every request handler shares: the store, the service, the token and the settings of one app."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fencepost.api.archive import MAX_EXTRACTED_BYTES
from fencepost.api.signatures import DEFAULT_WINDOW_SECONDS
from fencepost.core.clock import to_iso
from fencepost.core.errors import NotFound
from fencepost.core.statuses import EventOutboxStatus
from fencepost.events.views import outbox_row_view, outbox_summary_view
from fencepost.host import Host
from fencepost.outbox.registry import WorkerCensus, census_view, read_census
from fencepost.rehearsal import views
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import AttemptRecord, ReceiptRecord

if TYPE_CHECKING:
    from fencepost.api.completions import CompletionProvider


@dataclass
class ApiContext:
    """Settings and collaborators of one app (``create_app`` builds it).

    Attributes:
        store: the control store, opened once per app (thread-safe: one connection per thread).
        service: the rehearsal application service over ``store``.
        api_token: the bearer token that mutating requests must present.
        open_reads: reads need no token (true when serving on loopback only).
        on_work: called after a request made work claimable (enqueue, reconcile): wakes in-process workers.
        max_upload_bytes: largest request body accepted.
        max_package_bytes: largest total an uploaded archive may expand to.
        poll_ms: how often the operator page polls while an Attempt is open.
        host: the action host that completions settle (None: no provider is registered).
        completion_providers: provider name -> its secrets and parser (ADR 0036).
        signature_window: how many seconds a completion's signed timestamp may be from ``signature_clock()``.
        signature_clock: unix time for the signature window (the server's wall clock: providers sign with theirs).
    """

    store: Store
    service: RehearsalService
    api_token: str
    open_reads: bool = True
    on_work: Callable[[], None] | None = None
    max_upload_bytes: int = 32 * 1024 * 1024
    max_package_bytes: int = MAX_EXTRACTED_BYTES
    poll_ms: int = 1000
    host: Host | None = None
    completion_providers: dict[str, CompletionProvider] = field(default_factory=dict)
    signature_window: float = DEFAULT_WINDOW_SECONDS
    signature_clock: Callable[[], float] = time.time
    _ready: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def require_ready(self) -> None:
        """Raise ``SchemaNotReady`` until the schema is at the expected version (then remember it)."""
        if self._ready:
            return
        self.store.require_schema()
        with self._lock:
            self._ready = True

    def now(self) -> datetime:
        """The store's clock: the one that decides lease expiry (never the browser's)."""
        return self.store.read(lambda tx: tx.now())

    def work_added(self) -> None:
        if self.on_work is not None:
            self.on_work()

    def census(self) -> WorkerCensus:
        """The worker registry and the store's clock, read together (ADR 0019)."""
        return read_census(self.store)

    def workers_json(self) -> dict[str, Any]:
        """``{"now", "live", "expired"}``: the registered workers, live ones apart from expired ones."""
        return census_view(self.census())

    def relay_summary_json(self) -> dict[str, Any]:
        """The relay's backlog (``fencepost.events.views.outbox_summary_view``), by the store's clock."""
        return outbox_summary_view(self.store.read(lambda tx: tx.events.summarize_event_outbox()))

    def event_rows_json(self, status: EventOutboxStatus | None, limit: int) -> dict[str, Any]:
        """``{"now", "items"}``: publication rows (of one status, or all), oldest first, at most ``limit``.

        Raises:
            ValueError: ``limit`` outside 1..10000 (the route allows 1..1000).
        """
        def read(tx: UnitOfWork) -> tuple[datetime, list[dict[str, Any]]]:
            return tx.now(), [outbox_row_view(r) for r in tx.events.list_event_outbox(status=status, limit=limit)]

        now, items = self.store.read(read)
        return {"now": to_iso(now), "items": items}

    # ── views with the lease verdict and the worker census the page needs ──
    @staticmethod
    def attempt_json(attempt: AttemptRecord, receipts: list[ReceiptRecord], census: WorkerCensus,
                     *, evidence: bool = False) -> dict[str, Any]:
        return views.attempt_view(attempt, receipts, evidence=evidence, census=census)

    def attempts_json(self, run_id: str) -> dict[str, Any]:
        """``{"now", "items"}`` for a Run's Attempts, oldest first."""
        attempts = self.service.attempts(run_id)
        receipts = {a.id: self.service.receipts(a.id) for a in attempts}
        census = self.census()
        return {"now": views.iso(census.now), "items": [self.attempt_json(a, receipts[a.id], census) for a in attempts]}

    def attempt_of(self, run_id: str, attempt_id: str) -> AttemptRecord:
        """The Attempt, only if it belongs to the Run (else ``NotFound``, as for an unknown id)."""
        self.service.get_run(run_id)
        attempt = self.service.attempt(attempt_id)
        if attempt.run_id != run_id:
            raise NotFound(f"no attempt {attempt_id} in rehearsal {run_id}")
        return attempt
