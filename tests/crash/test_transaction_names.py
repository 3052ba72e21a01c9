"""The static finder of named transactions (``transaction_names``) that the crash-window meta-test relies on:
it resolves literals, constants (local, imported, class attributes), f-strings and concatenations, skips the
wrappers that forward their own ``name``, and fails loudly on anything it cannot resolve."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
from transaction_names import UnresolvedName, transaction_names


def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    for name, text in files.items():
        (package / name).write_text(dedent(text), encoding="utf-8")
    return package


NAMES = """
    AREA = "box"
    DELIVER: str = "box.deliver"


    class Tx:
        CLAIM = f"{AREA}.claim"
"""

USES = """
    from pkg.names import DELIVER, Tx
    from . import names
    import pkg.names as nm

    LOCAL = "box"


    class Store:
        def transaction(self, *, write=True, name=None):
            return self.inner.transaction(write=write, name=name)   # a wrapper forwarding its name

        def transact(self, fn, *, name=None):
            with self.transaction(name=name) as tx:                 # likewise
                return fn(tx)


    def run(store, ctx, fn):
        store.transact(fn, name="box.literal")
        ctx.fenced(fn, name=DELIVER)
        store.transact(fn, name=Tx.CLAIM)
        store.transaction(name=f"{names.AREA}.start")
        store.transact(fn, name=LOCAL + ".plus")
        store.transact(fn, name=nm.DELIVER)
        store.transact(fn)                  # unnamed: no crash points
        store.transact(fn, name=None)
        store.read(fn)
"""


def test_resolves_literals_constants_fstrings_and_skips_forwarding_wrappers(tmp_path: Path) -> None:
    package = _package(tmp_path, {"names.py": NAMES, "uses.py": USES})
    found = transaction_names(package)
    assert {name: len(sites) for name, sites in found.items()} == {
        "box.literal": 1, "box.deliver": 2, "box.claim": 1, "box.start": 1, "box.plus": 1}
    assert found["box.literal"] == ["pkg/uses.py:19"]


@pytest.mark.parametrize("body", [
    pytest.param("store.transact(fn, name=make_name())", id="a call"),
    pytest.param("store.transact(fn, name=fn.__name__)", id="an attribute of a value"),
    pytest.param("store.transact(fn, name=f'{fn!r}.x')", id="a converted f-string part"),
    pytest.param("store.transact(fn, name=UNKNOWN)", id="an undefined constant"),
    pytest.param("store.transact(fn, name=f'box.{NUMBER}')", id="a constant that is not a string"),
    pytest.param("store.transact(fn, **options)", id="keyword arguments that may carry a name"),
    pytest.param("ctx.fenced(fn, name=name)", id="a variable outside a forwarding wrapper"),
])
def test_a_name_that_cannot_be_resolved_statically_fails_loudly(tmp_path: Path, body: str) -> None:
    source = f"""
        NUMBER = 3


        def helper(store, ctx, fn, name, options):
            {body}
    """
    package = _package(tmp_path, {"dynamic.py": source})
    with pytest.raises(UnresolvedName, match=r"pkg/dynamic\.py:6"):
        transaction_names(package)
