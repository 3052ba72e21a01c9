"""Every named transaction of ``src/fencepost``, found statically (no import, no execution).

A named transaction is the ``name=`` keyword given to ``store.transact(...)``, ``store.transaction(...)`` or
``CommandContext.fenced(...)``; each name gets the crash points ``<name>:before-commit`` and
``<name>:after-commit`` (``fencepost.core.crashpoints``). ``transaction_names`` reads every module's syntax
tree and resolves each such ``name=`` to its string: a literal, a module constant (also imported from another
fencepost module, or a class attribute such as a StrEnum member), an f-string or ``+`` of those. Anything else
(a call, a variable computed at run time, ``**kwargs`` that may carry a name) raises ``UnresolvedName``, so
a transaction can never slip past the crash-window meta-test by being named dynamically.

The only ``name=<variable>`` accepted is the wrappers forwarding their own ``name`` parameter (``transact``
calling ``transaction``, ``fenced`` calling ``transact``): those define no transaction of their own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TRANSACTION_CALLS = frozenset({"transact", "transaction", "fenced"})


class UnresolvedName(AssertionError):
    """A transaction name that cannot be resolved statically (``path:line`` and the expression)."""


class _Unresolvable(Exception):
    """Inside ``_resolve``: the sub-expression that is not a static string."""


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    assigned: dict[str, ast.expr]              # module-level NAME = <expr>
    classes: dict[str, dict[str, ast.expr]]    # class NAME: its ATTR = <expr>
    imported: dict[str, tuple[str, str | None]]  # local name -> (module, attribute or None for the module)


def transaction_names(root: Path) -> dict[str, list[str]]:
    """Named transactions under ``root`` (the ``fencepost`` package directory).

    Returns:
        ``{transaction name: ["relative/path.py:line", ...]}`` for every call site.
    Raises:
        UnresolvedName: a ``name=`` of a transact/transaction/fenced call that is not a static string.
        SyntaxError: a module does not parse.
    """
    modules = _load(root)
    found: dict[str, list[str]] = {}
    for module in modules.values():
        for call, function in _calls(module.tree):
            where = f"{module.path.relative_to(root.parent)}:{call.lineno}"
            if any(k.arg is None for k in call.keywords):
                raise UnresolvedName(f"{where}: **kwargs passed to {_callee(call)}() may carry a transaction name")
            for keyword in call.keywords:
                if keyword.arg != "name":
                    continue
                value = keyword.value
                if isinstance(value, ast.Constant) and value.value is None:
                    continue  # an unnamed transaction: no crash points
                if _forwards_own_name(value, function):
                    continue
                try:
                    name = _resolve(value, module, modules, set())
                except _Unresolvable as part:
                    raise UnresolvedName(
                        f"{where}: transaction name {ast.unparse(value)!r} cannot be resolved statically "
                        f"({part} in {module.name}); use a string literal or a module constant") from None
                found.setdefault(name, []).append(where)
    return found


def _load(root: Path) -> dict[str, _Module]:
    modules: dict[str, _Module] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = name if is_package else name.rpartition(".")[0]
        modules[name] = _Module(name, path, tree, *_definitions(tree, package))
    return modules


def _definitions(tree: ast.Module, package: str) -> tuple[dict[str, ast.expr], dict[str, dict[str, ast.expr]],
                                                          dict[str, tuple[str, str | None]]]:
    assigned: dict[str, ast.expr] = {}
    classes: dict[str, dict[str, ast.expr]] = {}
    imported: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            assigned[node.target.id] = node.value
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = {t.id: n.value for n in node.body if isinstance(n, ast.Assign)
                                  for t in n.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                imported[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imported[alias.asname] = (alias.name, None)
    return assigned, classes, imported


def _calls(tree: ast.Module) -> Iterator[tuple[ast.Call, ast.FunctionDef | ast.AsyncFunctionDef | None]]:
    """Every transact/transaction/fenced call with its innermost enclosing function."""
    def walk(node: ast.AST, function: ast.FunctionDef | ast.AsyncFunctionDef | None
             ) -> Iterator[tuple[ast.Call, ast.FunctionDef | ast.AsyncFunctionDef | None]]:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and _callee(child) in TRANSACTION_CALLS:
                yield child, function
            yield from walk(child, inner)

    yield from walk(tree, None)


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def _forwards_own_name(value: ast.expr, function: ast.FunctionDef | ast.AsyncFunctionDef | None) -> bool:
    """``name=name`` inside ``def transact/transaction/fenced(..., name, ...)``: a wrapper passing its name on."""
    if not isinstance(value, ast.Name) or value.id != "name" or function is None:
        return False
    if function.name not in TRANSACTION_CALLS:
        return False
    arguments = function.args
    return any(a.arg == "name" for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs])


def _resolve(value: ast.expr, module: _Module, modules: dict[str, _Module], seen: set[str]) -> str:
    """The string ``value`` always evaluates to in ``module``; ``seen`` guards against cyclic constants."""
    def fail() -> _Unresolvable:
        return _Unresolvable(repr(ast.unparse(value)))

    if isinstance(value, ast.Constant):
        if isinstance(value.value, str):
            return value.value
        raise fail()
    if isinstance(value, ast.JoinedStr):
        parts = []
        for part in value.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                parts.append(part.value)
            elif isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
                parts.append(_resolve(part.value, module, modules, seen))
            else:
                raise fail()
        return "".join(parts)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        return (_resolve(value.left, module, modules, seen)
                + _resolve(value.right, module, modules, seen))
    if isinstance(value, ast.Name):
        key = f"{module.name}.{value.id}"
        if key in seen:
            raise fail()
        if value.id in module.assigned:
            return _resolve(module.assigned[value.id], module, modules, seen | {key})
        if value.id in module.imported:
            source, attribute = module.imported[value.id]
            target = modules.get(source)
            if target is not None and attribute is not None:
                return _resolve(ast.Name(attribute), target, modules, seen | {key})
        raise fail()
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        owner = value.value.id
        if owner in module.classes and value.attr in module.classes[owner]:
            return _resolve(module.classes[owner][value.attr], module, modules, seen)
        if owner in module.imported:
            source, attribute = module.imported[owner]
            if attribute is None and source in modules:      # import fencepost.x as m; m.CONST
                return _resolve(ast.Name(value.attr), modules[source], modules, seen)
            target = modules.get(source)
            if target is not None and attribute in target.classes and value.attr in target.classes[attribute]:
                return _resolve(target.classes[attribute][value.attr], target, modules, seen)
            if f"{source}.{attribute}" in modules:          # from fencepost import x; x.CONST
                return _resolve(ast.Name(value.attr), modules[f"{source}.{attribute}"], modules, seen)
        raise fail()
    raise fail()
