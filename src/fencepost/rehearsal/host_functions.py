"""Host SQL functions a package's scripts may call in the sandbox (issue 11 item 2, ADR 0063).

A manifest maps each SQL function it needs to an implementation name (``[sqlite] functions = { NFC =
"unicode_nfc" }``). Two implementations are built in (``base64_encode``, ``base64_decode``). Any other is
supplied by the operator as a Python entry point in the group ``fencepost.sql_functions`` whose name is the
implementation name, in a distribution installed beside fencepost. Entry points are loaded only when the
operator configures them, by listing their names in ``FENCEPOST_HOST_FUNCTIONS`` (comma-separated, or ``*``
for every entry point of the group): never code shipped inside a package, never a module nobody named.

The object an entry point loads is a callable; its SQL arity is its ``nargs`` attribute when it has one,
else its number of positional parameters (-1 for ``*args``), and it is registered as deterministic unless
its ``deterministic`` attribute is False.
"""

from __future__ import annotations

import base64
import binascii
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from fencepost.core.errors import InvalidInput

ENTRY_POINT_GROUP = "fencepost.sql_functions"
ENV_VAR = "FENCEPOST_HOST_FUNCTIONS"


@dataclass(frozen=True)
class HostFunction:
    """One implementation of a host SQL function.

    Attributes:
        name: the implementation name a manifest uses.
        func: the Python callable SQLite calls.
        nargs: its SQL arity (-1: any).
        deterministic: registered as deterministic.
        module: the module it comes from; distribution, version: the installed distribution providing it.
    """

    name: str
    func: Callable[..., Any]
    nargs: int
    deterministic: bool
    module: str
    distribution: str
    version: str

    def source(self) -> dict[str, Any]:
        """What the evidence records of the implementation that ran."""
        return {"implementation": self.name, "module": self.module, "distribution": self.distribution,
                "version": self.version}


def _b64encode(value: Any) -> str | None:
    if value is None:
        return None
    data = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return base64.b64encode(data).decode("ascii")


def _b64decode(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value if isinstance(value, bytes) else str(value), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"base64_decode: {error}") from None


def _own_version() -> str:
    try:
        return metadata.version("fencepost")
    except metadata.PackageNotFoundError:
        return "unknown"


BUILTINS: dict[str, HostFunction] = {
    name: HostFunction(name, func, 1, True, __name__, "fencepost", _own_version())
    for name, func in (("base64_encode", _b64encode), ("base64_decode", _b64decode))}


def configured_names(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The entry point names the operator configured (``["*"]`` for all), or None when none are."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    if not raw:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def _arity(func: Callable[..., Any]) -> int:
    declared = getattr(func, "nargs", None)
    if isinstance(declared, int):
        return declared
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return -1
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return -1
    return sum(1 for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                               inspect.Parameter.POSITIONAL_OR_KEYWORD))


def _load(entry: metadata.EntryPoint) -> HostFunction:
    try:
        func = entry.load()
    except Exception as error:  # an operator's module that fails to import: say which, not a traceback
        raise InvalidInput(f"host function {entry.name!r}: entry point {entry.value} failed to load: "
                           f"{type(error).__name__}: {error}") from None
    if not callable(func):
        raise InvalidInput(f"host function {entry.name!r}: entry point {entry.value} is not callable")
    dist = entry.dist
    return HostFunction(entry.name, func, _arity(func), getattr(func, "deterministic", True) is not False,
                        entry.module, dist.name if dist is not None else "unknown",
                        dist.version if dist is not None else "unknown")


def _same(fn: HostFunction) -> HostFunction:
    return fn


def available(environ: Mapping[str, str] | None = None) -> dict[str, Callable[[], HostFunction]]:
    """The implementations this process may use: the built-ins, plus the configured entry points.

    Returns:
        Implementation name -> a loader (an entry point is imported only when a package needs it).
    """
    found: dict[str, Callable[[], HostFunction]] = {name: functools.partial(_same, fn) for name, fn in BUILTINS.items()}
    names = configured_names(environ)
    if names is None:
        return found
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if (entry.name in names or "*" in names) and entry.name not in BUILTINS:
            found[entry.name] = functools.partial(_load, entry)
    return found


def resolve(functions: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, HostFunction]:
    """The implementation of each SQL function a package needs.

    Args:
        functions: SQL name -> implementation name (the manifest's ``[sqlite] functions``).
        environ: where ``FENCEPOST_HOST_FUNCTIONS`` is read (this process's environment by default).
    Returns:
        SQL name -> ``HostFunction``.
    Raises:
        InvalidInput: naming the first SQL function whose implementation is not available here (neither
            built in nor a configured entry point), or whose entry point does not load.
    """
    loaders = available(environ)
    resolved: dict[str, HostFunction] = {}
    for sql_name, implementation in sorted(functions.items()):
        loader = loaders.get(implementation)
        if loader is None:
            configured = configured_names(environ)
            where = (f"{ENV_VAR} is not set, so no entry point of {ENTRY_POINT_GROUP} is loaded"
                     if configured is None else
                     f"no configured entry point of {ENTRY_POINT_GROUP} is named {implementation!r}")
            raise InvalidInput(f"SQL function {sql_name} needs host function {implementation!r}, which is not "
                               f"available: not built in ({', '.join(BUILTINS)}), and {where}")
        resolved[sql_name] = loader()
    return resolved
