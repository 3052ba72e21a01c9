"""Whether a SQL script manages its own transaction (issue 11 item 1, ADR 0061).

Many migration tools write each script as ``PRAGMA foreign_keys=OFF; BEGIN; ...; COMMIT;``. Such a script
cannot run inside a transaction that fencepost opens around it, so the sandbox runs it as written instead.

The script is split into statements on the boundaries SQLite's own tokenizer reports
(``sqlite3.complete_statement``, i.e. ``sqlite3_complete``: a ``;`` inside a string, a quoted identifier, a
comment or a ``CREATE TRIGGER ... BEGIN ... END`` body is not a boundary), and each statement's leading
keyword, after its comments, is looked at. No regular expression ever reads the raw script, so a ``BEGIN``
in a trigger body, a string or a comment is never mistaken for transaction control.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

#: The leading keywords of SQLite's transaction-control statements.
TRANSACTION_KEYWORDS = frozenset({"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"})
#: How much tokenizing ``split_statements`` does at most: ``SCAN_FACTOR * len(sql) + SCAN_SLACK`` characters.
SCAN_FACTOR = 64
SCAN_SLACK = 1_000_000


@dataclass(frozen=True)
class ControlStatement:
    """One transaction-control statement of a script.

    Attributes:
        keyword: its leading keyword, upper case (one of ``TRANSACTION_KEYWORDS``).
        index: its position among the script's statements (0-based).
        offset: the character offset of its first character in the script.
    """

    keyword: str
    index: int
    offset: int


def split_statements(sql: str) -> list[tuple[int, str]]:
    """Split ``sql`` into statements on the boundaries ``sqlite3.complete_statement`` reports.

    Args:
        sql: a script (any text; a trailing statement without ``;`` is returned as the last one).
    Returns:
        ``(offset, text)`` per statement in order: its offset in ``sql`` (characters) and its text including
        the terminating ``;``. Statements holding nothing but whitespace and comments are left out. Each
        ``;`` is a candidate boundary, tested on the text since the last boundary; once the tokenizer has
        read ``SCAN_FACTOR`` times the script (an unterminated string or comment makes every later ``;``
        re-read the same text), the rest is returned as one statement, which SQLite will refuse to run.
    """
    result: list[tuple[int, str]] = []
    start = 0
    budget = SCAN_FACTOR * len(sql) + SCAN_SLACK  # characters the tokenizer may read in all
    position = sql.find(";")
    while position != -1:
        candidate = sql[start:position + 1]
        budget -= len(candidate)
        if budget < 0:
            break  # an unterminated quote or comment: the rest is one statement (linear time on any input)
        if sqlite3.complete_statement(candidate):
            result.append((start, candidate))
            start = position + 1
        position = sql.find(";", position + 1)
    result.append((start, sql[start:]))
    return [(offset, text) for offset, text in result if _leading_word(text) is not None]


def _leading_word(statement: str) -> str | None:
    """The statement's first keyword (upper case) after whitespace and comments, or None when it has none."""
    i, n = 0, len(statement)
    while i < n:
        ch = statement[i]
        if ch.isspace():
            i += 1
        elif statement.startswith("--", i):
            end = statement.find("\n", i)
            i = n if end == -1 else end + 1
        elif statement.startswith("/*", i):
            end = statement.find("*/", i + 2)
            i = n if end == -1 else end + 2
        else:
            break
    j = i
    while j < n and (statement[j].isalpha() or statement[j] == "_"):
        j += 1
    return statement[i:j].upper() if j > i else None


def control_statements(sql: str) -> list[ControlStatement]:
    """The transaction-control statements of ``sql`` (``BEGIN``, ``COMMIT``, ``END``, ``ROLLBACK``,
    ``SAVEPOINT``, ``RELEASE``), found by statement boundaries and leading keyword.

    Args:
        sql: a script.
    Returns:
        Each control statement's keyword, statement index and character offset, in order (empty when the
        script leaves transactions to its runner).
    """
    found = []
    for index, (offset, text) in enumerate(split_statements(sql)):
        word = _leading_word(text)
        if word in TRANSACTION_KEYWORDS:
            found.append(ControlStatement(word, index, offset))
    return found


def manages_own_transaction(sql: str) -> bool:
    """True when ``sql`` holds a statement of its own that begins, ends or names a transaction.

    Args:
        sql: a script.
    Returns:
        Whether any statement's leading keyword is one of ``TRANSACTION_KEYWORDS`` (``control_statements``).
    """
    return bool(control_statements(sql))
