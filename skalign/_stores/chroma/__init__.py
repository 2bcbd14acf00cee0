"""Chroma: the reader and writer (store), the live store, names and their checks, the publish
recovery, and the HNSW files Chroma keeps on disk; :class:`ChromaEngine` is what the shared
code asks of it.
"""

from __future__ import annotations

from ..databases.engine import DatabaseEngine

__all__ = ["ChromaEngine"]


class ChromaEngine(DatabaseEngine):
    """Chroma's engine. A read of Chroma builds the whole page at once, every row through Python
    as lists of floats: its default batch is smaller than other databases'."""

    most_batch_rows = 1024
    into_refusal = ("a Chroma collection holds one embedding per record, so a second vector "
                    "field cannot sit beside the first; migrate into a second collection "
                    "instead (skalign migrate STORE OUTPUT, without --into).")

    def modules(self):
        from . import recovery, store

        return store, recovery
