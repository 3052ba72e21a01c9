"""The root command's sub-commands, each imported when it is asked for.

Importing every command module (the rehearsal engine, the action host, the workflow coordinator, the HTTP API,
the demos) took most of a second before any command ran, on every invocation: `fencepost host show ID` paid
for `fencepost demo payments`. The root group now knows each command by name and the ``module:attribute``
that defines it, and imports that module the first time click asks for the command: to run it, to show its
help, or to list it in the root's help (which therefore still imports them all).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import typer

from fencepost.cli import stdio
from fencepost.cli.helptext import first_sentence, polish, unwrap_help
from fencepost.cli.suggest import SuggestingGroup


@dataclass(frozen=True)
class LazyCommand:
    """Where a sub-command of the root is defined.

    Attributes:
        target: ``"module:attribute"``; the attribute is a ``typer.Typer`` (a group) or a function (a command).
        help_attr: for a function, the name of a module attribute holding its help (else its docstring).
    """

    target: str
    help_attr: str | None = None

    def load(self, name: str, *, plain: bool | None = None) -> Any:
        """Import the module and build the click command (typer's own click, which it may bundle: hence
        ``Any``), its help unwrapped and polished (``helptext``).

        Raises:
            ImportError, AttributeError: the table names a module or attribute that does not exist (a bug).
        ``plain`` is ``helptext.polish``'s (None: by the terminal's width).
        """
        module_name, _, attribute = self.target.partition(":")
        module = importlib.import_module(module_name)
        if stdio.interrupts.interrupted:
            # A Ctrl-C that landed in a callback during the import was printed as "Exception ignored" and
            # dropped by Python; the command must not run as if it had not come (a break-it trial).
            raise KeyboardInterrupt
        defined: Any = getattr(module, attribute)
        if isinstance(defined, typer.Typer):  # a group, even of one command (`demo payments`)
            unwrap_help(defined)
            command: Any = typer.main.get_group(defined)
        else:
            sub = typer.Typer(add_completion=False)
            sub.command(name=name, help=getattr(module, self.help_attr) if self.help_attr else None)(defined)
            unwrap_help(sub)
            command = typer.main.get_command(sub)
        command.name = name
        if not command.short_help and command.help:
            command.short_help = first_sentence(command.help)
        return polish(command, plain=plain)


class LazyGroup(SuggestingGroup):
    """A typer group whose sub-commands in ``lazy`` are imported on first use (``LazyCommand``); an unknown
    command's near miss is looked for among them all (``SuggestingGroup``).

    Subclasses set ``lazy``, in the order the root's help lists them.
    """

    lazy: ClassVar[dict[str, LazyCommand]] = {}
    #: The help layout of the commands it loads (``helptext.polish``'s ``plain``; None: by the terminal's width).
    plain_help: bool | None = None

    def list_commands(self, ctx: Any) -> list[str]:
        eager = super().list_commands(ctx)
        return [*eager, *(name for name in self.lazy if name not in eager)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.lazy[cmd_name].load(cmd_name, plain=self.plain_help)
            self.commands[cmd_name] = command
        return command

    def load_all(self) -> None:
        """Import every sub-command now (tests that walk the whole tree; the root's help does it anyway)."""
        context = typer.Context(self)
        for name in self.list_commands(context):
            self.get_command(context, name)
