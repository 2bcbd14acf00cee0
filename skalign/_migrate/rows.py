"""A fitted map whose output for the encoded rows is their encoder's vector, exactly."""

from __future__ import annotations

import numpy as np

__all__ = ["ExactRowsModel", "row_keys"]

_KEY_SEED = 0x5CA11C4E
#: rows keyed at a time
KEY_BLOCK = 8192


def row_keys(X):
    """A 64-bit key per row of a float32 array, from its exact bits: a random linear form over
    the 32-bit words, modulo 2⁶⁴ (vectorised; equal rows have equal keys, and a match is
    confirmed bit for bit by :class:`ExactRowsModel`)."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    coef = np.random.default_rng(_KEY_SEED).integers(1, 2**63, size=X.shape[1], dtype=np.uint64)
    coef |= np.uint64(1)
    out = np.empty(len(X), dtype=np.uint64)
    # in blocks: the 64-bit products of a whole array take 4x its size (10^5 encoded 384-d
    # rows: 0.3 GB at once)
    for lo in range(0, len(X), KEY_BLOCK):
        block = X[lo:lo + KEY_BLOCK].view(np.uint32).astype(np.uint64)
        out[lo:lo + KEY_BLOCK] = (block * coef).sum(axis=1, dtype=np.uint64)
    return out


class ExactRowsModel:
    """``map_`` for every row, except rows equal (bit for bit, as float32) to one of the encoded
    rows' old vectors, which get that row's new vector.

    A function of each input row alone, so the translation pipeline can stream, resume and
    verify it like any map, and write the encoded rows' exact vectors into the output's shadow.
    A map that says it writes a store of translations only (``map_.mode == "translate all"``,
    :class:`~skalign._migrate.calibration.CalibratedMap`) is applied to every row, the encoded
    ones included: :mod:`skalign._migrate.calibration` chose that store on the encoded pairs.

    Parameters
    ----------
    map_ : fitted estimator
        The map for every other row.
    X_old : ndarray of shape (n_encoded, d_in)
        The encoded rows' vectors in the source store.
    Y_new : ndarray of shape (n_encoded, d_out)
        Their encoder's vectors.
    exact : bool, default=None
        Whether the encoded rows get their new vectors; ``None``: unless ``map_`` writes
        translations only (:func:`~skalign._migrate.calibration.writes_exact`).
    """

    def __init__(self, map_, X_old, Y_new, exact=None):
        from .calibration import writes_exact

        self.map_ = map_
        self.exact = writes_exact(map_) if exact is None else bool(exact)
        self.X_old = np.ascontiguousarray(X_old, dtype=np.float32)
        self.Y_new = np.ascontiguousarray(Y_new, dtype=np.float32)
        keys = row_keys(self.X_old)
        self.order_ = np.argsort(keys, kind="stable")
        self.keys_ = keys[self.order_]
        self.n_features_in_ = int(map_.n_features_in_)
        self.n_features_out_ = int(self.Y_new.shape[1])

    def transform(self, X):
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        out = np.asarray(self.map_.transform(X32), dtype=np.float32).copy()
        if not self.exact or not len(self.keys_) or not len(X32):
            return out
        keys = row_keys(X32)
        at = np.searchsorted(self.keys_, keys).clip(0, len(self.keys_) - 1)
        hit = np.flatnonzero(self.keys_[at] == keys)
        if len(hit):
            src = self.order_[at[hit]]
            same = (self.X_old[src].view(np.uint32) == X32[hit].view(np.uint32)).all(axis=1)
            out[hit[same]] = self.Y_new[src[same]]
        return out
