"""SimPay's ground-truth ledger: the charges and payouts the provider really made, every request it received, and
every webhook delivery it attempted with the answer it got.

The ledger is the provider's own SQLite file, apart from fencepost's store. It is the provider's memory, not
fencepost's, so nothing fencepost does can change it: a worker killed mid-call, a second worker process or a
retry with the same key each leave exactly the rows the provider created (docs/decisions/0029-simpay.md). Every
operation opens its own connection, so the threads of the server and other processes (a demo reading the
ledger, a restarted provider) share the file safely; the idempotency check and the charge it guards are one
``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    id              TEXT PRIMARY KEY,
    idempotency_key TEXT UNIQUE,
    request_digest  TEXT NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT NOT NULL,
    request         TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS payouts (
    id              TEXT PRIMARY KEY,
    idempotency_key TEXT UNIQUE,
    request_digest  TEXT NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT NOT NULL,
    request         TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    created_at      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    method          TEXT NOT NULL,
    path            TEXT NOT NULL,
    idempotency_key TEXT,
    mode            TEXT,
    received_at     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS calls_by_key ON calls (idempotency_key, path);
CREATE TABLE IF NOT EXISTS webhooks (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    payout_id       TEXT NOT NULL,
    type            TEXT NOT NULL,
    body_digest     TEXT NOT NULL,
    attempt         INTEGER NOT NULL CHECK (attempt > 0),
    answer_status   INTEGER,
    answer          TEXT,
    sent_at         TEXT NOT NULL
);
"""

_TABLES = {"charge": ("charges", "ch_"), "payout": ("payouts", "po_")}


