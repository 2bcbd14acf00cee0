"""AnchorBootstrapper on real sentence encoders: relative MRR@10, exact pairs, translation top-1.

Protocol (per draw of the split): the 4,000 development texts are split at random into a pool of
2,000 and 2,000 held-out texts. 15 pool texts are the known seed pairs; the target pool is the
same 2,000 texts by the target encoder, **shuffled**. ``AnchorBootstrapper(n_anchors=300)`` then
discovers 285 pairs. Reported:

* ``MRR GT / seed / disc``: relative MRR@10 on the held-out texts. Both encoders' held-out
  embeddings are centred on their pool's mean and L2-normalised, their relative representations
  are the cosines to the anchors (L2-normalised), and for each source text the rank of its own
  target among the 2,000 held-out target texts (cosine of relative representations) gives
  ``1 / rank`` (0 beyond 10). Anchors: 300 random pool texts with their true counterparts (GT),
  the 15 seeds only, or seeds + discovered pairs.
* ``exact``: fraction of discovered pairs whose target row is the source's own text.
* ``top-1 inner / Procrustes GT``: held-out translation top-1 (each translated source text's
  nearest held-out target by cosine is its own) through the fitted ``estimator_``, against
  :class:`~skalign.ProcrustesAligner` fitted on the 300 GT anchor pairs.

    python benchmarks/bootstrap_real.py ../shared/data/docstrings_en.npz
    python benchmarks/bootstrap_real.py PATH.npz --target me5_small_q4 --draws 0 1 2
    python benchmarks/bootstrap_real.py PATH.npz --param correspondence=sinkhorn \
        --param n_working_anchors=285

``--csv PATH`` writes the table ``doc/user_guide/bootstrap.rst`` shows (one row per target: the
min–max of each figure over the draws) and, next to it, ``PATH`` with ``_draws`` before the
suffix: every draw's row, and with ``_figures``: the figures the guide's prose quotes, as
``key,value`` lines. ``--table-from DRAWS.csv --csv PATH`` rewrites them from saved draws.
"""

import argparse
import ast
import csv
import os
import time

import numpy as np
import torch
from _common import write_figures

from skalign import (
    AnchorBootstrapper,
    InverseRelativeProjector,
    LinearAligner,
    ProcrustesAligner,
    UnpairedPool,
)
from skalign.datasets import load_docstring_embeddings
from skalign.metrics import top_k_accuracy

INNER = {"procrustes": ProcrustesAligner, "irp": InverseRelativeProjector,
         "linear": LinearAligner}


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def relative_mrr(Xe, Ye, Ax, Ay, mx, my, k=10):
    """MRR@k of each held-out source text's own target, by cosine of relative representations."""
    RX = unit(unit(Xe - mx) @ unit(Ax - mx).T)
    RY = unit(unit(Ye - my) @ unit(Ay - my).T)
    S = RX @ RY.T
    rank = (S > np.diag(S)[:, None]).sum(1) + 1
    return float(np.mean(np.where(rank <= k, 1.0 / rank, 0.0)))


def run_draw(X, Y, draw, params, inner="procrustes", n_pool=2000, n_seed=15, n_anchors=300):
    rng = np.random.default_rng(draw)
    order = rng.permutation(len(X))
    pool, test = order[:n_pool], order[n_pool:]
    perm = rng.permutation(n_pool)                     # target pool row j is pool text perm[j]
    seeds = rng.choice(n_pool, n_seed, replace=False)  # positions in the pool
    gt = np.concatenate([seeds, rng.choice(np.setdiff1d(np.arange(n_pool), seeds),
                                           n_anchors - n_seed, replace=False)])
    Xp, Yp = X[pool], Y[pool]
    params = {"discovery": "rounds", **params}  # the table of the rounds (--param to change)
    boot = AnchorBootstrapper(INNER[inner](), n_anchors=n_anchors, random_state=draw, **params)
    t0 = time.perf_counter()
    boot.fit(Xp[seeds], Yp[seeds], unpaired=UnpairedPool(X=Xp, y=Yp[perm]))
    secs = time.perf_counter() - t0
    src, tgt = boot.anchor_pairs_.T
    mx, my = Xp.mean(0), Yp.mean(0)
    Xe, Ye = X[test], Y[test]
    procrustes_gt = ProcrustesAligner().fit(Xp[gt], Yp[gt])
    return {
        "draw": draw,
        "mrr_gt": relative_mrr(Xe, Ye, Xp[gt], Yp[gt], mx, my),
        "mrr_seed": relative_mrr(Xe, Ye, Xp[seeds], Yp[seeds], mx, my),
        "mrr_disc": relative_mrr(Xe, Ye, boot.source_anchors_, boot.target_anchors_, mx, my),
        "exact": float(np.mean(perm[tgt] == src)) if len(src) else float("nan"),
        "n_disc": len(src),
        "top1_inner": top_k_accuracy(Ye, boot.transform(Xe)),
        "top1_procrustes_gt": top_k_accuracy(Ye, procrustes_gt.transform(Xe)),
        "rounds": boot.n_iter_,
        "seconds": secs,
    }


