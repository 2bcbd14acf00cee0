"""Stages 2 and 3 of :mod:`skalign.plan`: the evaluation store, and every fit the plan makes.

:func:`evaluation_store` chooses where the estimates are measured: cross-validation over the
pairs, or pairs discovered in the unpaired samples (rows of the samples that repeat a known pair
are left out, the rest paired by mutual nearest neighbours under the bootstrap candidate's map,
:func:`pseudo_store`), used when the bootstrap's certificate reaches :data:`MIN_CERTIFICATE`.

:func:`held_out_fits` makes the fits, each once, and what every later stage scores: each
candidate cross-fitted over folds of the pairs (:func:`cross_fit`) or fitted on all pairs and
applied to the pseudo-paired store (:func:`store_fit`), per side the held-out rows with their
translated index and queries; the budget curve's fits on growing subsets of the pairs, scored
on a held-out fifth (:func:`learning_curve`); the ceiling's oracles fitted on all pairs
(:func:`oracle_fits`); and, with judged queries, each candidate's similarities of the judged
queries to the pairs' items, every item scored by the fit of the fold that left it out — the
cross-fits of the estimates themselves where the store is cross-validation (the judged options
share them), else a cross-fit over the pairs made for them.

A fit is ``est`` fitted on the pairs (and on the unpaired samples when it learns from them),
new -> old too when queries are bridged and it has no exact inverse (:func:`fit_both_ways`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ._inputs import unit

__all__ = ["CURVE_COUNTS", "EvaluationStore", "Fits", "MIN_CERTIFICATE", "STORE_PARTS",
           "evaluation_store", "held_out_fits"]

#: bootstrap certificate above which the pairs it discovers serve as evaluation store (the
#: user guide's range for right discoveries is 0.9-1.0)
MIN_CERTIFICATE = 0.9
#: parts of the pseudo-paired store a candidate that learns from the unpaired samples is
#: cross-fitted over (each fit keeps 3/4 of the store rows in its samples)
STORE_PARTS = 4
#: pair counts of the learning curve (those below the training part's size are used)
CURVE_COUNTS = (25, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)



@dataclass(frozen=True)
class EvaluationStore:
    """Where the estimates are measured.

    ``source`` and ``target`` are the rows of the unpaired samples paired into the store, or
    ``None`` for cross-validation over the pairs (``pseudo_pairs`` says which); ``methods`` the
    candidates to estimate (the default bootstrap left out where it could only find the known
    pairs again); ``evaluation`` is :attr:`MigrationPlan.evaluation`.
    """

    source: object
    target: object
    methods: tuple
    evaluation: dict
    notes: tuple
    pseudo_pairs: bool


@dataclass(frozen=True)
class Fits:
    """What the fits give the estimates stage.

    ``folds[name][side]`` are ``(held-out rows, translated index, translated queries)`` per
    fold, ``doc_stores[name]`` the document side's evaluation store (the folds put back
    together where the method allows it), ``fit_seconds[name]`` and ``how[name][side]`` say
    what each fit took and does; ``Y_eval`` are the new-model vectors of the evaluation
    store's rows. ``curves`` is the unscaled budget curve on a held-out store of
    ``curve_store_size`` items, ``oracles`` the ceiling's in-sample translations ``(name,
    index)`` (none in a lean plan). With judged queries, ``judged[name][side]`` are the cosine
    similarities of the judged queries (rows) to the pairs' items (columns), each item scored
    by the fit of the fold that left it out (else ``judged`` is empty).
    """

    folds: dict
    doc_stores: dict
    fit_seconds: dict
    how: dict
    Y_eval: np.ndarray
    curves: dict
    curve_store_size: int
    oracles: tuple
    judged: dict


def evaluation_store(inputs):
    """The evaluation store of the checked ``inputs`` (:class:`EvaluationStore`)."""
    X, Y, unpaired, k = inputs.X, inputs.Y, inputs.unpaired, inputs.k
    n, n_splits = inputs.n_pairs, inputs.n_splits
    methods = list(inputs.methods)
    store = None
    evaluation = {"store": "cross-validation", "size": int(n // n_splits),
                  "n_splits": int(n_splits)}
    if inputs.has_pools:
        # worth it only when larger than a held-out fold (and each half above 2 (k + 1) items)
        min_size = max(n // n_splits + 1, 4 * (k + 1))
        free_p, free_q = ~duplicates(unpaired.X, X), ~duplicates(unpaired.y, Y)
        n_new = int(min(free_p.sum(), free_q.sum()))
        evaluation["unpaired_new_rows"] = n_new
        if n_new < min_size and inputs.defaults and "bootstrap" in methods:
            # the bootstrap could only find the known pairs again: a map on the pairs alone
            # is the same fit without the duplicates
            methods.remove("bootstrap")
            evaluation["bootstrap_left_out"] = (
                f"the unpaired samples hold only {n_new} rows that are not known pairs (fewer "
                f"than {min_size}); the bootstrap would find little beyond the known pairs")
        if n_new >= min_size:
            store = pseudo_store(X, Y, unpaired, free_p, free_q,
                                 inputs.candidates["bootstrap"].proto)
            size = len(store["source"])
            cert = store["certificate"]
            evaluation.update(pseudo_pairs=int(size),
                              certificate=None if np.isnan(cert) else cert)
            if cert >= MIN_CERTIFICATE and size >= min_size:  # NaN: no certificate, no store
                evaluation.update(store="pseudo-pairs", size=int(size))
            else:
                store = None
    notes = ()
    if inputs.has_pools and store is None:
        notes = ("no evaluation store could be discovered in the unpaired samples ("
                 + (f"bootstrap certificate {evaluation['certificate']:.2f} below "
                    f"{MIN_CERTIFICATE}" if evaluation.get("certificate") is not None
                    else "too few rows that are not known pairs")
                 + f"): estimated by {n_splits}-fold cross-validation over the pairs",)
    return EvaluationStore(source=None if store is None else store["source"],
                           target=None if store is None else store["target"],
                           methods=tuple(methods), evaluation=evaluation, notes=notes,
                           pseudo_pairs=store is not None)


def held_out_fits(inputs, store):
    """Every candidate of ``store.methods`` fitted as the evaluation ``store`` needs, the budget
    curve's fits (with ``inputs.curve``), the ceiling's and, with judged queries, their
    similarities to the pairs' items (:class:`Fits`)."""
    X, Y, unpaired, rs = inputs.X, inputs.Y, inputs.unpaired, inputs.random_state
    judged_queries = None
    if inputs.judged_rows is not None:
        # the judged queries enter a map as the pairs did (unit rows with normalize), and are
        # scored by cosine
        QB = inputs.queries[1][inputs.judged_rows]
        QBu = unit(QB)
        judged_queries = (QBu if inputs.normalize else QB, QBu, unit(X))
    folds, docs, seconds, how, judged = {}, {}, {}, {}, {}
    for name in store.methods:
        cand = inputs.candidates[name]
        if not store.pseudo_pairs:
            out, seconds[name], how[name], scores = cross_fit(
                cand, X, Y, unpaired, inputs.n_splits, rs, judged_queries)
        else:
            out, seconds[name], how[name] = store_fit(cand, X, Y, unpaired, store, rs)
            if judged_queries is not None:
                # the store's fits saw every pair: the judged queries need held-out pairs
                scores = cross_fit(cand, X, Y, None, inputs.n_splits, rs, judged_queries)[3]
        if judged_queries is not None:
            judged[name] = scores
        folds[name], docs[name] = out, doc_store(cand, out["document"])
    Y_eval = Y if not store.pseudo_pairs else unpaired.y[store.target]
    curves, curve_size = ({}, 0)
    if inputs.curve:
        curves, curve_size = learning_curve([inputs.candidates[m] for m in store.methods], X, Y,
                                            unpaired, inputs.k, inputs.n_repeats, rs)
    return Fits(folds=folds, doc_stores=docs, fit_seconds=seconds, how=how, Y_eval=Y_eval,
                curves=curves, curve_store_size=curve_size,
                oracles=() if inputs.lean else oracle_fits(X, Y),
                judged=judged)


