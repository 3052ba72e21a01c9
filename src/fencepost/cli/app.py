"""``fencepost``: the command line entry point.

Exit codes: 0 success; 1 release gate blocked (or Attempt did not finish); 2 bad input or unknown id;
3 conflicting state (e.g. reconcile of an active lease); 4 schema not migrated; 5 store unavailable or a record
fails verification; 6 a start guard is false; 130 interrupted; 141 stdout's reader went away (``cli.stdio``).
Errors map to codes in ``fencepost.cli.exit_codes``.

Each command's module is imported only when that command runs or shows its help (``cli.lazy``, ADR 0106).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, ClassVar

import typer

from fencepost import __version__
from fencepost.cli import helptext, stdio
from fencepost.cli.lazy import LazyCommand, LazyGroup


class Commands(LazyGroup):
    """The root's commands in the order its help lists them: the first steps, the long-running processes,
    the checks, then the groups."""

    lazy: ClassVar[dict[str, LazyCommand]] = {
        "migrate": LazyCommand("fencepost.cli.migrate_cmd:migrate"),
        "rehearse": LazyCommand("fencepost.cli.rehearse_cmd:rehearse"),
        "worker": LazyCommand("fencepost.cli.worker_cmd:worker"),
        "serve": LazyCommand("fencepost.cli.serve:serve"),
        "relay": LazyCommand("fencepost.cli.events_cmds:relay", help_attr="RELAY_HELP"),
        "workers": LazyCommand("fencepost.cli.workers_cmd:workers", help_attr="HELP"),
        "audit": LazyCommand("fencepost.cli.audit_cmd:audit"),
        "backup": LazyCommand("fencepost.cli.backup_cmd:backup"),
        "rehearsal": LazyCommand("fencepost.cli.rehearsal_cmds:app"),
        "package": LazyCommand("fencepost.cli.package_cmds:app"),
        "target": LazyCommand("fencepost.cli.target_cmds:app"),
        "workflow": LazyCommand("fencepost.cli.workflow_cmds:app"),
        "host": LazyCommand("fencepost.cli.host_cmds:app"),
        "events": LazyCommand("fencepost.cli.events_cmds:app"),
        "demo": LazyCommand("fencepost.cli.demo_cmd:app"),
        "check-store": LazyCommand("fencepost.cli.check_store_cmd:app"),
        "seal-keys": LazyCommand("fencepost.cli.seal_keys_cmd:app"),
    }


app = typer.Typer(
    cls=Commands,
    help="fencepost runs side-effecting work under fenced leases and proves what happened.\n\n"
         "Start with `fencepost migrate`, then `fencepost rehearse examples/inventory`.",
    no_args_is_help=True, add_completion=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fencepost {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False) -> None:
    """fencepost: durable, fenced execution of side-effecting work."""


def command_tree(*, plain: bool | None = None) -> Any:
    """The root click command with every sub-command imported (a fresh tree each call): for walking the whole
    command line, as the help tests do; running a command needs only ``typer.main.get_command(app)``.

    Args:
        plain: the help layout (``helptext.polish``); None: by the terminal's width.
    """
    root = typer.main.get_command(app)
    root.plain_help = plain  # type: ignore[attr-defined]
    root.load_all()  # type: ignore[attr-defined]
    return helptext.polish(root, plain=plain)


#: Click's error classes, found through typer's public ``BadParameter`` (typer may bundle its own Click).
_USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _named_command(root: Any, args: list[str]) -> str:
    """``fencepost`` and the sub-commands ``args`` name before their first option (``fencepost host list``): the
    command a usage error without its own context is about (click's parser raises "does not take a value" so)."""
    path, command = ["fencepost"], root
    for arg in args:
        commands = getattr(command, "commands", None)
        if arg.startswith("-") or commands is None:
            break
        command = command.get_command(typer.Context(command), arg)
        if command is None:
            break
        path.append(arg)
    return " ".join(path)


def main(prog_name: str | None = None) -> None:
    """The ``fencepost`` command. Arguments that are not valid UTF-8 (the shell passed raw bytes) and an
    interrupt before a command took its own signal handlers are one-line answers, never tracebacks. Its help
    is ``helptext.polish``-ed (``prog_name``: the name it shows, default from ``sys.argv``)."""
    for position, argument in enumerate(sys.argv[1:], start=1):
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            sys.stderr.write(f"fencepost: argument {position} is not valid UTF-8\n")
            raise SystemExit(2) from None
    watch = stdio.interrupts
    watch.install()
    guarded = stdio.GuardedStdout(sys.stdout)
    sys.stdout = guarded
    root = helptext.polish(typer.main.get_command(app))
    try:
        code = root(prog_name=prog_name, standalone_mode=False)
    except stdio.StdoutClosed:
        # Silent, as any Unix filter is when its reader leaves (`fencepost events list | head -1`): the reader
        # got what it wanted, and a line on stderr there is noise (a new-user trial). The exit code says it.
        stdio.silence_stdout()
        raise SystemExit(stdio.STDOUT_CLOSED_EXIT) from None
    except stdio.StdoutFailed as error:
        stdio.silence_stdout()
        stdio.say(f"fencepost: cannot write to standard output: {error}; stopped")
        raise SystemExit(stdio.STDOUT_FAILED_EXIT) from None
    except _CLICK_ERROR as error:
        # A usage error (a bad option value, a missing option or argument) is one line naming the command, as
        # every other refusal is, instead of Click's usage block and a framed box (a new user's trial).
        if type(error).__name__ == "NoArgsIsHelpError":
            # A group run without a command shows its help on stdout, in either layout (ADR 0107); in the plain
            # one click carries that help as the error's message, which the line below would squash into one.
            sys.stdout.write(error.format_message().rstrip("\n") + "\n")  # type: ignore[attr-defined]
            raise SystemExit(error.exit_code) from None  # type: ignore[attr-defined]
        context = getattr(error, "ctx", None)
        usage = isinstance(error, _USAGE_ERROR)
        command = (context.command_path if context is not None else _named_command(root, sys.argv[1:])) if usage \
            else "fencepost"
        hint = f" (see `{command} --help`)" if usage else ""
        message = " ".join(error.format_message().split())  # type: ignore[attr-defined]
        if message:  # none after a group's help shown for want of a command (``no_args_is_help``)
            sys.stderr.write(f"{command}: {message}{hint}\n")
        raise SystemExit(error.exit_code) from None  # type: ignore[attr-defined]
    except typer.Abort:
        sys.stderr.write("fencepost: interrupted\n")
        raise SystemExit(130) from None
    except KeyboardInterrupt:
        sys.stderr.write("fencepost: interrupted\n")
        raise SystemExit(130) from None
    except Exception as error:
        # A Ctrl-C inside an import can surface wrapped: Python 3.11 raises RuntimeError("Error calling
        # __set_name__ ...") from the KeyboardInterrupt when it lands in a class body being built (a break-it
        # trial: exit 1 with a traceback, which for rehearse means "gate blocked").
        if not stdio.caused_by_interrupt(error):
            raise
        sys.stderr.write("fencepost: interrupted\n")
        raise SystemExit(130) from None
    finally:
        sys.stdout = guarded.stream
        stdio.ignore_interrupts()  # the outcome is decided: a Ctrl-C now must not turn it into death by SIGINT
    if guarded.closed_by_reader:  # only another thread wrote after the reader left
        stdio.silence_stdout()
        raise SystemExit(stdio.STDOUT_CLOSED_EXIT)
    if code == 130 and watch.interrupted and not watch.explained:  # Typer answered it with a silent 130
        stdio.say("fencepost: interrupted")
    raise SystemExit(code if isinstance(code, int) else 0)
