"""LISTEN/NOTIFY: idle workers wake when a command becomes due instead of sleeping out their poll interval.

ADR 0014. Enqueue, release and reconcile run ``notify_command`` inside their transaction, so PostgreSQL
sends ``NOTIFY fencepost_commands, '<schema>/<kind>'`` when (and only if) that transaction commits. Each
worker keeps one dedicated autocommit connection that LISTENs on the channel. A background thread reads it
continuously (so notifications never pile up in the server's queue while the worker is busy) and turns a
notification for one of the worker's kinds into a wake-up of the idle worker.

Polling stays the fallback and the only source of truth: a notification is a hint to claim now, never a
claim. The worker claims after every wait whether or not a notification arrived. While the listening
connection is down (server restart, ``pg_terminate_backend``, network) the waiter sleeps out each wait and
the thread reconnects with a bounded backoff. After every (re)connect it wakes the worker once, because
anything committed while nobody listened was announced to no one. Expired leases are never announced:
takeovers are found by polling, so ``poll_interval`` bounds how long after expiry a takeover starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import psycopg

from fencepost.store.base import WorkWaiter

if TYPE_CHECKING:
    from fencepost.store.postgres.store import PostgresStore

log = logging.getLogger("fencepost.listen")

CHANNEL = "fencepost_commands"
# How long one read of the listening connection blocks; bounds how late ``close`` notices it should stop.
READ_SLICE_SECONDS = 0.25
# Reconnect backoff while the server cannot be reached (seconds, doubling).
RECONNECT_FIRST_SECONDS = 0.2
RECONNECT_MAX_SECONDS = 5.0
# TCP keepalives, so that a listening connection that died silently (a partition, a host gone) is noticed.
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}


def application_name(name: str | None) -> str:
    """``fencepost-listen [name]`` within PostgreSQL's 63-byte limit (longer names are cut by the server)."""
    text = f"fencepost-listen {name}" if name else "fencepost-listen"
    return text.encode("utf-8")[:63].decode("utf-8", errors="ignore")


class PostgresWorkWaiter(WorkWaiter):
    """One worker's listening connection and the wake-ups it produces.

    Args:
        store: the worker's store (its DSN, session settings and scrubber are reused).
        kinds: the command kinds the worker claims; notifications for other kinds are ignored.
        name: the worker id, shown in ``pg_stat_activity.application_name`` as ``fencepost-listen <name>``
            (cut to PostgreSQL's 63 bytes).
    """

    mode = "notify"

    def __init__(self, store: PostgresStore, kinds: Sequence[str], *, name: str | None = None) -> None:
        self._store = store
        self._kinds = frozenset(kinds)
        self.application_name = application_name(name)
        self._lock = threading.Lock()
        self._pending = False                      # an announcement (or a reconnect) not yet consumed
        self._target: threading.Event | None = None  # the event of the wait in progress, if any
        self._closed = threading.Event()
        self._connected = threading.Event()
        self.connections = 0                       # successful (re)connects, for tests and operators
        self._thread = threading.Thread(target=self._loop, name="fencepost-listen", daemon=True)
        self._thread.start()

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up (otherwise waits fall back to sleeping)."""
        return self._connected.is_set()

    def wait_for_work(self, timeout_seconds: float, wake: threading.Event | None = None) -> bool:
        """Wait up to ``timeout_seconds`` for a notification of one of our kinds (see ``WorkWaiter``).

        Returns at once, True, when one arrived since the last wait (it may announce work that the claim
        before this wait did not see yet).
        """
        event = wake or threading.Event()
        with self._lock:
            if self._pending:
                self._pending = False
                return True
            self._target = event
        try:
            event.wait(timeout_seconds)
        finally:
            with self._lock:
                self._target = None
                announced, self._pending = self._pending, False
        return announced

    def wait_until_listening(self, timeout_seconds: float) -> bool:
        """Block until the LISTEN connection is up (tests, and callers that want to know); True if it is."""
        return self._connected.wait(timeout_seconds)

    def close(self) -> None:
        """Stop the listening thread and close its connection. Idempotent."""
        self._closed.set()
        with self._lock:
            if self._target is not None:
                self._target.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=READ_SLICE_SECONDS + 5)

    # ── the listening thread ──
    def _announce(self) -> None:
        with self._lock:
            self._pending = True
            if self._target is not None:
                self._target.set()

    def _connect(self) -> tuple[psycopg.Connection[Any], frozenset[str]]:
        kwargs = {**self._store.connect_kwargs, **_KEEPALIVES, "application_name": self.application_name}
        conn = psycopg.connect(self._store.dsn, **kwargs)
        try:
            self._store.configure_session(conn)
            row = conn.execute(b"SELECT coalesce(current_schema(), '')").fetchone()
            schema = str(row[0]) if row else ""
            conn.execute(f"LISTEN {CHANNEL}".encode("ascii"))
        except BaseException:
            conn.close()
            raise
        return conn, frozenset(f"{schema}/{kind}" for kind in self._kinds)

    def _loop(self) -> None:
        delay = RECONNECT_FIRST_SECONDS
        down_logged = False
        while not self._closed.is_set():
            try:
                conn, wanted = self._connect()
            except Exception as error:  # any failure to listen degrades to polling, never kills the worker
                if not down_logged:
                    log.warning("cannot listen for new commands; polling until the connection is back",
                                extra={"event": "listen_unavailable", "error": self._reason(error)})
                    down_logged = True
                self._closed.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)
                continue
            delay = RECONNECT_FIRST_SECONDS
            self.connections += 1
            if down_logged:
                log.info("listening for new commands again", extra={"event": "listen_restored"})
                down_logged = False
            self._connected.set()
            self._announce()  # anything committed while nobody listened was announced to no one
            try:
                while not self._closed.is_set():
                    for note in conn.notifies(timeout=READ_SLICE_SECONDS):
                        if note.channel == CHANNEL and note.payload in wanted:
                            self._announce()
            except Exception as error:  # a lost connection (psycopg.OperationalError) or anything unexpected
                if not self._closed.is_set():
                    log.warning("the listening connection was lost; polling until it is back",
                                extra={"event": "listen_lost", "error": self._reason(error)})
                    down_logged = True
            finally:
                self._connected.clear()
                with suppress(Exception):
                    conn.close()
            self._closed.wait(delay)  # never a tight reconnect loop against a server that drops us at once

    def _reason(self, error: Exception) -> str:
        return self._store.scrub(str(error) or type(error).__name__)
