"""The two error tables (ADR 0016): every ``FencepostError`` class in ``src/fencepost`` answers the API with a
problem kind that is not a 500 unless it is an integrity violation, and exits the CLI with today's code.

Classes are discovered, not listed: every module of ``fencepost`` is imported and ``__subclasses__`` walked, so a
class added later is checked without touching this file.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import fencepost
from fencepost.api.problems import ERRORS, KINDS, PROTOCOL_KINDS, ProblemKind, problem_for
from fencepost.cli.exit_codes import EXIT_CODES, exit_code
from fencepost.core.errors import (
    Conflict,
    FencepostError,
    IntegrityViolation,
    InvalidInput,
    InvalidPlan,
    LeaseActive,
    LeaseLost,
    NotAllowed,
    NotFound,
    RecoverableFinalization,
    SchemaNotReady,
    StoreUnavailable,
)
from fencepost.store.base import StoreBusy

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _subclasses(cls: type[FencepostError]) -> Iterator[type[FencepostError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _error_classes() -> list[type[FencepostError]]:
    for module in pkgutil.walk_packages(fencepost.__path__, "fencepost."):
        if not module.name.endswith(".__main__"):  # runs the CLI when imported as a script only, but skip it
            importlib.import_module(module.name)
    found = {cls for cls in _subclasses(FencepostError) if cls.__module__.startswith("fencepost.")}
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


ERROR_CLASSES = _error_classes()
CLASS_IDS = [cls.__qualname__ for cls in ERROR_CLASSES]

# Today's API mapping; LeaseLost answered "conflict" before the table and still does.
TODAY_KINDS: dict[type[FencepostError], tuple[str, int]] = {
    FencepostError: ("internal", 500),
    InvalidInput: ("invalid-input", 422),
    InvalidPlan: ("invalid-input", 422),
    NotFound: ("not-found", 404),
    Conflict: ("conflict", 409),
    LeaseActive: ("lease-active", 409),
    LeaseLost: ("conflict", 409),
    NotAllowed: ("not-allowed", 409),
    SchemaNotReady: ("schema-not-ready", 503),
    StoreUnavailable: ("unavailable", 503),
    StoreBusy: ("unavailable", 503),
    IntegrityViolation: ("integrity", 500),
    RecoverableFinalization: ("recoverable-finalization", 503),  # host-spec M3: "not recorded yet", retry later
}

# Today's exit codes (docs/configuration.md, docs/workflows.md).
TODAY_CODES: dict[type[FencepostError], int] = {
    FencepostError: 1,
    InvalidInput: 2,
    InvalidPlan: 2,
    NotFound: 2,
    Conflict: 3,
    LeaseActive: 3,
    LeaseLost: 1,
    SchemaNotReady: 4,
    StoreUnavailable: 5,
    StoreBusy: 5,
    IntegrityViolation: 5,
    NotAllowed: 6,
}


def test_discovery_finds_the_classes_of_every_layer() -> None:
    # Without this the tests below could pass over an empty list (e.g. if discovery imported nothing).
    assert set(TODAY_KINDS) - {FencepostError} <= set(ERROR_CLASSES)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=CLASS_IDS)
def test_every_error_class_answers_with_a_non_500_kind_except_integrity(cls: type[FencepostError]) -> None:
    row = problem_for(cls)
    assert KINDS[row.kind] == row, "the kind must name this row in problem()"
    if issubclass(cls, IntegrityViolation):
        assert (row.kind, row.status) == ("integrity", 500)
    else:
        # 503 (schema not ready, store unavailable) is an answer; 500 says "a bug" and is kept for integrity.
        assert row.status != 500 and row.kind != "internal", f"{cls.__qualname__} would answer {row.status} {row.kind}"


@pytest.mark.parametrize("cls", list(TODAY_KINDS), ids=[cls.__qualname__ for cls in TODAY_KINDS])
def test_known_classes_keep_their_kind_and_status(cls: type[FencepostError]) -> None:
    row = problem_for(cls)
    assert (row.kind, row.status) == TODAY_KINDS[cls]


def test_a_subclass_without_a_row_answers_as_its_parent() -> None:
    class Local(LeaseActive):
        pass

    assert Local not in ERRORS and problem_for(Local) == ERRORS[LeaseActive]
    assert Local not in EXIT_CODES and exit_code(Local) == EXIT_CODES[Conflict] == 3


def test_each_kind_has_one_status_and_title() -> None:
    rows: list[ProblemKind] = [*ERRORS.values(), *PROTOCOL_KINDS]
    assert len({row.kind for row in rows}) == len(set(rows)), rows


def test_every_error_kind_is_documented_in_api_md_with_its_status() -> None:
    documented = dict(re.findall(r"^\| `urn:fencepost:problem:([a-z-]+)` \| (\d{3}) \|",
                                 (DOCS / "api.md").read_text(encoding="utf-8"), re.M))
    # every kind the API can answer, the HTTP layer's own (PROTOCOL_KINDS) as well as the error classes'
    missing = {row.kind: row.status for row in KINDS.values() if documented.get(row.kind) != str(row.status)}
    assert not missing, f"docs/api.md lacks or misstates {missing}"


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=CLASS_IDS)
def test_every_error_class_exits_with_a_documented_code(cls: type[FencepostError]) -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8").split("## Exit codes", 1)[1]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", text.split("\n## ", 1)[0], re.M)}
    assert exit_code(cls) in documented - {0}


@pytest.mark.parametrize("cls", list(TODAY_CODES), ids=[cls.__qualname__ for cls in TODAY_CODES])
def test_known_classes_keep_todays_exit_code(cls: type[FencepostError]) -> None:
    assert exit_code(cls) == TODAY_CODES[cls]


def test_core_errors_carry_no_kind_or_exit_code() -> None:
    # Core knows nothing of HTTP or exit codes (ADR 0016): the tables above are the only source.
    for cls in [FencepostError, *ERROR_CLASSES]:
        assert not {"kind", "exit_code", "status"} & set(vars(cls)), cls
