"""``--help`` reads as a person would write it (issue 11, "Also"): no ``<bool>``/``<str>`` after options, no
``{run_id}`` placeholders, and every command summary one whole sentence, never cut mid-sentence. The real
``fencepost`` executable for the root help; every command of the tree in process, polished as ``main`` does."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import pytest

from fencepost.cli import helptext
from fencepost.cli.app import command_tree
from helpers.processes import run_cli, subprocess_env

TYPER_LABEL = re.compile(r"<(?:bool|str|int|float|path|Path|int range|float range)>")
PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from commands(sub, (*path, name))


def flat(text: str) -> str:
    """Help text with its box drawing and line breaks taken out (a wrapped summary reads as one line)."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@functools.cache
def polished_tree() -> Any:
    """The whole command tree, built and polished once (building it imports and converts every command)."""
    return helptext.polish(command_tree())


def help_of(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    command = polished_tree()
    command.main([*path, "--help"], prog_name="fencepost", standalone_mode=False)
    return capsys.readouterr().out


def test_the_root_help_of_the_real_command_reads_as_written() -> None:
    result = run_cli(["--help"], env=subprocess_env(COLUMNS="100"))
    assert result.returncode == 0, result.describe()
    text = flat(result.stdout)
    assert not TYPER_LABEL.search(result.stdout) and "--version Print the version and exit." in text
    polished = helptext.polish(command_tree())
    for name, sub in polished.commands.items():
        summary = sub.short_help
        assert summary and summary[-1] in ".)", (name, summary)
        assert f"{name} {summary}" in text, (name, summary)  # whole, not cut off


def test_every_command_help_has_no_type_labels_or_placeholders(capsys: pytest.CaptureFixture[str]) -> None:
    polished = helptext.polish(command_tree())
    paths = [p for p, _ in commands(polished)]
    assert len(paths) > 30  # the whole tree was walked
    for path in paths:
        text = help_of(path, capsys)
        assert "Usage: fencepost" in text, path
        assert not TYPER_LABEL.search(text), (path, TYPER_LABEL.findall(text))
        usage = text[text.index("Usage:"):].split("\n", 1)[0]
        assert not PLACEHOLDER.search(usage), (path, usage)


def test_arguments_are_named_in_capitals_and_values_by_kind(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(("rehearsal", "status"), capsys)
    assert "Usage: fencepost rehearsal status [OPTIONS] RUN_ID" in text
    assert re.search(r"--database\s+-d\s+TEXT\s", text)
    assert re.search(r"--json\s+Print machine-readable JSON", text)  # a flag shows no value
    serve = flat(help_of(("serve",), capsys))
    assert "--port INTEGER [0<=x<=65535]" in serve and "--work-dir PATH" in serve


def test_a_summary_is_the_first_whole_sentence() -> None:
    assert helptext.first_sentence("Check A, B and C. Exit 0 when sound.\n\nMore.") == "Check A, B and C."
    assert helptext.first_sentence("Abort a PENDING Attempt (e.g. a stuck\none); fences it.") == (
        "Abort a PENDING Attempt (e.g. a stuck one); fences it.")


@pytest.mark.parametrize("command", [("worker",), ("serve",), ("host", "submit")])
def test_option_names_and_metavars_stay_whole_in_an_80_column_terminal(command: tuple[str, ...]) -> None:
    """From a new user's trial: at 80 columns ``worker --help`` showed ``--sandbox-max-by…``: the option and
    value columns (``--no-keep-sandboxes``, ``MODULE:ATTRIBUTE``) left the description a sixth of the width.
    (The longest environment variable names are still cut there; the descriptions are whole.)"""
    result = run_cli([*command, "--help"], env=subprocess_env(COLUMNS="80"))
    assert result.returncode == 0, result.describe()
    target: Any = helptext.polish(command_tree())
    for name in command:
        target = target.commands[name]
    shown = result.stdout.replace("│", " ").split()
    for param in target.params:
        for option in (*param.opts, *param.secondary_opts):
            assert option in shown, (option, result.stdout)
        if getattr(param, "metavar", None):
            assert param.metavar in shown, (param.metavar, result.stdout)
