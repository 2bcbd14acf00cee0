"""The learning curve and the ceiling of :mod:`skalign.plan`.

The learning curve scores each method fitted on growing subsets of the pairs on a held-out
fifth; the ceiling is an oracle fit scored in sample (see the module docstring of
:mod:`skalign.plan`).
"""

from __future__ import annotations

import numpy as np

from ._plan_candidates import _fit, _sides, _uses_unpaired, make_candidate
from ._plan_estimate import _estimate

#: pair counts of the learning curve (those below the training part's size are used)
CURVE_COUNTS = (25, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)


def _learning_curve(methods, X, Y, unpaired, k, n_repeats, random_state, rng):
    from sklearn.base import clone

    from .metrics import retrieval_retention

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
        unpaired_fit = _uses_unpaired(proto)
        pts = {"n_pairs": [], "recall": [], "recall_std": [], "ndcg": []}
        for c in counts:
            if unpaired_fit and c not in (25, 500, len(tr)):
                continue  # its slowest fits; the curve is flat (the unpaired pairs dominate)
            reps = n_repeats if c <= 200 and not unpaired_fit else 1
            rec, nd = [], []
            for _ in range(reps):
                pick = tr if c == len(tr) else rng.choice(tr, c, replace=False)
                est, _ = _fit(clone(proto), X[pick], Y[pick], unpaired)
                index, queries = _sides(est, X[ev], Y[ev], "document", None)
                r = retrieval_retention(Y[ev], index, Y[ev], queries, k=k, exclude_self=True)
                rec.append(r["recall"])
                nd.append(r["ndcg"])
            pts["n_pairs"].append(int(c))
            pts["recall"].append(float(np.mean(rec)))
            pts["recall_std"].append(float(np.std(rec)))
            pts["ndcg"].append(float(np.mean(nd)))
        curve[name] = pts
    return curve, n_eval


def _ceiling(X, Y, k, store_size, n_resamples, confidence, rng):
    best = None
    from ._linear import LinearAligner

    for name in ("linear", "procrustes"):
        est = (LinearAligner(alphas=np.logspace(-4, 6, 11)) if name == "linear" else
               make_candidate(name, len(X), 0)).fit(X, Y)
        fold = [(np.arange(len(X)), est.transform(X), Y)]
        e = _estimate(name, "document", Y, fold, k, store_size, n_resamples, confidence, rng,
                      0.0, "")
        if best is None or e.recall > best.recall:
            best = e
    return {"method": best.method, "recall": best.recall, "recall_ci": best.recall_ci,
            "ndcg": best.ndcg, "extrapolated": best.extrapolated,
            "how": "oracle: the best of ridge (LOO alpha) and centred Procrustes fitted on all "
                   "pairs and scored on the same pairs (in sample)"}
