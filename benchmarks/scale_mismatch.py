"""Raw against unit-norm encoders: what ``normalize`` does to a translated store, on real data.

    python benchmarks/scale_mismatch.py [PATH.npz] [--n-pairs 2000] [--n-test 2000] [--seeds 3]

``PATH.npz`` is the development set ``../shared/data/docstrings_en.npz``: ``minilm_l6`` and
``mpnet_base`` are raw mean-pooled vectors (row norms 2.2-8.1 and 2.3-3.3), ``me5_small_q4`` is
unit-norm. Without it, the subset vendored with skalign is used, and the unit-norm target is
MPNet with its rows L2-normalised (what all-mpnet-base-v2 returns with its Normalize module).

For each encoder pair and random split, ``--n-test`` rows are held out and ``--n-pairs`` of the
others are the anchor pairs. :class:`ProcrustesAligner` and :class:`LinearAligner` are fitted
four ways: ``normalize=False`` (skalign before the parameter existed), ``normalize=False`` on
L2-normalised source rows (the user's manual fix, the reference of the target "≥ 0.95x"),
with defaults (``normalize="auto"``; the ``normalize_`` column is what it chose), and with
``normalize=True`` (both sides normalised, the target's scale restored). The held-out
source rows are translated into a store that is compared with the re-embedded store (the true
target vectors of the same held-out texts):

* **top-1**: the translated row's nearest re-embedded row by cosine is its own text;
* **R@10**: neighbourhood retention. Each re-embedded held-out row is a query; its 10 nearest
  rows in the translated store are compared with its 10 nearest in the re-embedded store
  (the query itself included in both), and the overlap / 10 is averaged. ``cos`` ranks by
  cosine similarity, ``L2`` by Euclidean distance (what an index without normalisation uses).

Mean over ``--seeds`` splits.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from skalign import LinearAligner, ProcrustesAligner
from skalign.datasets import load_docstring_embeddings
from skalign.exceptions import ScaleMismatchWarning


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def top_k(Q, D, k, metric):
    """Indices of the ``k`` nearest rows of ``D`` for each row of ``Q``."""
    if metric == "cos":
        S = unit(Q) @ unit(D).T
    else:  # negative squared Euclidean distance
        S = 2 * Q @ D.T - (D * D).sum(1)[None]
    return np.argpartition(-S, k, axis=1)[:, :k]


def retention(queries, translated, reembedded, k=10, metric="cos"):
    """Mean overlap of each query's top-``k`` in the translated and the re-embedded store."""
    a, b = top_k(queries, translated, k, metric), top_k(queries, reembedded, k, metric)
    return float(np.mean([len(np.intersect1d(x, y)) / k for x, y in zip(a, b)]))


def top1(reembedded, translated):
    S = unit(translated) @ unit(reembedded).T
    return float(np.mean(S.argmax(1) == np.arange(len(S))))


SETTINGS = {
    "normalize=False": (False, {"normalize": False}),
    "L2-normalised source": (True, {"normalize": False}),
    "defaults (auto)": (False, {}),
    "normalize=True": (False, {"normalize": True}),
}


def evaluate(make, X, Y, test, pairs, setting):
    norm_source, params = SETTINGS[setting]
    f = unit if norm_source else (lambda A: A)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScaleMismatchWarning)
        est = make(**params).fit(f(X[pairs]), Y[pairs])
    P, T = est.transform(f(X[test])), Y[test]
    return est.normalize_, (top1(T, P), retention(T, P, T, metric="cos"),
                            retention(T, P, T, metric="l2"))


def run(emb, encoder_pairs, n_pairs, n_test, seeds, log=print):
    rows = []
    for src, tgt in encoder_pairs:
        X, Y = emb[src], emb[tgt]
        for name, make in (("Procrustes", ProcrustesAligner), ("Linear", LinearAligner)):
            for setting in SETTINGS:
                scores, chosen = [], set()
                for seed in seeds:
                    perm = np.random.default_rng(seed).permutation(len(X))
                    test, pairs = perm[:n_test], perm[n_test:n_test + n_pairs]
                    sides, s = evaluate(make, X, Y, test, pairs, setting)
                    chosen.add(sides)
                    scores.append(s)
                t1, rc, rl = np.mean(scores, axis=0)
                row = {"pair": f"{src}->{tgt}", "estimator": name, "setting": setting,
                       "normalize_": "/".join(sorted(chosen)), "top1": t1, "r10_cos": rc,
                       "r10_l2": rl}
                rows.append(row)
                log(f"{row['pair']:26s} {name:10s} {setting:21s} {row['normalize_']:7s} "
                    f"{t1:.3f} {rc:.3f} {rl:.3f}")
    return rows


def format_table(rows):
    head = (f"{'encoders':26s} {'estimator':10s} {'fit':21s} {'normalize_':10s} {'top-1':>6s} "
            f"{'R@10 cos':>8s} {'R@10 L2':>8s}  {'auto / L2-normalised source':>27s}")
    lines = [head, "-" * len(head)]
    ref = {(r["pair"], r["estimator"]): r for r in rows if r["setting"] == "L2-normalised source"}
    for r in rows:
        ratio = ""
        if r["setting"] == "defaults (auto)":
            b = ref[(r["pair"], r["estimator"])]
            ratio = " / ".join(f"{r[k] / b[k]:.3f}" for k in ("top1", "r10_cos", "r10_l2"))
        lines.append(f"{r['pair']:26s} {r['estimator']:10s} {r['setting']:21s} "
                     f"{r['normalize_']:10s} {r['top1']:6.3f} {r['r10_cos']:8.3f} "
                     f"{r['r10_l2']:8.3f}  {ratio:>27s}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", nargs="?", help="docstrings_en.npz (default: the vendored subset)")
    p.add_argument("--n-pairs", type=int, default=None,
                   help="anchor pairs (default 2000, or 1000 on the vendored subset)")
    p.add_argument("--n-test", type=int, default=None,
                   help="held-out rows (default 2000, or 350 on the vendored subset)")
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args(argv)
    emb = dict(load_docstring_embeddings(args.path).embeddings)
    if "me5_small_q4" in emb:
        pairs = [("minilm_l6", "me5_small_q4"), ("mpnet_base", "me5_small_q4"),
                 ("minilm_l6", "mpnet_base"), ("me5_small_q4", "minilm_l6")]
        n_pairs, n_test = args.n_pairs or 2000, args.n_test or 2000
    else:
        emb["mpnet_base_unit"] = unit(emb["mpnet_base"])
        pairs = [("minilm_l6", "mpnet_base_unit"), ("minilm_l6", "mpnet_base")]
        n_pairs, n_test = args.n_pairs or 1000, args.n_test or 350
    rows = run(emb, pairs, n_pairs, n_test, list(range(args.seeds)), log=lambda s: None)
    print(f"{n_pairs} anchor pairs, {n_test} held-out rows, mean over {args.seeds} splits")
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
