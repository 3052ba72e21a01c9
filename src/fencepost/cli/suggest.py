"""The near miss named after an unknown command: ``No such command 'pay'. Did you mean 'payments'?``.

typer suggests only what ``difflib`` finds close, from the commands a group has built so far: a prefix
(``demo pay``), another case (``HOST``) or a command not yet imported (the root's, ``cli.lazy``) got no
suggestion, and ``package instal`` got ``'install', 'disable'``.
"""

from __future__ import annotations

import difflib
from typing import Any

from typer.core import TyperGroup


def near_misses(typo: str, names: list[str]) -> list[str]:
    """The names ``typo`` most likely meant, best first: the same name in another case; else the names it is
    the start of; else ``difflib``'s close matches. Empty when none is close."""
    folded = typo.casefold()
    same = [name for name in names if name.casefold() == folded]
    if same:
        return same
    started = [name for name in names if name.casefold().startswith(folded)] if len(folded) >= 2 else []
    return started or difflib.get_close_matches(typo, names)


class SuggestingGroup(TyperGroup):
    """A typer group whose unknown-command error names ``near_misses`` among all its commands
    (``list_commands``). ``helptext.polish`` gives every group of the command line this class."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except Exception as error:
            message = getattr(error, "message", None)
            if isinstance(message, str) and message.startswith("No such command") and args:
                base = message.split(". Did you mean", 1)[0].rstrip(".")
                matches = near_misses(args[0], self.list_commands(ctx))
                error.message = (f"{base}. Did you mean {', '.join(map(repr, matches))}?" if matches  # type: ignore[attr-defined]
                                 else f"{base}.")
            raise
