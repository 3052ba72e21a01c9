"""The fence is a type (ADR 0015): a delivery's writes are reachable only from a ``FencedUnit``, and only
``Store.fenced`` makes one."""

from __future__ import annotations

import ast
from pathlib import Path

from fencepost.store.ports import FencedRehearsalPort, RehearsalPort

SRC = Path(__file__).resolve().parents[2] / "src" / "fencepost"
DELIVERY_WRITES = {"start_attempt", "receipt_running", "receipt_finish", "finish_attempt"}
# Where each fence-making name may appear in src: the one place that builds or opens a fenced unit.
ALLOWED = {"_fence": {"store/base.py"}, "SqlFencedUnit": {"store/sql/unit.py"},
           "SqlFencedRehearsal": {"store/sql/unit.py"}}


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_plain_rehearsal_port_has_no_delivery_write() -> None:
    assert _members(RehearsalPort) & DELIVERY_WRITES == set()
    assert _members(FencedRehearsalPort) >= DELIVERY_WRITES


def uses(tree: ast.AST) -> set[str]:
    """Names of ``ALLOWED`` that a module calls (``x._fence(...)``, ``SqlFencedUnit(...)``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ALLOWED:
                found.add(name)
    return found


def test_only_store_fenced_opens_a_fenced_unit() -> None:
    offenders = []
    seen: set[str] = set()
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        for name in uses(ast.parse(path.read_text(encoding="utf-8"))):
            seen.add(name)
            if relative not in ALLOWED[name]:
                offenders.append(f"{relative} calls {name}")
    assert offenders == []
    assert seen == set(ALLOWED), "the scan found the allowed uses themselves"


def test_the_scan_catches_a_unit_opened_elsewhere() -> None:
    sneaky = "def unit(tx, lease):\n    tx._fence(lease).rehearsal.receipt_running('a', 1)\n"
    assert uses(ast.parse(sneaky)) == {"_fence"}
