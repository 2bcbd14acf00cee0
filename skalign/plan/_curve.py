"""The budget curve and the ceiling of :mod:`skalign.plan`.

The budget curve scores each method fitted on growing subsets of the pairs on a held-out fifth
of them, carried to the store size like every estimate; the ceiling is an oracle fit scored in
sample (see the module docstring of :mod:`skalign.plan`).
"""

from __future__ import annotations

import numpy as np

from ._candidates import _fit, _sides, _uses_unpaired, make_candidate
from ._estimate import _estimate

#: pair counts of the learning curve (those below the training part's size are used)
CURVE_COUNTS = (25, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)


def _learning_curve(methods, X, Y, unpaired, k, n_repeats, random_state):
    """``{method: {"n_pairs", "recall", "recall_std", "ndcg"}}`` on the held-out store, and
    its size (:func:`scale_curves` carries them to the store size)."""
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


def scale_curves(curves, estimates):
    """Carry each method's learning curve to the store size of its document-side estimate.

    The curve's shape over the number of pairs is measured on the held-out fifth; it is scaled
    so that its last point (fitted on as many pairs as the cross-fitted estimate's folds) equals
    that estimate, so that the budget curve and the estimates tell one story.
    """
    for name, pts in curves.items():
        doc = next((e for e in estimates if e.method == name and e.side == "document"), None)
        if doc is None or not pts["recall"]:
            continue
        f = doc.recall / max(pts["recall"][-1], 1e-9)
        pts["recall_std"] = [v * f for v in pts["recall_std"]]
        for key, value in (("recall", doc.recall), ("ndcg", doc.ndcg)):
            f = value / max(pts[key][-1], 1e-9)
            pts[key] = [min(v * f, 1.0) for v in pts[key]]
    return curves


def _ceiling(X, Y, k, store_size, n_resamples, confidence, random_state):
    from .._affine.linear import LinearAligner

    rng = np.random.default_rng([random_state, 2])
    best = None
    for name in ("linear", "procrustes"):
        est = (LinearAligner(alphas=np.logspace(-4, 6, 11)) if name == "linear" else
               make_candidate(name, len(X), 0)).fit(X, Y)
        e = _estimate(name, "document", Y, est.transform(X), Y, k, store_size, n_resamples,
                      confidence, rng, 0.0, "")
        if best is None or e.recall > best.recall:
            best = e
    return {"method": best.method, "recall": best.recall, "recall_ci": best.recall_ci,
            "ndcg": best.ndcg, "extrapolated": best.extrapolated,
            "how": "oracle: the best of ridge (LOO alpha) and centred Procrustes fitted on all "
                   "pairs and scored on the same pairs (in sample)"}
