"""The fits :mod:`skalign.plan` scores: cross-fitted over folds of the pairs, or on the store.

Each returns, per side, the held-out rows with their translated index and queries, for
:func:`skalign.plan._estimate._estimate` to score (see the module docstring of
:mod:`skalign.plan`).
"""

from __future__ import annotations

import numpy as np

from ._candidates import (
    _candidate_sides,
    _fit_both_ways,
    _fixed_penalty,
    _sides,
    _uses_unpaired,
    make_candidate,
)
from ._store import _pool_without

#: parts of the pseudo-paired store a candidate that learns from the unpaired samples is
#: cross-fitted over (each fit keeps 3/4 of the store rows in its samples)
STORE_PARTS = 4


def _cross_fit(name, X, Y, unpaired, sides, n_splits, random_state):
    """Per fold and side: (held-out rows, translated index, translated queries); fit s; how."""
    from sklearn.model_selection import KFold

    proto = make_candidate(name, len(X), random_state)
    sides = _candidate_sides(proto, sides)
    reverse_proto = _fixed_penalty(proto, Y, X, None) if "query" in sides else None
    proto = _fixed_penalty(proto, X, Y, unpaired)
    out = {side: [] for side in sides}
    how = {"document": "translate the stored documents"}
    secs = 0.0
    folds = KFold(n_splits=n_splits, shuffle=True, random_state=random_state).split(X)
    for train, test in folds:
        # a candidate that learns from the unpaired samples must not find the held-out pairs
        pool = _pool_without(unpaired, X[test], Y[test]) if _uses_unpaired(proto) else unpaired
        est, reverse, s, how["query"] = _fit_both_ways(proto, X[train], Y[train], pool, sides,
                                                       reverse_proto)
        secs += s
        for side in sides:
            index, queries = _sides(est, X[test], Y[test], side, reverse)
            out[side].append((test, index, queries))
    return out, secs / n_splits, how


def _store_fit(name, X, Y, unpaired, store, sides, random_state):
    """Like :func:`_cross_fit`, evaluated on the pseudo-paired store instead of held-out pairs.

    Every candidate is fitted on all known pairs, as it would be for the migration. A candidate
    that also learns from the unpaired samples (the bootstrap) is fitted ``STORE_PARTS`` times,
    each time without the store rows of one part of the store, and translates that part. On
    the document side the parts are put back together into one store (each item translated by
    a fit that never saw it); the query side, and a method that maps the queries too
    (``transform_target``), are scored part by part, so that no fit meets an item it learnt
    from.
    """
    from ..base import UnpairedPool

    proto = make_candidate(name, len(X), random_state)
    sides = _candidate_sides(proto, sides)
    P, Q = unpaired.X[store["source"]], unpaired.y[store["target"]]
    m = len(P)
    if _uses_unpaired(proto):
        order = np.random.default_rng(random_state).permutation(m)
        parts = [np.sort(part) for part in np.array_split(order, STORE_PARTS)]
    else:
        parts = [np.arange(m)]
    out = {side: [] for side in sides}
    how = {"document": "translate the stored documents"}
    secs = 0.0
    for test in parts:
        pool = unpaired
        if len(parts) > 1:
            keep_p = np.ones(len(unpaired.X), bool)
            keep_p[store["source"][test]] = False
            keep_q = np.ones(len(unpaired.y), bool)
            keep_q[store["target"][test]] = False
            pool = UnpairedPool(X=unpaired.X[keep_p], y=unpaired.y[keep_q])
        est, reverse, s, how["query"] = _fit_both_ways(proto, X, Y, pool, sides)
        secs += s
        for side in sides:
            index, queries = _sides(est, P[test], Q[test], side, reverse)
            out[side].append((test, index, queries))
    if len(parts) > 1 and "document" in sides and not hasattr(proto, "transform_target"):
        # document side only: bridged queries would meet, in the untouched old index, items
        # another part's fit learnt from, whose inner products that fit reproduces
        order = np.concatenate(parts)
        for side in ("document",):
            index = np.concatenate([f[1] for f in out[side]])
            queries = np.concatenate([f[2] for f in out[side]])
            out[side] = [(order, index, queries)]
    return out, secs / len(parts), how
