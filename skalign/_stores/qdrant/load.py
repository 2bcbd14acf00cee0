"""Opening a Qdrant local-mode folder in less memory: qdrant-client's loader, with each point's
vectors kept as float32 rows as they are read instead of as lists of Python floats.

``QdrantClient(path=DIR)`` loads every collection of the folder in its constructor
(``LocalCollection.load_vectors``): it unpickles each stored point and appends its vectors, as
lists of Python floats (32 bytes a value), to one list per vector name, then makes them one
float64 array (``np.array`` of the lists). A 50,000-point 384-d source peaked near 1.4 GB in
the open alone, and a killed translation's shadow of 768-d points, loaded by the rerun, adds
twice that per point (``5ae3bf6:benchmarks/qdrant_local_memory.py``, steps ``open`` and
``rerun_*``).

:func:`load_vectors` is the same loader with one change: a point's dense vectors (and
multivectors) become float32 rows as the point is read, so what is held for a collection is
its float32 array, not its values as Python objects; the array is float32, as a collection
created in the process holds it. Ids, positions, payloads, sparse vectors, their IDF counts
and the deletion marks are made exactly as qdrant-client makes them.

:func:`opening` installs it while a client opens a folder, only where qdrant-client's own
loader is the one it was written from (:data:`LOADER_SHA256`, the digest of its source); any
other version of qdrant-client opens with its own loader. ``tests/test_connectors.py`` checks
that both loaders give the same collections.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import defaultdict

import numpy as np

__all__ = ["LOADER_SHA256", "load_vectors", "opening", "original_loader_matches"]

#: SHA-256 of the source of ``LocalCollection.load_vectors`` in qdrant-client 1.20.0, the loader
#: :func:`load_vectors` reproduces
LOADER_SHA256 = "45c5ec36ac4fad9fc4b46ad106b59cec75716790ea5de101e850d02681d5c021"

#: Rows per block of a growing float32 array (a block is allocated once and filled in place)
BLOCK_ROWS = 4096


class _Rows:
    """A float32 array of width ``dim`` grown one row at a time, in blocks."""

    def __init__(self, dim):
        self.dim, self.blocks, self.n = dim, [], 0

    def append(self, values):
        at = self.n % BLOCK_ROWS
        if at == 0:
            self.blocks.append(np.empty((BLOCK_ROWS, self.dim), dtype=np.float32))
        self.blocks[-1][at] = values  # a double to float32 cast, as ``astype`` rounds it
        self.n += 1

    def array(self):
        blocks, self.blocks = self.blocks, []
        if not blocks:
            return np.empty((0, self.dim), dtype=np.float32)
        out = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        return out[:self.n].copy() if len(out) > self.n else out


def load_vectors(self) -> None:
    """``LocalCollection.load_vectors`` of qdrant-client 1.20.0, with float32 vector rows made
    as each point is read (see the module's docstring)."""
    from qdrant_client.local.local_collection import (
        DEFAULT_VECTOR_NAME,
        empty_sparse_vector,
        to_jsonable_python,
    )

    if self.storage is None:
        return
    vectors = {}
    sparse_vectors = defaultdict(list)
    multivectors = defaultdict(list)
    deleted_ids = []

    for idx, point in enumerate(self.storage.load()):
        self.ids[point.id] = idx
        self.ids_inv.append(point.id)
        self.payload.append(to_jsonable_python(point.payload) or {})
        loaded_vector = point.vector
        if isinstance(point.vector, list):
            loaded_vector = {DEFAULT_VECTOR_NAME: point.vector}

        for name in list(self.vectors.keys()):
            v = loaded_vector.get(name)
            size = self.vectors_config[name].size
            if name not in vectors:
                vectors[name] = _Rows(size)
            if v is not None:
                vectors[name].append(v)
            else:
                vectors[name].append(np.ones(size, dtype=np.float32))
                deleted_ids.append((idx, name))

        for name in list(self.sparse_vectors.keys()):
            v = loaded_vector.get(name)
            if v is not None:
                sparse_vectors[name].append(v)
            else:
                sparse_vectors[name].append(empty_sparse_vector())
                deleted_ids.append((idx, name))

        for name in list(self.multivectors.keys()):
            v = loaded_vector.get(name)
            if v is not None:
                multivectors[name].append(np.array(v, dtype=np.float32))
            else:
                multivectors[name].append(
                    np.ones((1, self.multivectors_config[name].size), dtype=np.float32))
                deleted_ids.append((idx, name))

    for name, rows in vectors.items():
        self.vectors[name] = rows.array()
        self.deleted_per_vector[name] = np.zeros(len(self.payload), dtype=bool)

    for name, named_vectors in sparse_vectors.items():
        self.sparse_vectors[name] = named_vectors
        self.deleted_per_vector[name] = np.zeros(len(self.payload), dtype=bool)
        for vector in named_vectors:
            self._update_idf_append(vector, name)

    for name, named_vectors in multivectors.items():
        self.multivectors[name] = named_vectors
        self.deleted_per_vector[name] = np.zeros(len(self.payload), dtype=bool)

    for idx, name in deleted_ids:
        self.deleted_per_vector[name][idx] = 1

    self.deleted = np.zeros(len(self.payload), dtype=bool)


def _source_digest(function):
    import inspect

    try:
        return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()
    except (OSError, TypeError):  # no source to read (e.g. a frozen install)
        return None


def original_loader_matches():
    """Whether the installed qdrant-client's loader is the one :func:`load_vectors` reproduces."""
    from qdrant_client.local.local_collection import LocalCollection

    return _source_digest(LocalCollection.__dict__["load_vectors"]) == LOADER_SHA256


@contextlib.contextmanager
def opening(enabled=True):
    """Open local folders with :func:`load_vectors` inside the ``with`` block where
    :func:`original_loader_matches` (and ``enabled``); yield whether it is installed."""
    from qdrant_client.local.local_collection import LocalCollection

    original = LocalCollection.__dict__["load_vectors"]
    if not (enabled and original_loader_matches()):
        yield False
        return
    LocalCollection.load_vectors = load_vectors
    try:
        yield True
    finally:
        LocalCollection.load_vectors = original
