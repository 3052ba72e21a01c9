"""``--help`` as a person would write it: ``--database URL`` rather than ``--database <str>``, nothing after a
flag, ``RUN_ID`` rather than ``{run_id}`` for an argument, and every command summary one whole sentence.

``polish(command)`` walks the click command tree that typer built and rewrites only how it is displayed:
parameters keep their names, types, defaults and parsing.
"""

from __future__ import annotations

import inspect
import re
import shutil
from typing import Any

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from fencepost.cli.suggest import SuggestingGroup

#: How a value's type is named after an option that takes one (and has no ``metavar`` of its own), by the
#: name typer gives the type.
_TYPE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "Path": "PATH", "path": "PATH",
               "int range": "INTEGER", "float range": "NUMBER", "file": "FILE", "UUID": "UUID",
               "datetime": "DATETIME"}
_FLAG_TYPES = {"bool", "bool range"}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`])")


def value_name(typer_label: str) -> str | None:
    """What to print after an option, from typer's ``<type>`` label: ``TEXT``, ``INTEGER``, ``PATH``, the
    choices as they are (``json|text``), or None for a flag (a boolean takes no value)."""
    label = typer_label.strip("<>")
    if label in _FLAG_TYPES:
        return None
    return _TYPE_NAMES.get(label, label if "|" in label else label.upper())


class PlainOption(TyperOption):
    """An option shown as ``--name VALUE`` (a flag shows no value at all)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.metavar is not None:
            return str(self.metavar)
        if self.is_flag or self.count:
            return None
        shown = value_name(self.display_type(ctx))
        if shown is None:
            return None
        return shown + "..." if self.nargs != 1 or self.multiple else shown


class PlainArgument(TyperArgument):
    """An argument shown by its upper-case name: ``RUN_ID``, or ``[RUN_ID]`` when it may be left out."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar or (self.name or "").upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + "..." if self.nargs != 1 else name


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph, whole (however long), with its lines joined."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    return _SENTENCE_END.split(paragraph, 1)[0]


#: Narrower than this many columns (``COLUMNS``, else the terminal; 80 when neither is known, as in a pipe), help is
#: click's plain layout: each option with its value name, its description indented beside it and wrapped. Rich's
#: boxed table gave its option columns half of an 80-column terminal and cut long option names, environment
#: variables and defaults with "…" (a new user's trial); from 100 columns nothing is cut.
PLAIN_BELOW_COLUMNS = 100


def plain_layout() -> bool:
    """Whether help is laid out as plain text here (``PLAIN_BELOW_COLUMNS``)."""
    return shutil.get_terminal_size().columns < PLAIN_BELOW_COLUMNS


def polish(command: Any, *, plain: bool | None = None) -> Any:
    """Rewrite how ``command`` and every command under it show themselves in ``--help`` (in place).

    Args:
        plain: lay the help out as plain text (click's) instead of rich's tables; None: ``plain_layout()``.
    Returns:
        ``command``, whose parameters are now ``PlainOption``/``PlainArgument`` and whose sub-commands each
        have a ``short_help`` that is one whole sentence of their help (never cut off mid-sentence).
    """
    if plain is None:
        plain = plain_layout()
    if type(command) is TyperGroup:
        command.__class__ = SuggestingGroup  # near misses among all its commands (cli.suggest)
    help_option = command.get_help_option(typer.Context(command))  # made once and kept by the command
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if type(param) is TyperOption:
            param.__class__ = PlainOption
        elif type(param) is TyperArgument:
            param.__class__ = PlainArgument
        if plain and getattr(param, "help", None):
            param.help = _unescaped(param.help)
    if plain:
        command.rich_markup_mode = None
        command.help = _unescaped(command.help) if command.help else command.help
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for sub in subcommands.values():
            if not sub.short_help and sub.help:
                sub.short_help = first_sentence(sub.help)
            polish(sub, plain=plain)
    return command


def _unescaped(text: str) -> str:
    """Help text without rich's markup escapes (``\\[``), which plain text would show as they are."""
    return text.replace("\\[", "[")


def unwrap_help(typer_app: typer.Typer) -> None:
    """Joins the hard line breaks inside each paragraph of every command's help (its docstring or ``help=``),
    in ``typer_app`` and its groups, so the terminal's width decides where lines break.

    The docstrings are wrapped at the source's 120 columns; typer keeps single line breaks, so an 80-column
    terminal showed each source line as a long line and a short one. Paragraphs (blank-line separated) and a
    paragraph that starts with ``\\b`` (typer's "keep as is") are left as they are. Changes ``typer_app`` in place.
    """
    for info in typer_app.registered_commands:
        text = info.help if info.help is not None else inspect.getdoc(info.callback)
        if text:
            info.help = _joined(text)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            unwrap_help(group.typer_instance)


def _joined(text: str) -> str:
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n"))
                       for p in inspect.cleandoc(text).split("\n\n"))
