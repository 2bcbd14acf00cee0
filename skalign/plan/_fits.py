"""Stage 3 of :mod:`skalign.plan`: the held-out fits, and the fits of the budget curve and the
ceiling.

Every candidate is cross-fitted over folds of the pairs (:func:`cross_fit`) or fitted on all
pairs and applied to the pseudo-paired store (:func:`store_fit`); each returns, per side, the
held-out rows with their translated index and queries, which the estimates stage scores. The
budget curve fits each method on growing subsets of the pairs and scores it on a held-out fifth
(:func:`learning_curve`); the ceiling's oracles are fitted on all pairs (:func:`oracle_fits`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._candidates import (
    candidate_sides,
    duplicates,
    fit,
    fit_both_ways,
    fixed_penalty,
    learns_from_samples,
    make_candidate,
    translate,
)

__all__ = ["CURVE_COUNTS", "STORE_PARTS", "Fits", "held_out_fits"]

#: parts of the pseudo-paired store a candidate that learns from the unpaired samples is
#: cross-fitted over (each fit keeps 3/4 of the store rows in its samples)
STORE_PARTS = 4
#: pair counts of the learning curve (those below the training part's size are used)
CURVE_COUNTS = (25, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)


@dataclass(frozen=True)
class Fits:
    """What the fits give the estimates stage.

    ``folds[name][side]`` are ``(held-out rows, translated index, translated queries)`` per
    fold, ``doc_stores[name]`` the document side's evaluation store (the folds put back
    together where the method allows it), ``fit_seconds[name]`` and ``how[name][side]`` say
    what each fit took and does; ``Y_eval`` are the new-model vectors of the evaluation
    store's rows. ``curves`` is the unscaled
    budget curve on a held-out store of ``curve_store_size`` items, ``oracles`` the ceiling's
    in-sample translations ``(name, index)``.
    """

    folds: dict
    doc_stores: dict
    fit_seconds: dict
    how: dict
    Y_eval: np.ndarray
    curves: dict
    curve_store_size: int
    oracles: tuple


def held_out_fits(inputs, store):
    """Every candidate of ``store.methods`` fitted as the evaluation ``store`` needs, the budget
    curve's fits (with ``inputs.curve``) and the ceiling's."""
    X, Y, unpaired, rs = inputs.X, inputs.Y, inputs.unpaired, inputs.random_state
    folds, docs, seconds, how = {}, {}, {}, {}
    for name in store.methods:
        if not store.pseudo_pairs:
            out, seconds[name], how[name] = cross_fit(name, X, Y, unpaired, inputs.fit_sides,
                                                      inputs.n_splits, rs)
        else:
            out, seconds[name], how[name] = store_fit(name, X, Y, unpaired, store,
                                                      inputs.fit_sides, rs)
        folds[name], docs[name] = out, doc_store(name, out["document"])
    Y_eval = Y if not store.pseudo_pairs else unpaired.y[store.target]
    curves, curve_size = ({}, 0)
    if inputs.curve:
        curves, curve_size = learning_curve(store.methods, X, Y, unpaired, inputs.k,
                                            inputs.n_repeats, rs)
    return Fits(folds=folds, doc_stores=docs, fit_seconds=seconds, how=how, Y_eval=Y_eval,
                curves=curves, curve_store_size=curve_size, oracles=oracle_fits(X, Y))


def doc_store(name, folds):
    """The document side's evaluation store: every held-out fold put back together (each item
    translated by a fit that never saw it). A method that also maps the queries
    (``transform_target``) is scored on its first fold alone, where index and queries come from
    the same fit."""
    if len(folds) == 1 or hasattr(make_candidate(name), "transform_target"):
        return folds[0]
    return tuple(np.concatenate([f[i] for f in folds]) for i in range(3))


def pool_without(unpaired, X, Y):
    """The unpaired samples less the rows that repeat ``X`` (source) or ``Y`` (target) rows."""
    from ..base import UnpairedPool

    if unpaired is None:
        return None
    return UnpairedPool(
        X=None if unpaired.X is None else unpaired.X[~duplicates(unpaired.X, X)],
        y=None if unpaired.y is None else unpaired.y[~duplicates(unpaired.y, Y)])


def cross_fit(name, X, Y, unpaired, sides, n_splits, random_state):
    """Per fold and side: (held-out rows, translated index, translated queries); fit s; how."""
    from sklearn.model_selection import KFold

    proto = make_candidate(name, len(X), random_state)
    sides = candidate_sides(proto, sides)
    reverse_proto = fixed_penalty(proto, Y, X, None) if "query" in sides else None
    proto = fixed_penalty(proto, X, Y, unpaired)
    out = {side: [] for side in sides}
    how = {"document": "translate the stored documents"}
    secs = 0.0
    folds = KFold(n_splits=n_splits, shuffle=True, random_state=random_state).split(X)
    for train, test in folds:
        # a candidate that learns from the unpaired samples must not find the held-out pairs
        pool = pool_without(unpaired, X[test], Y[test]) if learns_from_samples(proto) \
            else unpaired
        est, reverse, s, how["query"] = fit_both_ways(proto, X[train], Y[train], pool, sides,
                                                      reverse_proto)
        secs += s
        for side in sides:
            index, queries = translate(est, X[test], Y[test], side, reverse)
            out[side].append((test, index, queries))
    return out, secs / n_splits, how


def store_fit(name, X, Y, unpaired, store, sides, random_state):
    """Like :func:`cross_fit`, evaluated on the pseudo-paired store instead of held-out pairs.

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
    sides = candidate_sides(proto, sides)
    P, Q = unpaired.X[store.source], unpaired.y[store.target]
    m = len(P)
    if learns_from_samples(proto):
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
            keep_p[store.source[test]] = False
            keep_q = np.ones(len(unpaired.y), bool)
            keep_q[store.target[test]] = False
            pool = UnpairedPool(X=unpaired.X[keep_p], y=unpaired.y[keep_q])
        est, reverse, s, how["query"] = fit_both_ways(proto, X, Y, pool, sides)
        secs += s
        for side in sides:
            index, queries = translate(est, P[test], Q[test], side, reverse)
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