def doc_store(cand, folds):
    """The document side's evaluation store: every held-out fold put back together (each item
    translated by a fit that never saw it). A method that also maps the queries
    (``transform_target``) is scored on its first fold alone, where index and queries come from
    the same fit."""
    if len(folds) == 1 or cand.maps_queries:
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


def cross_fit(cand, X, Y, unpaired, n_splits, random_state, judged_queries=None):
    """``cand`` (a :class:`~skalign.plan._inputs.Candidate`) fitted on all folds of the pairs
    but one, for each fold.

    Returns per side the folds' ``(held-out rows, translated index, translated queries)``, the
    mean seconds of a fit, how each side is carried out and, with ``judged_queries`` ``(the
    judged queries as a map takes them, the same as unit rows, the pairs' old vectors as unit
    rows)``, per side the judged queries' cosine similarities to every pair's item, each
    item's column from the fit of the fold that left it out (else ``None``).
    """
    from sklearn.model_selection import KFold

    sides = cand.sides
    reverse_proto = fixed_penalty(cand, Y, X, None) if "query" in sides else None
    proto = fixed_penalty(cand, X, Y, unpaired)
    out = {side: [] for side in sides}
    scores = None
    if judged_queries is not None:
        QB, QBu, Xu = judged_queries
        scores = {side: np.empty((len(QB), len(X)), dtype=np.float32) for side in sides}
    how = {"document": "translate the stored documents"}
    secs = 0.0
    folds = KFold(n_splits=n_splits, shuffle=True, random_state=random_state).split(X)
    for train, test in folds:
        # a candidate that learns from the unpaired samples must not find the held-out pairs
        pool = pool_without(unpaired, X[test], Y[test]) if cand.learns else unpaired
        est, reverse, s, how["query"] = fit_both_ways(proto, X[train], Y[train], pool, sides,
                                                      reverse_proto, cand.inverse)
        secs += s
        for side in sides:
            index, queries = translate(est, X[test], Y[test], side, reverse)
            out[side].append((test, index, queries))
            if scores is None:
                continue
            if side == "document":
                scores[side][:, test] = QBu @ unit(index).T
            else:
                mapped = reverse.transform(QB) if reverse is not None else \
                    est.inverse_transform(QB)
                scores[side][:, test] = unit(mapped) @ Xu[test].T
    return out, secs / n_splits, how, scores


