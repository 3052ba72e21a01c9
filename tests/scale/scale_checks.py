"""Whole-schema checks of a drained queue, from durable records only (SQL over the control tables).

Each function returns a list of problems (empty when the property holds), each naming the command or Attempt,
so a failing assertion says what broke. ``lease_events`` is the heartbeat history. Its ``seq`` is assigned
while the writing transaction holds the command's row lock, so for one command it orders events exactly as
their transactions were serialized.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from scale_support import ScaleDB

TERMINAL = ("DELIVERED", "FAILED", "ABORTED")


def _show(problems: list[str], limit: int = 20) -> list[str]:
    return problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])


def status_counts(db: ScaleDB) -> dict[str, Any]:
    """Attempts and commands by status, for assertion messages."""
    return {
        "attempts": dict(Counter({str(s): int(n) for s, n in db.query(
            "SELECT status, count(*) FROM rehearsal_attempts GROUP BY status")})),
        "commands": dict(Counter({str(s): int(n) for s, n in db.query(
            "SELECT status, count(*) FROM commands GROUP BY status")})),
    }


def every_attempt_succeeded(db: ScaleDB, expected: int) -> list[str]:
    """``expected`` Attempts, each SUCCEEDED with its command DELIVERED: none lost, none left open."""
    problems = []
    counts = status_counts(db)
    if counts["attempts"] != {"SUCCEEDED": expected}:
        problems.append(f"attempts by status {counts['attempts']}, expected {{'SUCCEEDED': {expected}}}")
    if counts["commands"] != {"DELIVERED": expected}:
        problems.append(f"commands by status {counts['commands']}, expected {{'DELIVERED': {expected}}}")
    orphans = db.scalar("SELECT count(*) FROM commands c WHERE NOT EXISTS "
                        "(SELECT 1 FROM rehearsal_attempts a WHERE a.command_id = c.id)")
    if orphans:
        problems.append(f"{orphans} commands without an Attempt")
    return problems


def delivered_exactly_once(db: ScaleDB) -> list[str]:
    """Exactly one ``deliver`` event per command, from its final delivery, and no ``fail``/``abort``."""
    rows = db.query("""
        SELECT c.id, c.delivery_count,
               count(e.seq) FILTER (WHERE e.event = 'deliver'),
               max(e.delivery) FILTER (WHERE e.event = 'deliver'),
               count(e.seq) FILTER (WHERE e.event IN ('fail', 'abort'))
        FROM commands c LEFT JOIN lease_events e ON e.command_id = c.id
        GROUP BY c.id, c.delivery_count""")
    problems = []
    for command_id, count, delivers, delivered_by, failures in rows:
        if delivers != 1 or delivered_by != count or failures:
            problems.append(f"command {command_id}: {delivers} deliver events (by delivery {delivered_by}), "
                            f"{failures} fail/abort events, delivery_count {count}")
    return _show(problems)


def deliveries_match_claims(db: ScaleDB) -> list[str]:
    """``delivery_count`` = one claim plus one takeover per later delivery: the claim/takeover events of a
    command carry deliveries 1, 2, ..., delivery_count in ``seq`` order, the first a ``claim`` and every
    later one a ``takeover``."""
    rows = db.query("""
        SELECT c.id, c.delivery_count,
               coalesce(array_agg(e.event ORDER BY e.seq) FILTER (WHERE e.event IN ('claim', 'takeover')), '{}'),
               coalesce(array_agg(e.delivery ORDER BY e.seq) FILTER (WHERE e.event IN ('claim', 'takeover')), '{}')
        FROM commands c LEFT JOIN lease_events e ON e.command_id = c.id
        GROUP BY c.id, c.delivery_count""")
    problems = []
    for command_id, count, events, deliveries in rows:
        expected_events = ["claim"] + ["takeover"] * (count - 1)
        if list(deliveries) != list(range(1, count + 1)) or list(events) != expected_events:
            claims = list(zip(events, deliveries, strict=True))
            problems.append(f"command {command_id}: delivery_count {count}, claims {claims}")
    return _show(problems)


def no_stale_write_persisted(db: ScaleDB) -> list[str]:
    """Nothing from a superseded delivery after the next delivery's claim.

    - No ``heartbeat`` or ``deliver`` event of delivery d after (in ``seq`` order) the claim of a later
      delivery of the same command.
    - Every Receipt of a SUCCEEDED Attempt, and the Attempt itself, carries the command's final delivery,
      and so does each Receipt's evidence (``execution.delivery``).
    """
    problems = [f"command {c}: {late_event} of delivery {late_delivery} (seq {late_seq}) after the claim of "
                f"delivery {claim_delivery} (seq {claim_seq})"
                for c, late_event, late_delivery, late_seq, claim_delivery, claim_seq in db.query("""
        SELECT late.command_id, late.event, late.delivery, late.seq, claim.delivery, claim.seq
        FROM lease_events late
        JOIN lease_events claim ON claim.command_id = late.command_id
             AND claim.event IN ('claim', 'takeover') AND claim.delivery > late.delivery
             AND claim.seq < late.seq
        WHERE late.event IN ('heartbeat', 'deliver')
        ORDER BY late.seq""")]
    problems += [f"attempt {a} (command delivery {count}): attempt delivery {attempt_delivery}, receipt "
                 f"{position} {status} from delivery {delivery}, evidence delivery {evidence_delivery}"
                 for a, count, attempt_delivery, position, status, delivery, evidence_delivery in db.query("""
        SELECT a.id, c.delivery_count, a.delivery, r.position, r.status, r.delivery,
               (r.evidence::json -> 'execution' ->> 'delivery')::int
        FROM rehearsal_attempts a
        JOIN commands c ON c.id = a.command_id
        JOIN rehearsal_receipts r ON r.attempt_id = a.id
        WHERE a.status = 'SUCCEEDED'
          AND (a.delivery IS DISTINCT FROM c.delivery_count OR r.status <> 'SUCCEEDED'
               OR r.delivery IS DISTINCT FROM c.delivery_count
               OR (r.evidence::json -> 'execution' ->> 'delivery')::int IS DISTINCT FROM c.delivery_count)
        ORDER BY a.id, r.position""")]
    receipts = db.scalar("SELECT count(*) FROM rehearsal_receipts r JOIN rehearsal_attempts a "
                         "ON a.id = r.attempt_id WHERE a.status = 'SUCCEEDED'")
    attempts = db.scalar("SELECT count(*) FROM rehearsal_attempts WHERE status = 'SUCCEEDED'")
    if receipts != 6 * attempts:
        problems.append(f"{receipts} receipts for {attempts} SUCCEEDED attempts (expected six each)")
    return _show(problems)


def claims_by_owner(db: ScaleDB) -> dict[str, int]:
    return {str(o): int(n) for o, n in db.query(
        "SELECT owner, count(*) FROM lease_events WHERE event IN ('claim', 'takeover') GROUP BY owner")}


def takeovers(db: ScaleDB) -> int:
    return int(db.scalar("SELECT count(*) FROM lease_events WHERE event = 'takeover'"))


def redeliveries(db: ScaleDB) -> int:
    """Sum over commands of ``delivery_count - 1``."""
    return int(db.scalar("SELECT coalesce(sum(delivery_count - 1), 0) FROM commands"))
