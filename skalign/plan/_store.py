"""The pseudo-paired evaluation store of :mod:`skalign.plan`, discovered in the unpaired samples.

Rows of the samples that repeat a known pair are left out (:func:`_duplicates`,
:func:`_pool_without`); the rest are paired by mutual nearest neighbours under the bootstrap
candidate's map (:func:`_pseudo_store`), and serve as evaluation store when its certificate
reaches :data:`MIN_CERTIFICATE` (see the module docstring of :mod:`skalign.plan`).
"""

from __future__ import annotations

import numpy as np

from ._candidates import _fit, make_candidate

#: bootstrap certificate above which the pairs it discovers serve as evaluation store (the
#: user guide's range for right discoveries is 0.9-1.0; failed ones score 0.0-0.44)
MIN_CERTIFICATE = 0.9


def _unit(A):
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(norms > 0, norms, 1.0)


def _duplicates(A, B, block=1024):
    """Rows of ``A`` that repeat a row of ``B`` (cosine above 0.9999)."""
    Bn = _unit(B)
    return np.concatenate([(_unit(A[i:i + block]) @ Bn.T).max(axis=1) > 0.9999
                           for i in range(0, len(A), block)]) if len(B) else \
        np.zeros(len(A), bool)


def _pool_without(unpaired, X, Y):
    """The unpaired samples less the rows that repeat ``X`` (source) or ``Y`` (target) rows."""
    from ..base import UnpairedPool

    if unpaired is None:
        return None
    return UnpairedPool(
        X=None if unpaired.X is None else unpaired.X[~_duplicates(unpaired.X, X)],
        y=None if unpaired.y is None else unpaired.y[~_duplicates(unpaired.y, Y)])


def _pseudo_store(X, Y, unpaired, free_p, free_q, random_state, block=1024):
    """Pairs discovered in the unpaired samples, to serve as a large evaluation store.

    The reference map is the bootstrap candidate fitted on all known pairs plus the unpaired
    samples; a source row ``p`` and a target row ``q`` form a pseudo-pair when each is the
    other's nearest neighbour (cosine) under it. Rows duplicating a known pair (cosine > 0.9999
    to one of its rows) are left out, so nothing a candidate is fitted on is evaluated.

    ``free_p`` and ``free_q`` mark the sample rows that are not known pairs.

    Returns
    -------
    store : dict
        ``{"source": rows of unpaired.X, "target": rows of unpaired.y, "certificate": float,
        "fit_seconds": float}``.
    """
    P, Q = unpaired.X, unpaired.y
    ref, secs = _fit(make_candidate("bootstrap", len(X), random_state), X, Y, unpaired)
    TP = _unit(np.asarray(ref.transform(P), dtype=np.float32))
    Qn = _unit(Q)
    best_q = np.full(len(P), -1)
    best_p = np.full(len(Q), -1)
    col_max = np.full(len(Q), -np.inf)
    q_idx = np.flatnonzero(free_q)
    for i in range(0, len(P), block):
        S = TP[i:i + block] @ Qn[q_idx].T
        best_q[i:i + block] = q_idx[S.argmax(axis=1)]
        rows = S.argmax(axis=0)
        better = S[rows, np.arange(len(q_idx))] > col_max[q_idx]
        col_max[q_idx[better]] = S[rows[better], np.flatnonzero(better)]
        best_p[q_idx[better]] = i + rows[better]
    src = np.flatnonzero(free_p & (best_p[best_q] == np.arange(len(P))))
    return {"source": src, "target": best_q[src],
            "certificate": float(getattr(ref, "certificate_", float("nan"))),
            "fit_seconds": secs}