def request_digest(body: dict[str, Any]) -> str:
    """The SHA-256 of a request body's canonical JSON (sorted keys): what a reused key must match."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KeyConflict(Exception):
    """The idempotency key was first used with a different request body (the provider answers 409)."""


@dataclass(frozen=True)
class Made:
    """The record an idempotent create answered, and whether it already existed (a replay)."""

    record: dict[str, Any]
    replayed: bool


class Ledger:
    """The SQLite ledger file at ``path`` (created, with its tables, on first use).

    Args:
        path: the ledger file; several processes may open the same one.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("PRAGMA synchronous=FULL")
            yield db
        finally:
            db.close()

    def record_call(self, method: str, path: str, key: str | None, mode: str | None) -> int:
        """Note one received request (before it is answered); returns how many earlier requests to ``path``
        carried the same key (0 without a key)."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            earlier = 0
            if key is not None:
                earlier = int(db.execute("SELECT count(*) FROM calls WHERE idempotency_key = ? AND path = ?",
                                         (key, path)).fetchone()[0])
            db.execute("INSERT INTO calls (method, path, idempotency_key, mode, received_at) VALUES (?, ?, ?, ?, ?)",
                       (method, path, key, mode, _now()))
            db.execute("COMMIT")
            return earlier

    def create(self, kind: str, key: str | None, body: dict[str, Any]) -> Made:
        """Make a charge or a payout once per idempotency key.

        Args:
            kind: ``"charge"`` or ``"payout"``.
            key: the request's ``Idempotency-Key``; None makes a new record every time.
            body: the validated request body (``amount`` a positive int, ``currency`` text).
        Returns:
            The new record, or the one the key made first (``replayed=True``).
        Raises:
            KeyConflict: the key was first used with a different body; nothing is made.
        """
        table, prefix = _TABLES[kind]
        digest = request_digest(body)
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                if key is not None:
                    row = db.execute(f"SELECT * FROM {table} WHERE idempotency_key = ?", (key,)).fetchone()
                    if row is not None:
                        if row["request_digest"] != digest:
                            raise KeyConflict(key)
                        return Made(_record(kind, row), replayed=True)
                new_id = prefix + secrets.token_hex(12)
                columns = ["id", "idempotency_key", "request_digest", "amount", "currency", "request",
                           "created_at"]
                values: list[object] = [new_id, key, digest, body["amount"], body["currency"],
                                        json.dumps(body, sort_keys=True), _now()]
                if kind == "payout":
                    columns.append("status")
                    values.append("pending")
                db.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(values))})",
                           values)
                row = db.execute(f"SELECT * FROM {table} WHERE id = ?", (new_id,)).fetchone()
                db.execute("COMMIT")
                return Made(_record(kind, row), replayed=False)
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")

    def find(self, kind: str, *, key: str | None = None, record_id: str | None = None) -> dict[str, Any] | None:
        """The charge or payout made with idempotency key ``key``, or with id ``record_id``; None if none."""
        table, _ = _TABLES[kind]
        column, value = ("idempotency_key", key) if key is not None else ("id", record_id)
        with self._connect() as db:
            row = db.execute(f"SELECT * FROM {table} WHERE {column} = ?", (value,)).fetchone()
        return _record(kind, row) if row is not None else None

    def set_payout_status(self, payout_id: str, status: str) -> dict[str, Any] | None:
        """Settle a pending payout as ``"paid"`` or ``"failed"``; returns it, or None if there is no such payout.

        Raises:
            ValueError: ``status`` is neither.
        """
        if status not in ("paid", "failed"):
            raise ValueError(f"a payout settles as paid or failed, not {status!r}")
        with self._connect() as db:
            db.execute("UPDATE payouts SET status = ? WHERE id = ?", (status, payout_id))
        return self.find("payout", record_id=payout_id)

    def record_webhook(self, payout_id: str, event_type: str, body: bytes, attempt: int, answer_status: int | None,
                       answer: str | None) -> None:
        """Note one webhook delivery attempt: the payout, the event type (``payout.paid``), the SHA-256 of the exact
        body bytes, the attempt number of this event (from 1), the receiver's HTTP status (None: no answer) and
        the gist of its answer (a disposition, a problem kind, or why there was no answer)."""
        with self._connect() as db:
            db.execute("INSERT INTO webhooks (payout_id, type, body_digest, attempt, answer_status, answer, sent_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (payout_id, event_type, hashlib.sha256(body).hexdigest(), attempt, answer_status, answer,
                        _now()))

    def webhooks(self, payout_id: str | None = None) -> list[dict[str, Any]]:
        """Every webhook delivery attempt (of ``payout_id`` only, if given), in order: ``seq``, ``payout_id``,
        ``type``, ``body_digest``, ``attempt``, ``answer_status``, ``answer``, ``sent_at``."""
        with self._connect() as db:
            if payout_id is None:
                rows = db.execute("SELECT * FROM webhooks ORDER BY seq")
            else:
                rows = db.execute("SELECT * FROM webhooks WHERE payout_id = ? ORDER BY seq", (payout_id,))
            return [dict(row) for row in rows]

    def charges(self) -> list[dict[str, Any]]:
        """Every charge made, oldest first."""
        return self._all("charge")

    def payouts(self) -> list[dict[str, Any]]:
        """Every payout made, oldest first."""
        return self._all("payout")

    def calls(self) -> list[dict[str, Any]]:
        """Every request received, in order: ``seq``, ``method``, ``path``, ``idempotency_key``, ``mode``,
        ``received_at``."""
        with self._connect() as db:
            return [dict(row) for row in db.execute("SELECT * FROM calls ORDER BY seq")]

    def _all(self, kind: str) -> list[dict[str, Any]]:
        table, _ = _TABLES[kind]
        with self._connect() as db:
            return [_record(kind, row) for row in db.execute(f"SELECT * FROM {table} ORDER BY created_at, id")]


def _record(kind: str, row: sqlite3.Row) -> dict[str, Any]:
    record: dict[str, Any] = {"id": row["id"], "object": kind, "amount": row["amount"],
                              "currency": row["currency"], "idempotency_key": row["idempotency_key"],
                              "request": json.loads(row["request"]), "created_at": row["created_at"]}
    record["status"] = row["status"] if kind == "payout" else "succeeded"
    return record
