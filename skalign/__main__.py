"""``python -m skalign``: the end-to-end demo on real digit embeddings.

Trains (or loads from the cache) small torch encoders on scikit-learn's digits, fits every aligner
on anchor pairs from the training split and reports, on held-out digits, how well encoder A's
embeddings translated into encoder B's space match B's own embeddings and how much of a classifier
trained on B they recover.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from .datasets import load_digits_embeddings
from .metrics import mean_reciprocal_rank, top_k_accuracy


def demo_aligners():
    """The estimators the demo compares: name → unfitted estimator."""
    from . import LinearAligner, ProcrustesAligner

    return {
        "Procrustes": ProcrustesAligner(scale=True),
        "Linear (ridge 1e-2)": LinearAligner(alpha=1e-2),
    }


def run_demo(source="mlp-a", target="mlp-b", n_anchors=300, seed=0, out=print):
    """Fit each demo aligner on ``n_anchors`` training pairs; return a list of result rows."""
    data = load_digits_embeddings()
    A, B, labels = data.embeddings[source], data.embeddings[target], data.target
    rng = np.random.default_rng(seed)
    anchors = rng.choice(data.train_index, size=n_anchors, replace=False)
    test = data.test_index
    clf = LogisticRegression(max_iter=3000).fit(B[data.train_index], labels[data.train_index])
    rows = [("B's own embeddings", np.nan, np.nan, np.nan, clf.score(B[test], labels[test]), 0.0)]
    if A.shape[1] == B.shape[1]:
        rows.append(("no alignment (raw A)", np.nan, np.nan, np.nan, clf.score(A[test], labels[test]), 0.0))
    for name, est in demo_aligners().items():
        t0 = time.perf_counter()
        est = clone(est).fit(A[anchors], B[anchors])
        fit_s = time.perf_counter() - t0
        B_hat = est.transform(A[test])
        rows.append((
            name,
            est.score(A[test], B[test]),
            top_k_accuracy(B[test], B_hat),
            mean_reciprocal_rank(B[test], B_hat),
            clf.score(B_hat, labels[test]),
            fit_s,
        ))
    out(f"skalign demo: {source} -> {target} on scikit-learn digits "
        f"({n_anchors} anchor pairs, {len(test)} held-out digits)")
    out(f"{'method':<24}{'cosine':>8}{'top-1':>8}{'MRR':>8}{'stitched acc':>14}{'fit s':>8}")
    for name, cos, top1, mrr, acc, secs in rows:
        def f(v):
            return f"{v:8.3f}" if np.isfinite(v) else f"{'-':>8}"
        out(f"{name:<24}{f(cos)}{f(top1)}{f(mrr)}{acc:14.3f}{secs:8.3f}")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m skalign", description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="mlp-a")
    parser.add_argument("--target", default="mlp-b")
    parser.add_argument("--anchors", type=int, default=300)
    args = parser.parse_args(argv)
    run_demo(args.source, args.target, args.anchors)


if __name__ == "__main__":
    main()
