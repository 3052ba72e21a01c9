"""The only layer that knows SQL. ``open_store(url)`` returns a ``Store`` for the URL's backend.

``ports`` lists what a store provides; ``sql`` implements it once for every SQL dialect; ``sqlite`` and
``postgres`` are the backends.
"""

from fencepost.store.base import Store
from fencepost.store.open import open_store
from fencepost.store.ports import FencedUnit, UnitOfWork

__all__ = ["FencedUnit", "Store", "UnitOfWork", "open_store"]
