"""What ``AnchorBootstrapper(map_rounds=...)`` changes on real encoders, with few seed pairs.

``python benchmarks/bootstrap_map_rounds.py [NPZ] [--seeds 25] [--rounds 0 2] [--csv OUT]
[--summary-csv OUT]``

Data: ``../shared/data/docstrings_en.npz``, every ordered pair of its three encoders, split as
``benchmarks/bench_migrate_peers.py`` splits it (one seeded permutation: a plan half of 2,000
texts whose first ``--seeds`` are the known pairs and whose old-encoder vectors and shuffled
new-encoder vectors are the unpaired pools; the other 2,000 texts are the held-out store; rows
L2-normalised). The estimator is :mod:`skalign.plan`'s bootstrap candidate (a ridge map whose
penalty is chosen by recall@10 retention, fitted on every mutual pair) with each number of map
rounds. Printed per fit: discovered pairs, the share that are the true ones (the texts are known
here), the certificate, recall@10 retention and top-1 on the held-out store, fit seconds.
``--csv`` writes every row; ``--summary-csv`` writes the ranges the user guide quotes
(``benchmarks/results/bootstrap_map_rounds_summary.csv``). Run with ``OMP_NUM_THREADS=1`` on a
shared machine.
"""

import argparse
import csv
import itertools
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import write_figures

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_migrate_peers import DEFAULT_NPZ, ENCODERS, measure, unit  # noqa: E402

from skalign import UnpairedPool  # noqa: E402
from skalign.plan import make_candidate  # noqa: E402

FIELDS = ["source", "target", "seeds", "map_rounds", "pairs", "right", "certificate", "recall",
          "top1", "fit_s"]


def run(E, src, tgt, seeds, rounds, seed=0):
    X, Y = E[src], E[tgt]
    perm = np.random.default_rng(seed).permutation(len(X))
    half, store = perm[:2000], perm[2000:4000]
    shuffled = np.random.default_rng(seed + 1).permutation(half)
    pool = UnpairedPool(X=unit(X[half]), y=unit(Y[shuffled]))
    Xp, Yp = unit(X[half[:seeds]]), unit(Y[half[:seeds]])
    est = make_candidate("bootstrap", seeds, seed).set_params(map_rounds=rounds)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(Xp, Yp, unpaired=pool)
    secs = time.perf_counter() - t0
    src_rows, tgt_rows = est.anchor_pairs_.T
    recall, _, top1, _ = measure("document", est.transform, unit(X[store]), unit(Y[store]))
    return dict(source=src, target=tgt, seeds=seeds, map_rounds=rounds, pairs=len(src_rows),
                right=float(np.mean(half[src_rows] == shuffled[tgt_rows])),
                certificate=float(est.certificate_), recall=recall, top1=top1, fit_s=secs)


def summary(rows):
    """Ranges over encoder pairs: pairs found, right share, recall gain of the most rounds."""
    lo, hi = min(r["map_rounds"] for r in rows), max(r["map_rounds"] for r in rows)
    by = {(r["source"], r["target"], r["map_rounds"]): r for r in rows}
    keys = sorted({(r["source"], r["target"]) for r in rows})
    e5 = [k for k in keys if "me5_small_q4" in k]
    other = [k for k in keys if k not in e5]
    out = {"encoder_pairs": len(keys), "rounds_before": lo, "rounds_after": hi}
    for tag, ks in (("e5", e5), ("minilm_mpnet", other)):
        if not ks:
            continue
        gain = [by[k + (hi,)]["recall"] - by[k + (lo,)]["recall"] for k in ks]
        out.update({f"{tag}_recall_gain_min": min(gain), f"{tag}_recall_gain_max": max(gain)})
        for when, r in (("before", lo), ("after", hi)):
            out[f"{tag}_pairs_{when}_min"] = min(by[k + (r,)]["pairs"] for k in ks)
            out[f"{tag}_pairs_{when}_max"] = max(by[k + (r,)]["pairs"] for k in ks)
            out[f"{tag}_right_{when}_min"] = min(by[k + (r,)]["right"] for k in ks)
            out[f"{tag}_right_{when}_max"] = max(by[k + (r,)]["right"] for k in ks)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--seeds", type=int, default=25)
    p.add_argument("--rounds", type=int, nargs="+", default=[0, 2])
    p.add_argument("--csv", default=None)
    p.add_argument("--summary-csv", default=None)
    args = p.parse_args(argv)
    Z = np.load(args.npz)
    E = {k: Z[k].astype(np.float32) for k in ENCODERS}
    rows = []
    print("  ".join(FIELDS))
    for (src, tgt), r in itertools.product(itertools.permutations(ENCODERS, 2), args.rounds):
        rows.append(run(E, src, tgt, args.seeds, r))
        print("  ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                        for v in rows[-1].values()), flush=True)
    figures = summary(rows)
    for k, v in figures.items():
        print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
    if args.summary_csv:
        write_figures(args.summary_csv, figures)


if __name__ == "__main__":
    main()
