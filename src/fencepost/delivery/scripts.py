"""Split a SQL script into statements with SQLite's own tokenizer, and find the ones that manage a transaction.

A migration is delivered inside one transaction of the target that also writes its ledger row (ADR 0055). A
script that says ``BEGIN``, ``COMMIT``, ``END``, ``ROLLBACK``, ``SAVEPOINT`` or ``RELEASE`` itself cannot be put
inside that transaction: it is delivered unfenced (non-idempotent, ADR 0055). The split uses
``sqlite3.complete_statement``, so a trigger body (``CREATE TRIGGER ... BEGIN ... END;``) stays one statement and
its inner ``BEGIN``/``END`` are not mistaken for transaction control; semicolons inside strings, quoted names and
comments do not end a statement. The rehearsal can reuse this module (it imports nothing of fencepost).
"""

from __future__ import annotations

import re
import sqlite3

#: The first keyword of a statement that controls a transaction in SQLite's grammar.
TRANSACTION_KEYWORDS = frozenset({"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"})

_LEADING_NOISE = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)
_WORD = re.compile(r"[A-Za-z_]+")


def split_statements(script: str) -> list[str]:
    """The complete statements of ``script`` in order, each with its own ``;``, empty ones dropped.

    Args:
        script: SQL text (a migration's up file).
    Returns:
        statements, stripped. A trailing statement without ``;`` is returned as it is (SQLite runs it).
    """
    statements: list[str] = []
    start = 0
    position = script.find(";")
    while position != -1:
        candidate = script[start:position + 1]
        if sqlite3.complete_statement(candidate):
            if _has_sql(candidate):
                statements.append(candidate.strip())
            start = position + 1
        position = script.find(";", position + 1)
    rest = script[start:]
    if _has_sql(rest):
        statements.append(rest.strip())
    return statements


def first_keyword(statement: str) -> str:
    """The statement's first keyword in upper case, after comments and blanks ("" when there is none)."""
    body = statement[_LEADING_NOISE.match(statement).end():]  # type: ignore[union-attr]
    word = _WORD.match(body)
    return word.group(0).upper() if word else ""


def _has_sql(text: str) -> bool:
    body = text[_LEADING_NOISE.match(text).end():]  # type: ignore[union-attr]
    return bool(body.strip().strip(";").strip())


def transaction_statements(script: str) -> list[str]:
    """The statements of ``script`` that manage a transaction themselves (``TRANSACTION_KEYWORDS``)."""
    return [s for s in split_statements(script) if first_keyword(s) in TRANSACTION_KEYWORDS]


def manages_own_transaction(script: str) -> bool:
    """Whether ``script`` controls its own transaction, so it cannot run inside the delivery's (ADR 0055)."""
    return bool(transaction_statements(script))
