"""Both dialects ship the same named queries, and every name the operations run exists in both."""

from __future__ import annotations

import inspect
import re

import pytest

from fencepost.store import outbox_ops, rehearsal_ops, workflow_ops
from fencepost.store.queries import DIALECT_FILES, load_dialect, load_queries, to_pyformat

DIALECTS = ("fencepost.store.sqlite", "fencepost.store.postgres")


def _names(package: str, filename: str | None = None) -> set[str]:
    return set(load_dialect(package) if filename is None else load_queries(package, filename))


def _sql(text: str) -> str:
    """The query without its comment lines."""
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))


@pytest.mark.parametrize("filename", DIALECT_FILES)
def test_both_dialects_define_the_same_query_names(filename: str) -> None:
    sqlite, postgres = (_names(p, filename) for p in DIALECTS)
    assert sqlite, f"no queries loaded from {filename}"
    assert sqlite - postgres == set(), f"queries missing from postgres/{filename}"
    assert postgres - sqlite == set(), f"queries missing from sqlite/{filename}"


@pytest.mark.parametrize("package", DIALECTS)
def test_every_query_the_operations_run_exists(package: str) -> None:
    used: set[str] = set()
    for module in (outbox_ops, rehearsal_ops, workflow_ops):
        used |= set(re.findall(r"""_run\(\s*["']([a-z_0-9]+)["']""", inspect.getsource(module)))
    assert {"claim_commands", "renew_lease", "insert_run"} <= used  # the scan itself works
    assert used - _names(package) == set()


@pytest.mark.parametrize("package", DIALECTS)
def test_no_query_is_empty(package: str) -> None:
    for name, text in load_dialect(package).items():
        assert _sql(text).strip(), f"query {name} of {package} has no SQL"


def test_postgres_queries_never_take_the_worker_clock_for_lease_deadlines() -> None:
    # The server computes deadlines; the :lease_until parameter (a client-side sum) is the SQLite dialect's.
    queries = load_queries("fencepost.store.postgres")
    for name in ("claim_commands", "renew_lease"):
        assert ":lease_until" not in _sql(queries[name]), name
        assert "make_interval(secs => :lease_seconds" in _sql(queries[name]), name
    assert "clock_timestamp()" in _sql(load_queries("fencepost.store.postgres")["store_now"])


def test_postgres_claim_skips_locked_rows() -> None:
    claim = _sql(load_queries("fencepost.store.postgres")["claim_commands"])
    assert claim.count("FOR UPDATE SKIP LOCKED") == 2


def test_to_pyformat_keeps_casts_and_escapes_percent() -> None:
    assert to_pyformat("SELECT :a::integer, '5%' || :b") == "SELECT %(a)s::integer, '5%%' || %(b)s"
