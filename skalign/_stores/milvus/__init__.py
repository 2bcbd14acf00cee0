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
    into_refusal = (
        "Milvus Lite cannot add a field to a collection (milvus-lite 3.2 answers 'not "
        "implemented' to pymilvus's add_collection_field); Milvus servers add a nullable vector "
        "field from 3.0 on (2.6 adds scalar fields only), which skalign does not do yet. "
        "Migrate into a second collection instead (skalign migrate STORE OUTPUT, without "
        "--into).")

    def modules(self):
        from . import recovery, store

        return store, recovery
