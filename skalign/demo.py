"""The end-to-end demo on real digit embeddings (``python -m skalign``, ``skalign demo``).

Trains (or loads from the cache) small torch encoders on scikit-learn's digits, fits the
translating aligners on anchor pairs from the training split (300 known pairs, or only 15 plus
the unpaired training embeddings for anchor bootstrapping) and reports, on held-out digits, how
well encoder A's embeddings translated into encoder B's space match B's own embeddings and how
much of a classifier trained on B they recover.
"""

from __future__ import annotations

import argparse
import inspect
import time

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from .datasets import DIGITS_ENCODERS, load_digits_embeddings
from .metrics import mean_reciprocal_rank, top_k_accuracy


def demo_aligners(n_seed=15):
    """The estimators the demo compares: name → (unfitted estimator, known pairs it gets).

    ``None`` known pairs means all the anchors; an int means only that many seed pairs. Estimators
    whose ``fit`` takes ``unpaired`` also get both encoders' training embeddings as an unpaired
    pool.
    """
    from . import AnchorBootstrapper, InverseRelativeProjector, LinearAligner, ProcrustesAligner

    return {
        "Procrustes": (ProcrustesAligner(scale=True), None),
        "Ridge (alpha by LOO-CV)": (LinearAligner(), None),
        "IRP (no training)": (InverseRelativeProjector(random_state=0), None),
        f"Ridge, {n_seed} pairs only": (LinearAligner(), n_seed),
        f"Bootstrap {n_seed} -> Procr.": (AnchorBootstrapper(random_state=0), n_seed),
    }


def run_demo(source="mlp-a", target="mlp-b", n_anchors=300, n_seed=15, seed=0, out=print):
    """Fit each demo aligner on training pairs; return a list of result rows.

    Rows are ``(name, known pairs, cosine, top-1, MRR, stitched accuracy, fit seconds)`` on the
    held-out digits.
    """
    from . import UnpairedPool

    data = load_digits_embeddings()
    A, B, labels = data.embeddings[source], data.embeddings[target], data.target
    train, test = data.train_index, data.test_index
    rng = np.random.default_rng(seed)
    anchors = rng.choice(train, size=n_anchors, replace=False)
    # the unpaired pool: both encoders' training embeddings, the target side shuffled
    pool = UnpairedPool(X=A[train], y=B[rng.permutation(train)])
    clf = LogisticRegression(max_iter=3000).fit(B[train], labels[train])
    nan = np.nan
    rows = [("B's own embeddings", 0, nan, nan, nan, clf.score(B[test], labels[test]), 0.0)]
    if A.shape[1] == B.shape[1]:
        rows.append(("no alignment (raw A)", 0, nan, nan, nan, clf.score(A[test], labels[test]),
                     0.0))
    for name, (est, n_known) in demo_aligners(n_seed).items():
        known = anchors if n_known is None else anchors[:n_known]
        kwargs = {"unpaired": pool} if "unpaired" in inspect.signature(est.fit).parameters else {}
        t0 = time.perf_counter()
        est = clone(est).fit(A[known], B[known], **kwargs)
        fit_s = time.perf_counter() - t0
        B_hat = est.transform(A[test])
        rows.append((
            name,
            len(known),
            est.score(A[test], B[test]),
            top_k_accuracy(B[test], B_hat),
            mean_reciprocal_rank(B[test], B_hat),
            clf.score(B_hat, labels[test]),
            fit_s,
        ))
    out(f"skalign demo: {source} -> {target} on scikit-learn digits "
        f"({len(test)} held-out digits; a classifier trained on {target} is fed {source}'s "
        "embeddings translated into its space)")
    out(f"{'method':<26}{'pairs':>6}{'cosine':>8}{'top-1':>8}{'MRR':>8}{'stitched acc':>14}"
        f"{'fit s':>8}")
    for name, pairs, cos, top1, mrr, acc, secs in rows:
        def f(v):
            return f"{v:8.3f}" if np.isfinite(v) else f"{'-':>8}"
        out(f"{name:<26}{pairs or '-':>6}{f(cos)}{f(top1)}{f(mrr)}{acc:14.3f}{secs:8.2f}")
    return rows


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def demo_main(argv=None):
    """Parse the demo's options and print its table; bad arguments exit 2 with one error line."""
    parser = argparse.ArgumentParser(prog="skalign demo", description=__doc__.splitlines()[0])
    encoders = sorted(DIGITS_ENCODERS)
    parser.add_argument("--source", default="mlp-a", choices=encoders,
                        help="encoder whose embeddings are translated (default: mlp-a)")
    parser.add_argument("--target", default="mlp-b", choices=encoders,
                        help="encoder whose space they are translated into (default: mlp-b)")
    parser.add_argument("--anchors", type=_positive_int, default=300,
                        help="known pairs for the rows that get all of them (default: 300)")
    parser.add_argument("--seed-pairs", type=_positive_int, default=15,
                        help="known pairs for the rows that get only a few (default: 15)")
    args = parser.parse_args(argv)
    if args.seed_pairs > args.anchors:
        parser.error(f"--seed-pairs ({args.seed_pairs}) cannot exceed --anchors ({args.anchors})")
    run_demo(args.source, args.target, args.anchors, args.seed_pairs)
