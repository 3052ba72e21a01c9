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
def polished_tree(plain: bool = False) -> Any:
    """The whole command tree in one layout (rich's tables unless ``plain``), built and polished once: building
    it imports and converts every command."""
    return command_tree(plain=plain)


def help_of(path: tuple[str, ...], capsys: pytest.CaptureFixture[str], plain: bool = False) -> str:
    command = polished_tree(plain)
    command.main([*path, "--help"], prog_name="fencepost", standalone_mode=False)
    return capsys.readouterr().out


def test_the_root_help_of_the_real_command_reads_as_written() -> None:
    result = run_cli(["--help"], env=subprocess_env(COLUMNS="100"))
    assert result.returncode == 0, result.describe()
    text = flat(result.stdout)
    assert not TYPER_LABEL.search(result.stdout) and "--version Print the version and exit." in text
    polished = polished_tree()
    for name, sub in polished.commands.items():
        summary = sub.short_help
        assert summary and summary[-1] in ".)", (name, summary)
        assert f"{name} {summary}" in text, (name, summary)  # whole, not cut off


def test_every_command_help_has_no_type_labels_or_placeholders(capsys: pytest.CaptureFixture[str]) -> None:
    polished = polished_tree()
    paths = [p for p, _ in commands(polished)]
    assert len(paths) > 30  # the whole tree was walked
    for path in paths:
        text = help_of(path, capsys) + help_of(path, capsys, plain=True)
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
    plain = help_of(("rehearsal", "status"), capsys, plain=True)
    assert re.search(r"-d, --database TEXT\s", plain) and re.search(r"--json\s+Print machine-readable JSON", plain)
    assert "│" not in plain and "╭" not in plain


def test_a_summary_is_the_first_whole_sentence() -> None:
    assert helptext.first_sentence("Check A, B and C. Exit 0 when sound.\n\nMore.") == "Check A, B and C."
    assert helptext.first_sentence("Abort a PENDING Attempt (e.g. a stuck\none); fences it.") == (
        "Abort a PENDING Attempt (e.g. a stuck one); fences it.")


@pytest.mark.parametrize("command", [("worker",), ("serve",), ("host", "submit")])
def test_option_names_and_metavars_stay_whole_in_an_80_column_terminal(command: tuple[str, ...]) -> None:
    """From new users' trials: at 80 columns ``worker --help`` showed ``--sandbox-max-by…``, then (with the
    columns narrowed) ``FENCEPOST_LEASE_SECO…`` and ``sqlite:///fencepost.…``: rich's option columns left the
    description a quarter of the width. Below 100 columns the help is plain text, where nothing is cut."""
    result = run_cli([*command, "--help"], env=subprocess_env(COLUMNS="80"))
    assert result.returncode == 0, result.describe()
    assert "…" not in result.stdout, result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
    target: Any = polished_tree()
    for name in command:
        target = target.commands[name]
    for param in target.params:
        if param.envvar:
            assert param.envvar in result.stdout.replace("\n", " "), (param.envvar, result.stdout)
    shown = [token.rstrip(",") for token in result.stdout.replace("│", " ").split()]
    for param in target.params:
        for option in (*param.opts, *param.secondary_opts):
            assert option in shown, (option, result.stdout)
        if getattr(param, "metavar", None):
            assert param.metavar in shown, (param.metavar, result.stdout)


@pytest.mark.parametrize("columns", ["80", "200"])
@pytest.mark.parametrize("group", [(), ("host",), ("demo",)])
def test_a_group_run_without_a_command_shows_its_help_on_stdout(group: tuple[str, ...], columns: str) -> None:
    """A trial: in the plain layout click carries the help as the error's message, and `fencepost` alone printed
    it squashed into one 2,400-character line on stderr."""
    result = run_cli(list(group), env=subprocess_env(COLUMNS=columns))
    assert result.returncode == 2, result.describe()
    assert result.stderr == "", result.describe()
    assert " ".join(("Usage: fencepost", *group)) in result.stdout and "Commands" in result.stdout, result.stdout
    assert len(result.stdout.splitlines()) > 8, result.stdout