def store_fit(cand, X, Y, unpaired, store, random_state):
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

    sides = cand.sides
    P, Q = unpaired.X[store.source], unpaired.y[store.target]
    m = len(P)
    if cand.learns:
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
        est, reverse, s, how["query"] = fit_both_ways(cand.proto, X, Y, pool, sides,
                                                      inverse=cand.inverse)
        secs += s
        for side in sides:
            index, queries = translate(est, P[test], Q[test], side, reverse)
            out[side].append((test, index, queries))
    if len(parts) > 1 and "document" in sides and not cand.maps_queries:
        # document side only: bridged queries would meet, in the untouched old index, items
        # another part's fit learnt from, whose inner products that fit reproduces
        order = np.concatenate(parts)
        for side in ("document",):
            index = np.concatenate([f[1] for f in out[side]])
            queries = np.concatenate([f[2] for f in out[side]])
            out[side] = [(order, index, queries)]
    return out, secs / len(parts), how


def learning_curve(candidates, X, Y, unpaired, k, n_repeats, random_state):
    """``{method: {"n_pairs", "recall", "recall_std", "ndcg"}}`` of the ``candidates`` on the
    held-out store, and its size (the estimates stage carries them to the store size)."""
    from sklearn.base import clone

    from ._estimate import _ranked, _retention

    rng = np.random.default_rng([random_state, 1])
    n = len(X)
    n_eval = max(50, n // 5)
    if n - n_eval < 25 or n_eval <= k:
        return {}, 0
    order = rng.permutation(n)
    ev, tr = order[:n_eval], order[n_eval:]
    counts = [c for c in CURVE_COUNTS if c < len(tr)] + [len(tr)]
    # the new model's own top-k of the held-out store, the reference of every fit's retention
    # (retrieval_retention's, made once)
    Yev = Y[ev]
    truth = _ranked(Yev, Yev, k)
    curve = {}
    for cand in candidates:
        proto, unpaired_fit = cand.proto, cand.learns
        pts = {"n_pairs": [], "recall": [], "recall_std": [], "ndcg": []}
        for c in counts:
            if unpaired_fit and c not in (25, 500, len(tr)):
                continue  # its slowest fits; the curve is flat (the unpaired pairs dominate)
            reps = n_repeats if c <= 200 and not unpaired_fit else 1
            rec, nd = [], []
            for _ in range(reps):
                pick = tr if c == len(tr) else rng.choice(tr, c, replace=False)
                est, _ = fit(clone(proto), X[pick], Y[pick], unpaired)
                index, queries = translate(est, X[ev], Yev, "document", None)
                r = _retention(truth, _ranked(queries, index, k), k)
                rec.append(float(r[0].mean()))
                nd.append(float(r[1].mean()))
            pts["n_pairs"].append(int(c))
            pts["recall"].append(float(np.mean(rec)))
            pts["recall_std"].append(float(np.std(rec)))
            pts["ndcg"].append(float(np.mean(nd)))
        curve[cand.name] = pts
    return curve, n_eval


def oracle_fits(X, Y):
    """The ceiling's oracles, fitted on all pairs: ``((name, in-sample translation), ...)`` for
    a ridge map (alpha by leave-one-out) and centred Procrustes."""
    from .._affine.linear import LinearAligner
    from .._affine.procrustes import ProcrustesAligner

    out = []
    for name in ("linear", "procrustes"):
        est = (LinearAligner(alphas=np.logspace(-4, 6, 11)) if name == "linear" else
               ProcrustesAligner()).fit(X, Y)
        out.append((name, est.transform(X)))
    return tuple(out)


def fit(est, X, Y, unpaired):
    """``est`` fitted on the pairs (and ``unpaired`` when it learns from them), its warnings
    silenced; returns ``(est, seconds)``."""
    import inspect
    import warnings

    kwargs = {"unpaired": unpaired} if unpaired is not None and "unpaired" in \
        inspect.signature(est.fit).parameters else {}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(X, Y, **kwargs)
    return est, time.perf_counter() - t0


def reverse_pool(unpaired):
    """The unpaired samples with their sides swapped (for a fit new -> old)."""
    from ..base import UnpairedPool

    return None if unpaired is None else UnpairedPool(X=unpaired.y, y=unpaired.X)


def fit_both_ways(proto, X, Y, pool, sides, reverse_proto=None, inverse=False):
    """Fit ``proto`` old -> new, and ``reverse_proto`` (default: ``proto``) new -> old too when
    queries are to be bridged and the fit has no exact ``inverse``. Returns ``(est, reverse or
    None, seconds, how queries are mapped)``."""
    from sklearn.base import clone

    est, secs = fit(clone(proto), X, Y, pool)
    reverse = None
    if "query" in sides and not inverse:
        reverse, s = fit(clone(proto if reverse_proto is None else reverse_proto), Y, X,
                         reverse_pool(pool))
        secs += s
    how = ("queries mapped back by inverse_transform (translate --direction inverse)"
           if reverse is None else
           "queries mapped by a map fitted new -> old (fit with --source/--target swapped)")
    return est, reverse, secs, how


def fixed_penalty(cand, X, Y, unpaired):
    """``cand``'s estimator with the ridge penalty it chooses on all pairs fixed, for the folds'
    refits.

    The penalty search (5-fold recall@10 retention over nine penalties) is the slow part of a
    ridge fit; each fold refitting it would repeat that choice on 4/5 of the same pairs. The
    model the plan recommends chooses it the same way on all pairs.
    """
    from sklearn.base import clone

    proto = cand.proto
    if getattr(proto, "alpha", None) != "auto" or cand.learns:
        return proto
    est, _ = fit(clone(proto), X, Y, unpaired)
    return clone(proto).set_params(alpha=float(est.alpha_))


def translate(est, Xte, Yte, side, reverse):
    """(translated_index, translated_queries) rows for the held-out items of one fold."""
    if side == "document":
        index = est.transform(Xte)
        queries = est.transform_target(Yte) if hasattr(est, "transform_target") else Yte
        return index, queries
    if reverse is not None:
        return Xte, reverse.transform(Yte)
    return Xte, est.inverse_transform(Yte)


def pseudo_store(X, Y, unpaired, free_p, free_q, proto, block=1024):
    """Pairs discovered in the unpaired samples, to serve as a large evaluation store.

    The reference map is the bootstrap candidate fitted on all known pairs plus the unpaired
    samples; a source row ``p`` and a target row ``q`` form a pseudo-pair when each is the
    other's nearest neighbour (cosine) under it. Rows duplicating a known pair (cosine > 0.9999
    to one of its rows) are left out, so nothing a candidate is fitted on is evaluated.

    ``free_p`` and ``free_q`` mark the sample rows that are not known pairs; ``proto`` is the
    bootstrap candidate, unfitted.

    Returns
    -------
    store : dict
        ``{"source": rows of unpaired.X, "target": rows of unpaired.y, "certificate": float,
        "fit_seconds": float}``.
    """
    from sklearn.base import clone

    P, Q = unpaired.X, unpaired.y
    ref, secs = fit(clone(proto), X, Y, unpaired)
    TP = unit(np.asarray(ref.transform(P), dtype=np.float32))
    Qn = unit(Q)
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


def duplicates(A, B, block=1024):
    """Rows of ``A`` that repeat a row of ``B`` (cosine above 0.9999)."""
    Bn = unit(B)
    return np.concatenate([(unit(A[i:i + block]) @ Bn.T).max(axis=1) > 0.9999
                           for i in range(0, len(A), block)]) if len(B) else \
        np.zeros(len(A), bool)
