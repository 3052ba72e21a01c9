"""Private result fields: marked in the result schema, never stored (host-spec A16; ADR 0070).

A result model marks a field private with ``Field(json_schema_extra={"private": True})``. Such a field may be
set by the handler or by a completion's result, but it is stripped before the result is validated and stored
(the seed's order: merged, stripped of private fields, validated, written), and again after the validated
model is dumped (a default would put it back). So it never reaches the invocation row, the parked result, a
completion's record, an adapter row's output, an event or the API.

A private field must have a default: it is always absent when the model is validated.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fencepost.core.errors import InvalidInput


def is_private(info: FieldInfo) -> bool:
    """Whether a model field is marked ``json_schema_extra={"private": True}`` (a callable extra is not)."""
    extra = info.json_schema_extra
    return isinstance(extra, Mapping) and extra.get("private") is True


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic model classes an annotation holds (``M``, ``M | None``, ``list[M]``, ``dict[str, M]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found += _models_in(arg)
    return found


def _container(annotation: Any) -> Any:
    """``list``/``dict``/None: how the nested model values sit under a field (unions unwrapped)."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            shape = _container(arg)
            if shape is not None:
                return shape
        return None
    if origin in (list, tuple, set, frozenset):
        return list
    if origin is dict:
        return dict
    return None


def check_private_fields(model: type[BaseModel], *, owner: str,
                         _seen: frozenset[type[BaseModel]] = frozenset()) -> None:
    """Refuse a result schema whose private field (at any depth) is required.

    Raises:
        InvalidInput: ``owner`` names the action in the message.
    """
    seen = _seen | {model}
    for name, info in model.model_fields.items():
        if is_private(info) and info.is_required():
            raise InvalidInput(f"{owner}: private result field {model.__name__}.{name} must have a default")
        for nested in _models_in(info.annotation):
            if nested not in seen:
                check_private_fields(nested, owner=owner, _seen=seen)


def strip_private(model: type[BaseModel] | None, data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``data`` without the fields ``model`` marks private, at every depth where a nested model sits (a field
    of type ``M``, ``M | None``, ``list[M]`` or ``dict[str, M]``). Keys the model does not name are kept.

    Args:
        model: the action's result schema (None: nothing is private; ``data`` is returned as a dict).
        data: a result as JSON (None stays None).
    Returns:
        A new dict; ``data`` is not changed.
    """
    if data is None:
        return None
    if model is None:
        return dict(data)
    return _strip(model, data)


def _strip(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    fields = model.model_fields
    by_alias = {info.alias: name for name, info in fields.items() if info.alias}
    for key, value in data.items():
        name = key if key in fields else by_alias.get(key)
        info = fields.get(name) if name is not None else None
        if info is None:
            kept[key] = value
            continue
        if is_private(info):
            continue
        kept[key] = _nested(info.annotation, value)
    return kept


def _nested(annotation: Any, value: Any) -> Any:
    models = _models_in(annotation)
    if len(models) != 1:
        return value
    nested = models[0]
    shape = _container(annotation)
    if shape is list and isinstance(value, list):
        return [_strip(nested, item) if isinstance(item, Mapping) else item for item in value]
    if shape is dict and isinstance(value, Mapping):
        return {k: _strip(nested, v) if isinstance(v, Mapping) else v for k, v in value.items()}
    if shape is None and isinstance(value, Mapping):
        return _strip(nested, value)
    return value