def parse_param(text):
    key, value = text.split("=", 1)
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass
    return key, value


NAMES = {"mpnet_base": "MiniLM → MPNet", "me5_small_q4": "MiniLM → mE5-small"}


def _span(values, fmt):
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def write_csv(rows, path):
    """The guide's table (ranges over the draws per target) and every draw's row beside it."""
    head = ["target", "MRR GT", "MRR seed", "MRR disc.", "exact pairs", "top-1 (inner)",
            "Procrustes on GT"]
    table = [head]
    for target in dict.fromkeys(r["target"] for r in rows):
        rs = [r for r in rows if r["target"] == target]
        exact = _span([100 * r["exact"] for r in rs], "{:.1f}")
        table.append([NAMES.get(target, target)]
                     + [_span([r[k] for r in rs], "{:.3f}") for k in ("mrr_gt", "mrr_seed",
                                                                       "mrr_disc")]
                     + [f"{exact} %".replace("100.0", "100")]
                     + [_span([r[k] for r in rs], "{:.3f}")
                        for k in ("top1_inner", "top1_procrustes_gt")])
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(table)
    root, ext = os.path.splitext(path)
    with open(f"{root}_draws{ext}", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    figures = {}
    for target in dict.fromkeys(r["target"] for r in rows):
        rs = [r for r in rows if r["target"] == target]
        mrr = [r["mrr_disc"] / r["mrr_gt"] for r in rs]
        top1 = [r["top1_inner"] / r["top1_procrustes_gt"] for r in rs]
        figures.update({f"{target}_mrr_disc_over_gt_min": min(mrr),
                        f"{target}_mrr_disc_over_gt_max": max(mrr),
                        f"{target}_top1_shortfall_max_pct": 100 * (1 - min(top1))})
    write_figures(f"{root}_figures{ext}", ((k, repr(float(v))) for k, v in figures.items()))


def read_draws(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            if k != "target":
                r[k] = int(v) if k in ("draw", "n_disc", "rounds") else float(v)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", help="docstrings_en.npz of the development set")
    parser.add_argument("--source", default="minilm_l6")
    parser.add_argument("--target", nargs="+", default=["mpnet_base", "me5_small_q4"])
    parser.add_argument("--draws", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--inner", choices=sorted(INNER), default="procrustes")
    parser.add_argument("--param", action="append", default=[], type=parse_param,
                        help="AnchorBootstrapper parameter as key=value (repeatable)")
    parser.add_argument("--csv", default=None, help="write the guide's table here (see above)")
    parser.add_argument("--table-from", default=None, metavar="DRAWS.csv",
                        help="with --csv: rewrite the table from saved draws instead of running")
    args = parser.parse_args(argv)
    if args.table_from:
        rows = read_draws(args.table_from)
        write_csv(rows, args.csv)
        return rows
    torch.set_num_threads(1)
    data = load_docstring_embeddings(args.path)
    X = data.embeddings[args.source]
    params = dict(args.param)
    header = (f"{'target':13s} {'draw':>4s} {'MRR GT':>7s} {'seed':>6s} {'disc':>6s} "
              f"{'disc/GT':>7s} {'exact':>6s} {'top-1 inner':>11s} {'Procr. GT':>9s} "
              f"{'ratio':>6s} {'rounds':>6s} {'fit s':>6s}")
    print(f"{args.source} -> {', '.join(args.target)}; inner={args.inner}; params={params}")
    print(header)
    print("-" * len(header))
    rows = []
    for target in args.target:
        Y = data.embeddings[target]
        for draw in args.draws:
            r = run_draw(X, Y, draw, params, inner=args.inner)
            r["target"] = target
            rows.append(r)
            print(f"{target:13s} {draw:4d} {r['mrr_gt']:7.3f} {r['mrr_seed']:6.3f} "
                  f"{r['mrr_disc']:6.3f} {r['mrr_disc'] / r['mrr_gt']:7.3f} {r['exact']:6.3f} "
                  f"{r['top1_inner']:11.3f} {r['top1_procrustes_gt']:9.3f} "
                  f"{r['top1_inner'] / r['top1_procrustes_gt']:6.3f} {r['rounds']:6d} "
                  f"{r['seconds']:6.1f}", flush=True)
    if args.csv:
        write_csv(rows, args.csv)
    return rows


if __name__ == "__main__":
    main()