def learning_curve(methods, X, Y, unpaired, k, n_repeats, random_state):
    """``{method: {"n_pairs", "recall", "recall_std", "ndcg"}}`` on the held-out store, and
    its size (the estimates stage carries them to the store size)."""
    from sklearn.base import clone

    from ..metrics import retrieval_retention

    rng = np.random.default_rng([random_state, 1])
    n = len(X)
    n_eval = max(50, n // 5)
    if n - n_eval < 25 or n_eval <= k:
        return {}, 0
    order = rng.permutation(n)
    ev, tr = order[:n_eval], order[n_eval:]
    counts = [c for c in CURVE_COUNTS if c < len(tr)] + [len(tr)]
    curve = {}
    for name in methods:
        proto = make_candidate(name, len(tr), random_state)
        unpaired_fit = learns_from_samples(proto)
        pts = {"n_pairs": [], "recall": [], "recall_std": [], "ndcg": []}
        for c in counts:
            if unpaired_fit and c not in (25, 500, len(tr)):
                continue  # its slowest fits; the curve is flat (the unpaired pairs dominate)
            reps = n_repeats if c <= 200 and not unpaired_fit else 1
            rec, nd = [], []
            for _ in range(reps):
                pick = tr if c == len(tr) else rng.choice(tr, c, replace=False)
                est, _ = fit(clone(proto), X[pick], Y[pick], unpaired)
                index, queries = translate(est, X[ev], Y[ev], "document", None)
                r = retrieval_retention(Y[ev], index, Y[ev], queries, k=k, exclude_self=True)
                rec.append(r["recall"])
                nd.append(r["ndcg"])
            pts["n_pairs"].append(int(c))
            pts["recall"].append(float(np.mean(rec)))
            pts["recall_std"].append(float(np.std(rec)))
            pts["ndcg"].append(float(np.mean(nd)))
        curve[name] = pts
    return curve, n_eval


def oracle_fits(X, Y):
    """The ceiling's oracles, fitted on all pairs: ``((name, in-sample translation), ...)`` for
    a ridge map (alpha by leave-one-out) and centred Procrustes."""
    from .._affine.linear import LinearAligner

    out = []
    for name in ("linear", "procrustes"):
        est = (LinearAligner(alphas=np.logspace(-4, 6, 11)) if name == "linear" else
               make_candidate(name, len(X), 0)).fit(X, Y)
        out.append((name, est.transform(X)))
    return tuple(out)
