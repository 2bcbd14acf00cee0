"""A point's other vectors as a translation's verification compares them (:meth:`.store.Reader.
row`): a cosine vector as its direction, equal to another within float32 rounding.

Qdrant keeps a cosine vector's direction only, normalising every vector it is given; the local
mode normalises it in memory but stores it as given, so a folder opened again holds the raw
values. A translation copies a point's other named vectors into the output as it read them,
and the output holds their directions, normalised again: a raw vector comes back as its
direction, a direction a few units in the last place away. Comparing the two as
:class:`Direction` values says whether the output holds the vector the source held, as Qdrant
defines it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TOLERANCE", "Direction", "kept_vectors", "unit_rows"]

#: the largest difference of two coordinates of one direction normalised again in float32
TOLERANCE = 1e-6


class Direction(tuple):
    r"""The direction :math:`v / \lVert v\rVert` of a cosine vector (a zero vector as it is);
    two are equal where every coordinate is within :data:`TOLERANCE`. Not hashable (equality
    within a tolerance is not transitive)."""

    __slots__ = ()
    __hash__ = None

    def __new__(cls, values):
        v = np.asarray(values, dtype=np.float64)
        n = float(np.linalg.norm(v))
        return super().__new__(cls, (v / n if n > 0 else v).tolist())

    def __eq__(self, other):
        if not isinstance(other, Direction):
            return NotImplemented
        return len(self) == len(other) and bool(
            np.all(np.abs(np.subtract(self, other)) <= TOLERANCE))

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal


def kept_vectors(vectors, read, config):
    """A point's ``vectors`` (``{name: value}``) but the one ``read``, each cosine dense vector
    of ``config`` (the collection's ``{name: VectorParams}``) as a :class:`Direction`."""
    from qdrant_client import models

    cosine = {n for n, p in (config if isinstance(config, dict) else {}).items()
              if getattr(p, "distance", None) == models.Distance.COSINE
              and getattr(p, "multivector_config", None) is None}
    return {n: Direction(v) if n in cosine and isinstance(v, list) else v
            for n, v in vectors.items() if n != read}


def unit_rows(X):
    """Rows of ``X`` scaled to unit length (zero rows left as they are), as Qdrant stores a
    cosine vector."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return (X / np.where(norms > 0, norms, 1)).astype(np.float32, copy=False)
