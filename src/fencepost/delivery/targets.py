"""Delivery targets over one control store: add, list (by label), show, remove (ADR 0055)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from fencepost.core.errors import Conflict, InvalidInput, NotFound
from fencepost.core.ids import new_id
from fencepost.delivery.urls import target_path
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.ports import UnitOfWork

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """``["env=prod", "region=eu"]`` as ``{"env": "prod", "region": "eu"}``.

    Raises:
        InvalidInput: an item without ``=``, a key or value outside ``[A-Za-z0-9._/-]`` (1..63 chars), a key twice.
    """
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _LABEL.match(key) or not _LABEL.match(value):
            raise InvalidInput(f"a label is key=value, each 1 to 63 characters of letters, digits, '.', '_', '/' "
                               f"and '-': {item!r}")
        if key in labels:
            raise InvalidInput(f"label {key} is given twice")
        labels[key] = value
    return labels


def target_json(target: TargetRecord) -> dict[str, Any]:
    """The JSON view of a target (CLI ``--json`` and the API)."""
    return {"id": target.id, "name": target.name, "url": target.url, "labels": dict(target.labels),
            "added_at": target.added_at.isoformat() if target.added_at else None,
            "removed_at": target.removed_at.isoformat() if target.removed_at else None}


def matches(target: TargetRecord, selector: Mapping[str, str]) -> bool:
    """Whether ``target`` carries every label of ``selector``."""
    return all(target.labels.get(k) == v for k, v in selector.items())


class TargetService:
    """The targets of one control store.

    Args:
        store: a migrated control store.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, name: str, url: str, labels: Mapping[str, str] | None = None) -> TargetRecord:
        """Add a live target.

        Args:
            name: ``[a-z0-9][a-z0-9._-]*``, at most 100 characters. url: ``sqlite:///abs/path.db``.
        Raises:
            InvalidInput: a bad name, an unsupported scheme (named) or a malformed URL, bad labels.
            Conflict: a live target has the name (with another URL or labels; the same ones return it).
        """
        if not _NAME.match(name):
            raise InvalidInput(f"target name {name!r} must be 1 to 100 characters of a-z, 0-9, '.', '_' and '-'")
        target_path(url)
        wanted = dict(labels or {})
        target_id = new_id("tgt")

        def unit(tx: UnitOfWork) -> TargetRecord:
            added = tx.delivery.insert_target(target_id=target_id, name=name, url=url, labels=wanted)
            if added is not None:
                return added
            existing = tx.delivery.get_live_target(name)
            if existing is None:  # pragma: no cover - removed between the insert and this read
                raise Conflict(f"target {name} is being written concurrently; add it again")
            if existing.url != url or existing.labels != wanted:
                raise Conflict(f"target {name} exists with URL {existing.url} and labels {existing.labels}; "
                               "remove it first to change it")
            return existing

        return self.store.transact(unit, name="target.add")

    def get(self, name: str) -> TargetRecord:
        """The live target ``name``. Raises ``NotFound``."""
        found = self.store.read(lambda tx: tx.delivery.get_live_target(name))
        if found is None:
            raise NotFound(f"no target {name}")
        return found

    def list(self, selector: Mapping[str, str] | None = None, *, include_removed: bool = False
             ) -> list[TargetRecord]:
        """Live targets by name, those carrying every label of ``selector`` when given; with ``include_removed``
        the removed ones too (a name reused after a removal is listed twice: the live one first)."""
        targets = self.store.read(lambda tx: tx.delivery.list_targets() if include_removed
                                  else tx.delivery.list_live_targets())
        return [t for t in targets if matches(t, selector or {})]

    def remove(self, name: str) -> TargetRecord:
        """Remove the live target ``name`` (its row stays, so past deliveries still name it). Raises ``NotFound``."""

        def unit(tx: UnitOfWork) -> TargetRecord:
            removed = tx.delivery.remove_target(name)
            if removed is None:
                raise NotFound(f"no target {name}")
            return removed

        return self.store.transact(unit, name="target.remove")
