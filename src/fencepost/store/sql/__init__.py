"""The SQL implementation of the store ports, written once for every SQL dialect.

A SQL backend supplies an ``Executor`` (``executor.py``: run one named query, read the clock) and the
statements its dialect really writes differently (``<backend>/dialect.sql``); everything else is shared:
the queries of each concern (``*.sql`` here) and the operations over them (``outbox.py``, ``rehearsal.py``,
``catalog.py``, ``admission.py``, ``audit.py``), composed into a unit of work by ``unit.py``.
"""
