"""What every request handler shares: the store, the service, the token and the settings of one app."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fencepost.api.archive import MAX_EXTRACTED_BYTES
from fencepost.api.paging import DEFAULT_PAGE, decode_cursor, encode_cursor, page_after
from fencepost.api.signatures import DEFAULT_WINDOW_SECONDS
from fencepost.core.clock import to_iso
from fencepost.core.errors import InvalidInput, NotFound
from fencepost.core.statuses import EventOutboxStatus
from fencepost.events.views import event_space_view, event_view, outbox_row_view, outbox_summary_view
from fencepost.host import Host
from fencepost.outbox.history import lease_history
from fencepost.outbox.registry import WorkerCensus, census_view, read_census
from fencepost.rehearsal import views
from fencepost.rehearsal.service import RehearsalService
from fencepost.store.base import Store
from fencepost.store.host_records import Subject
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import AttemptRecord, ReceiptRecord, RunRecord

#: How many rehearsals (newest first) the list pages walk; older ones are listed by ``fencepost`` commands.
RUN_SCAN = 10000


def _run_key(run: RunRecord) -> str:
    return f"{run.created_at.isoformat()}|{run.id}"


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

    def event_log_json(self, tenant_id: str, space_id: str, subject: Subject | None, after: int,
                       limit: int) -> dict[str, Any]:
        """``{"tenant_id", "space_id", "items", "next_after"}``: one space's events after sequence ``after`` in
        sequence order (``event_view``), at most ``limit``; ``next_after`` is the last sequence of a full page
        (pass it as ``after`` for the next), None on a shorter one.

        Raises:
            ValueError: ``limit`` outside 1..10000 (the route allows 1..1000).
        """
        events = self.store.read(lambda tx: tx.events.list_events(tenant_id=tenant_id, space_id=space_id,
                                                                  subject=subject, after=after, limit=limit))
        items = [event_view(e) for e in events]
        return {"tenant_id": tenant_id, "space_id": space_id, "items": items,
                "next_after": items[-1]["sequence"] if len(items) == limit else None}

    def event_spaces_json(self, limit: int, cursor: str | None = None) -> dict[str, Any]:
        """``{"items": [{"tenant_id", "space_id", "last_sequence"}], "next_cursor"}``: one page of the spaces that
        hold events, by tenant then space, at most ``limit``, after the space ``cursor`` names (the previous
        page's ``next_cursor``, which is null on the last page).

        Raises:
            InvalidInput: a cursor this server did not issue (422).
        """
        after = None if cursor is None else _space_key(decode_cursor(cursor))
        spaces = self.store.read(lambda tx: tx.events.list_event_spaces(limit=limit + 1, after=after))
        page, more = spaces[:limit], len(spaces) > limit
        last = page[-1] if more else None
        return {"items": [event_space_view(s) for s in page],
                "next_cursor": None if last is None else encode_cursor(json.dumps([last.tenant_id, last.space_id]))}

    # ── views with the lease verdict and the worker census the page needs ──
    @staticmethod
    def attempt_json(attempt: AttemptRecord, receipts: list[ReceiptRecord], census: WorkerCensus,
                     *, evidence: bool = False) -> dict[str, Any]:
        return views.attempt_view(attempt, receipts, evidence=evidence, census=census)

    def attempts_json(self, run_id: str, *, limit: int = DEFAULT_PAGE, cursor: str | None = None,
                      newest_first: bool = False) -> dict[str, Any]:
        """One page of a Run's Attempts: ``{"now", "total", "next_cursor", "items"}``.

        Args:
            limit: page size; ``cursor``: ``next_cursor`` of the previous page (None: the first page).
            newest_first: pages walk from the latest Attempt back (the page's order) instead of oldest first.
        Returns:
            Each item is ``views.attempt_view`` with its Receipts and ``lease_history``: one entry per delivery of
            its command (``outbox.history.lease_history``: claim or takeover, heartbeats, how it ended). Receipts
            and lease history are read for the page only.
        Raises:
            NotFound: no such rehearsal. InvalidInput: a cursor this list does not hold.
        """
        attempts = self.service.attempts(run_id)
        ordered = list(reversed(attempts)) if newest_first else attempts
        page, next_cursor = page_after(ordered, lambda a: str(a.seq), cursor, limit)
        receipts = {a.id: self.service.receipts(a.id) for a in page}
        histories = self.store.read(lambda tx: {a.id: lease_history(tx.outbox.lease_events(a.command_id))
                                                for a in page})
        census = self.census()
        items = [{**self.attempt_json(a, receipts[a.id], census), "lease_history": histories[a.id]} for a in page]
        return {"now": views.iso(census.now), "total": len(attempts), "next_cursor": next_cursor, "items": items}

    def runs_json(self, *, limit: int = DEFAULT_PAGE, cursor: str | None = None) -> dict[str, Any]:
        """One page of rehearsals, newest first: ``{"next_cursor", "items"}``, each item ``views.run_view``
        with ``attempt_count``, ``latest_attempt`` (``{"id", "seq", "status", "state"}`` or None) and
        ``gate_passed`` (the release gate's verdict now), read for the page only.

        Raises:
            InvalidInput: a cursor this list does not hold.
        """
        runs = self.service.list_runs(RUN_SCAN)
        page, next_cursor = page_after(runs, _run_key, cursor, limit)
        return {"next_cursor": next_cursor, "items": [self.run_summary(r) for r in page]}

    def run_summary(self, run: RunRecord) -> dict[str, Any]:
        """``views.run_view`` of ``run`` with its Attempt count, latest Attempt and gate verdict."""
        attempts = self.service.attempts(run.id)
        latest = attempts[-1] if attempts else None
        shown = views.attempt_view(latest) if latest is not None else None
        return {**views.run_view(run), "attempt_count": len(attempts),
                "latest_attempt": None if shown is None else {k: shown[k] for k in ("id", "seq", "status", "state")},
                "gate_passed": self.service.gate(run.id).passed}

    def attempt_of(self, run_id: str, attempt_id: str) -> AttemptRecord:
        """The Attempt, only if it belongs to the Run (else ``NotFound``, as for an unknown id)."""
        self.service.get_run(run_id)
        attempt = self.service.attempt(attempt_id)
        if attempt.run_id != run_id:
            raise NotFound(f"no attempt {attempt_id} in rehearsal {run_id}")
        return attempt


def _space_key(key: str) -> tuple[str, str]:
    """The ``(tenant_id, space_id)`` inside a spaces cursor (``event_spaces_json``).

    Raises:
        InvalidInput: the cursor does not hold one.
    """
    try:
        tenant_id, space_id = json.loads(key)
        if isinstance(tenant_id, str) and isinstance(space_id, str):
            return tenant_id, space_id
    except (ValueError, TypeError):
        pass
    raise InvalidInput("cursor is not one this server issued: pass back a next_cursor unchanged")
