"""The only layer that knows SQL. ``open_store(url)`` returns a ``Store`` for the URL's backend."""

from fencepost.store.base import Store, Transaction
from fencepost.store.open import open_store

__all__ = ["Store", "Transaction", "open_store"]
