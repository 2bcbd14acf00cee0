"""The retention estimates of :mod:`skalign.plan`: mean, interval, carried to the store size.

:func:`_estimate` scores one evaluation store (every item translated by a fit that never saw
it) and carries recall@k and nDCG@k to the user's store size by the law of
:mod:`skalign.plan._law`; :func:`_bridged` derives the query side from the document side and the
two sides measured on the same held-out folds (see the module docstring of :mod:`skalign.plan`).
"""

from __future__ import annotations

import numpy as np

from ._law import chance, project, substore_draws
from ._result import Estimate


def _percentile_ci(values, n_resamples, confidence, rng):
    n = len(values)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, 256):
        stop = min(start + 256, n_resamples)
        means[start:stop] = values[rng.integers(0, n, (stop - start, n))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def _scorer(Y, index, queries, k):
    from ..metrics import retrieval_retention

    def score(idx):
        r = retrieval_retention(Y[idx], index[idx], Y[idx], queries[idx], k=k,
                                exclude_self=True)
        return r["recall"], r["ndcg"]
    return score


def _estimate(name, side, Y, index, queries, k, store_size, n_resamples, confidence, rng,
              fit_seconds, how):
    """Retention on one evaluation store (rows of ``Y``, ``index``, ``queries`` aligned),
    carried to ``store_size``."""
    from ..metrics import retrieval_retention

    per = retrieval_retention(Y, index, Y, queries, k=k, exclude_self=True, per_query=True)
    m = len(Y)
    sizes, draws = substore_draws(_scorer(Y, index, queries, k), m, k, rng)
    out = []
    for col, key in enumerate(("recall", "ndcg")):
        ci = _percentile_ci(per[key], n_resamples, confidence, rng)
        out.append(project(sizes, draws[:, :, col], ci, store_size, k, confidence))
    rec, nd = out
    return Estimate(name, side, how, rec["value"], rec["ci"], nd["value"], nd["ci"],
                    int(store_size), bool(store_size != m), float(fit_seconds),
                    supported=bool(rec["supported"]), measured_size=int(m),
                    measured_recall=float(per["recall"].mean()), slope=float(rec["slope"]))


def _bridged(doc, name, Y, doc_folds, query_folds, k, n_resamples, confidence, rng, fit_seconds,
             how):
    """The query side from the document side ``doc``: both sides are measured on the same
    held-out folds (leak-free, but small); the ratio of their retentions above chance
    multiplies the document side's carried to the store size."""
    from ..metrics import retrieval_retention

    vals = {"document": ([], []), "query": ([], [])}
    sizes = []
    for side, folds in (("document", doc_folds), ("query", query_folds)):
        for test, index, queries in folds:
            per = retrieval_retention(Y[test], index, Y[test], queries, k=k, exclude_self=True,
                                      per_query=True)
            vals[side][0].append(per["recall"])
            vals[side][1].append(per["ndcg"])
            if side == "document":
                sizes.append(len(test))
    c_fold = chance(k, int(np.mean(sizes)))
    c_n = chance(k, doc.store_size)
    n_q = sum(len(v) for v in vals["query"][0])
    boot = rng.integers(0, n_q, (min(n_resamples, 400), n_q))
    result = []
    for col, (value, ci) in enumerate(((doc.recall, doc.recall_ci), (doc.ndcg, doc.ndcg_ci))):
        d = np.concatenate(vals["document"][col])
        q = np.concatenate(vals["query"][col])

        def ratio(dd, qq):
            return max(qq.mean() - c_fold, 1e-3) / max(dd.mean() - c_fold, 1e-3)

        r = ratio(d, q)
        rs = np.array([ratio(d[b], q[b]) for b in boot])
        tail = (1 - confidence) / 2 * 100
        r_lo, r_hi = np.percentile(rs, [tail, 100 - tail])

        def scale(v, f):
            return float(min(max(c_n + (v - c_n) * f, 0.0), 1.0))

        result.append((scale(value, r), (scale(ci[0], r_lo), scale(ci[1], r_hi)),
                       float(q.mean())))
    (rec, rci, measured), (nd, nci, _) = result
    if not doc.supported:
        # folds of a dozen items measure no ratio worth carrying: say only what is known
        rec, rci, nd, nci = doc.recall, (c_n, 1.0), doc.ndcg, (c_n, 1.0)
    return Estimate(name, "query", how, rec, rci, nd, nci, doc.store_size, doc.extrapolated,
                    float(fit_seconds), supported=doc.supported,
                    measured_size=doc.measured_size, measured_recall=measured,
                    slope=doc.slope)
