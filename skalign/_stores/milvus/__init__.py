"""Milvus (a server, or Milvus Lite): the reader and writer (store), the live store, names and
their checks, and the publish recovery; :class:`MilvusEngine` is what the shared code asks of
it.
"""

from __future__ import annotations

from ..databases.engine import DatabaseEngine

__all__ = ["MilvusEngine"]


class MilvusEngine(DatabaseEngine):
    """Milvus's engine: entities pass through pymilvus as Python rows (dicts of lists of
    floats), so its default batch is the smaller one of Chroma and Qdrant."""

    most_batch_rows = 1024

    def modules(self):
        from . import recovery, store

        return store, recovery
