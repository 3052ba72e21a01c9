"""The money parameter models in the host documentation are strict (docs/host.md, "Defining an action"): a
copied example must not accept ``"amount_cents": "6"`` or ``true`` as an amount. The full HTTP example in
docs/host-adapters.md was not, and an API built from it accepted ``"6"`` (a trial)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

DOCS = Path(__file__).resolve().parents[2] / "docs"
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
_MODEL = re.compile(r"^class (\w+)\(BaseModel\):\n(?:(?:[ \t]+.*)?\n)*", re.M)


def money_models() -> list[tuple[str, str, str]]:
    """``(document, model name, source)`` of every pydantic model in a Python block of the host documents that
    has an ``amount_cents`` field; the source is the block's pydantic import line and the class."""
    found = []
    for name in ("host.md", "host-adapters.md"):
        for block in _BLOCK.findall((DOCS / name).read_text(encoding="utf-8")):
            imports = "\n".join(line for line in block.splitlines() if line.startswith("from pydantic import"))
            for model in _MODEL.finditer(block):
                if "amount_cents" in model.group(0):
                    found.append((name, model.group(1), f"{imports}\n{model.group(0)}"))
    return found


def test_the_host_documents_have_money_models_to_check() -> None:
    assert {(doc, model) for doc, model, _ in money_models()} >= {("host.md", "ChargeParams"),
                                                                  ("host-adapters.md", "ChargeParams")}


@pytest.mark.parametrize(("document", "model", "source"),
                         [pytest.param(*found, id=f"{found[0]}-{found[1]}") for found in money_models()])
def test_a_documented_money_model_refuses_an_amount_that_is_not_a_json_integer(document: str, model: str,
                                                                             source: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # the project's own documentation, nothing else
    params: type[BaseModel] = namespace[model]
    fields = {name: "x" for name, info in params.model_fields.items() if info.annotation is str}
    assert params.model_validate({**fields, "amount_cents": 6}).amount_cents == 6
    for amount in ("6", True, 6.0):
        with pytest.raises(ValidationError):
            params.model_validate({**fields, "amount_cents": amount})
