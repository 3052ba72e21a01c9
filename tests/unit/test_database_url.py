"""Database URL parsing (fencepost.store.url): the backend is chosen from the URL alone."""

from __future__ import annotations

import pytest

from fencepost.core.errors import InvalidInput
from fencepost.store.url import DEFAULT_URL, parse_database_url


@pytest.mark.parametrize(("raw", "path"), [
    ("sqlite:///relative/path.db", "relative/path.db"),
    ("sqlite:////absolute/path.db", "/absolute/path.db"),
    ("sqlite:///fencepost.db", "fencepost.db"),
    ("SQLITE:///upper.db", "upper.db"),
    ("  sqlite:///padded.db  ", "padded.db"),
])
def test_sqlite_url_forms(raw: str, path: str) -> None:
    url = parse_database_url(raw)
    assert url.backend == "sqlite"
    assert url.path == path
    assert url.dsn is None
    assert url.options == {}


@pytest.mark.parametrize("raw", ["fencepost.db", "/tmp/some/control.db", "data/x.sqlite"])
def test_bare_path_means_sqlite(raw: str) -> None:
    url = parse_database_url(raw)
    assert (url.backend, url.path) == ("sqlite", raw)


def test_default_url_is_sqlite_file() -> None:
    assert parse_database_url(DEFAULT_URL).backend == "sqlite"


def test_sqlite_options_are_validated_and_lowercased() -> None:
    url = parse_database_url("sqlite:///x.db?journal_mode=DELETE&synchronous=Normal")
    assert url.options == {"journal_mode": "delete", "synchronous": "normal"}
    assert url.display == "sqlite (delete journal)"


@pytest.mark.parametrize(("raw", "scheme"), [
    ("postgresql://fence@db.example:5433/control", "postgresql"),
    ("postgres://fence@db.example:5433/control", "postgresql"),
])
def test_postgresql_forms(raw: str, scheme: str) -> None:
    url = parse_database_url(raw)
    assert url.backend == "postgres"
    assert url.dsn == f"{scheme}://fence@db.example:5433/control"
    assert url.path is None


def test_display_never_carries_path_or_password() -> None:
    assert "secret" not in parse_database_url("postgresql://u:secret@h/db").display
    assert "hidden" not in parse_database_url("sqlite:////hidden/dir/c.db").display


@pytest.mark.parametrize(("raw", "needle"), [
    ("mysql://root@localhost/db", "unsupported database URL scheme 'mysql'"),
    ("http://example.com/x.db", "unsupported database URL scheme 'http'"),
    ("sqlite:///x.db?cache=shared", "unknown sqlite URL option 'cache'"),
    ("sqlite:///x.db?journal_mode=memory", "journal_mode='memory' is not one of"),
    ("sqlite:///x.db?synchronous=off", "synchronous='off' is not one of"),
    ("sqlite:///:memory:", "not an in-memory database"),
    (":memory:", "not an in-memory database"),
    ("sqlite://", "the sqlite URL names no file"),
    ("sqlite:///", "the sqlite URL names no file"),
    ("sqlite://host/x.db", "a sqlite URL has no host"),
    ("sqlite:rel2.db", "database URL sqlite:... lacks '//'"),
    ("postgresql:fp_main", "database URL postgresql:... lacks '//'"),
    ("postgres:/tmp/x", "database URL postgres:... lacks '//'"),
    ("-", "'-' is not a database"),
    ("", "empty database URL"),
    ("   ", "empty database URL"),
])
def test_bad_urls_are_invalid_input_with_a_clear_message(raw: str, needle: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_database_url(raw)
    assert needle in str(caught.value)


def test_a_malformed_host_is_one_clear_error_without_the_password() -> None:
    with pytest.raises(InvalidInput, match="malformed database URL") as caught:
        parse_database_url("postgresql://u:secret@[::1/x")
    assert "secret" not in str(caught.value)
