"""The retention estimate of :mod:`skalign.plan`: mean, confidence interval, store size.

Per-query recall@k and nDCG@k of one method on one side, their percentile-bootstrap interval,
and the chance-corrected carry to another store size (see the module docstring of
:mod:`skalign.plan`).
"""

from __future__ import annotations

import numpy as np

from ._plan_result import Estimate


def _retention_by_size(Y, folds, k, rng):
    """(store size, mean recall, mean nDCG) on random sub-stores of every held-out fold."""
    from .metrics import retrieval_retention

    m_full = min(len(test) for test, _, _ in folds)
    sizes = sorted({m for m in (m_full // 4, m_full // 2, m_full) if m >= 2 * k + 2} | {m_full})
    rows = []
    for m in sizes:
        rec, nd = [], []
        for test, index, queries in folds:
            pick = rng.choice(len(test), m, replace=False)
            r = retrieval_retention(Y[test][pick], index[pick], Y[test][pick], queries[pick],
                                    k=k, exclude_self=True)
            rec.append(r["recall"])
            nd.append(r["ndcg"])
        rows.append((m, float(np.mean(rec)), float(np.mean(nd))))
    return rows


def _percentile_ci(values, n_resamples, confidence, rng):
    n = len(values)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, 256):
        stop = min(start + 256, n_resamples)
        means[start:stop] = values[rng.integers(0, n, (stop - start, n))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def _estimate(name, side, Y, folds, k, store_size, n_resamples, confidence, rng, fit_seconds,
              how):
    from .metrics import retrieval_retention

    rec, nd = [], []
    for test, index, queries in folds:
        per = retrieval_retention(Y[test], index, Y[test], queries, k=k, exclude_self=True,
                                  per_query=True)
        rec.append(per["recall"])
        nd.append(per["ndcg"])
    rec, nd = np.concatenate(rec), np.concatenate(nd)
    recall, ndcg = float(rec.mean()), float(nd.mean())
    rci = _percentile_ci(rec, n_resamples, confidence, rng)
    nci = _percentile_ci(nd, n_resamples, confidence, rng)
    fold_store = int(np.mean([len(test) for test, _, _ in folds]))
    shift = [0.0, 0.0]
    if store_size != fold_store:
        # chance-corrected retention rho = (r - c) / (1 - c), c = k / (m - 1) what a random map
        # keeps in a store of m, fitted by a line in log m and carried to store_size
        rows = _retention_by_size(Y, folds, k, rng)

        def chance(m):
            return min(k / (m - 1), 1.0)

        for col, value in ((1, recall), (2, ndcg)):
            rho = [(r[col] - chance(r[0])) / (1 - chance(r[0])) for r in rows]
            slope = np.polyfit(np.log([r[0] for r in rows]), rho, 1)[0] if len(rows) > 1 \
                else 0.0
            rho_target = rho[-1] + min(slope, 0.0) * (np.log(store_size) - np.log(rows[-1][0]))
            c = chance(store_size)
            shift[col - 1] = c + (1 - c) * rho_target - value

    def clip(v, d):
        return float(min(max(v + d, 0.0), 1.0))

    return Estimate(name, side, how, clip(recall, shift[0]),
                    (clip(rci[0], shift[0]), clip(rci[1], shift[0])), clip(ndcg, shift[1]),
                    (clip(nci[0], shift[1]), clip(nci[1], shift[1])), int(store_size),
                    bool(store_size != fold_store), float(fit_seconds))
