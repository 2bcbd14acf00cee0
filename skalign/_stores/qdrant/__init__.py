"""Qdrant: the reader and writer (store), the live store, names and their checks, the publish
recovery, bulk loading, and a second named vector (``--into FIELD``, :mod:`.fields`);
:class:`QdrantEngine` is what the shared code asks of it.
"""

from __future__ import annotations

from ..databases.engine import DatabaseEngine

__all__ = ["QdrantEngine"]


class QdrantEngine(DatabaseEngine):
    """Qdrant's engine. Its local mode passes every row through Python as lists of floats (an
    upsert copies the lists twice): its default batch is smaller than other databases'."""

    most_batch_rows = 1024

    def modules(self):
        from . import recovery, store

        return store, recovery

    # a second named vector (--into FIELD): .fields
    fields_module = "skalign._stores.qdrant.fields"
