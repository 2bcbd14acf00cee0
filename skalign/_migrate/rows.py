"""A fitted map whose output for the encoded rows is their encoder's vector, exactly, and the
temporary file a ``--continue`` step keeps its encoded rows' vectors in."""

from __future__ import annotations

import hashlib
import os
import tempfile
import weakref

import numpy as np

from .._stores.files.overlay import FileRows

__all__ = ["ExactRowsModel", "RowFile", "RowSubset", "pairs_fingerprint", "row_keys"]

#: row files alive in this process, by content digest (what a pickled one refers to)
_LIVE = weakref.WeakValueDictionary()

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


class RowFile(FileRows):
    """float32 rows of width ``dim`` in a temporary file (removed from its folder at once: it
    goes with the process), appended a batch at a time and read by index like an array
    (:class:`~skalign._stores.files.overlay.FileRows`): what a step holds per encoded row stays
    on disk, whatever the number of rows.

    Pickled (a model's fingerprint pickles it), a row file is its content's digest and shape:
    the same rows give the same bytes, and it is unpickled only in the process that holds it.
    """

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, dim):
        fd, path = tempfile.mkstemp(prefix="skalign-rows-")
        os.unlink(path)
        super().__init__(os.fdopen(fd, "w+b"), 0, 0, int(dim), np.dtype(np.float32))
        self._digest = None

    @property
    def shape(self):
        return (self.n, self.dim)

    def __len__(self):
        return self.n

    def append(self, V):
        """Add the rows ``V`` at the end."""
        V = np.ascontiguousarray(V, dtype=np.float32).reshape(-1, self.dim)
        data, at = V.tobytes(), self.n * self.row_bytes
        while data:
            done = os.pwrite(self.f.fileno(), data, at)
            data, at = data[done:], at + done
        self.n += len(V)
        self._digest = None

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self.span(int(key) % self.n, int(key) % self.n + 1)[0]
        if isinstance(key, slice):
            lo, hi, step = key.indices(self.n)
            return self.span(lo, max(lo, hi)) if step == 1 else self[np.arange(lo, hi, step)]
        idx = np.asarray(key)
        idx = np.flatnonzero(idx) if idx.dtype == bool else idx.astype(np.int64)
        return self.rows(idx) if len(idx) else np.empty((0, self.dim), np.float32)

    def __array__(self, dtype=None, copy=None):
        V = self.span(0, self.n)
        return V if dtype is None else V.astype(dtype, copy=False)

    def chunks(self, size=2048):
        """Yield the rows ``size`` at a time, in order."""
        for lo in range(0, self.n, size):
            yield self.span(lo, min(self.n, lo + size))

    def digest(self):
        """SHA-256 of the rows' bytes, in order (read a chunk at a time)."""
        if self._digest is None:
            h = hashlib.sha256()
            for V in self.chunks():
                h.update(V)
            self._digest = h.hexdigest()
        return self._digest

    def __reduce__(self):
        _LIVE[self.digest()] = self
        return _row_file, (self.digest(), self.dim, self.n)


class RowSubset:
    """The rows ``idx`` of ``rows`` (a :class:`RowFile`), read only when indexed (a write-back
    takes them a batch at a time)."""

    def __init__(self, rows, idx):
        self.rows, self.idx = rows, np.asarray(idx, dtype=np.int64)
        self.shape = (len(self.idx), rows.shape[1])

    def __len__(self):
        return len(self.idx)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self.rows[int(self.idx[key])]
        return self.rows[self.idx[key]]

    def __array__(self, dtype=None, copy=None):
        V = self.rows[self.idx]
        return V if dtype is None else V.astype(dtype, copy=False)


def pairs_fingerprint(method, X, Y):
    """A digest of the method and the pairs' bytes (a :class:`RowFile`
    read a chunk at a time)."""
    h = hashlib.sha256(method.encode())
    for a in (X, Y):
        for V in (a.chunks() if isinstance(a, RowFile) else (a,)):
            h.update(np.ascontiguousarray(V, dtype=np.float32))
    return h.hexdigest()[:16]


def _row_file(digest, dim, n):
    """The row file of this process with that content (see :meth:`RowFile.__reduce__`)."""
    found = _LIVE.get(digest)
    if found is None:
        raise ValueError(f"the {n} rows of {dim} values this model refers to were kept in a "
                         "temporary file of the process that fitted it; fit it again")
    return found


def _contiguous(X):
    return X if isinstance(X, RowFile) else np.ascontiguousarray(X, dtype=np.float32)


def _keys(X):
    """:func:`row_keys` of ``X`` (a :class:`RowFile` read a chunk at a time)."""
    if not isinstance(X, RowFile):
        return row_keys(X)
    return np.concatenate([row_keys(V) for V in X.chunks()] or [np.empty(0, np.uint64)])


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
    X_old : ndarray or RowFile of shape (n_encoded, d_in)
        The encoded rows' vectors in the source store (a :class:`RowFile`: read by row when a
        row matches, never held whole).
    Y_new : ndarray or RowFile of shape (n_encoded, d_out)
        Their encoder's vectors.
    exact : bool, default=None
        Whether the encoded rows get their new vectors; ``None``: unless ``map_`` writes
        translations only (:func:`~skalign._migrate.calibration.writes_exact`).
    """

    def __init__(self, map_, X_old, Y_new, exact=None):
        from .calibration import writes_exact

        self.map_ = map_
        self.exact = writes_exact(map_) if exact is None else bool(exact)
        self.X_old, self.Y_new = _contiguous(X_old), _contiguous(Y_new)
        keys = _keys(self.X_old)
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
            if same.any():
                out[hit[same]] = self.Y_new[src[same]]
        return out
