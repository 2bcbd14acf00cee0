"""InverseRelativeProjector on real sentence-encoder embeddings: top-1 by pruning threshold δ.

For each encoder pair, anchor count and random split, 2,000 held-out pairs are drawn, then the
anchors from the other rows. IRP is fitted on the anchors at every δ with the GCV ridge
(``alpha="gcv"``) and, for reference, with the plain pseudo-inverse (``alpha=0``, the decode of
skalign ≤ 0.x); its defaults (``InverseRelativeProjector(random_state=seed)``) are a column of
their own. Orthogonal Procrustes is the reference: both spaces centred with the anchors' means,
rows unit-normalised, ``W = UVᵀ`` from the SVD of ``XᵀY`` (semi-orthogonal across widths).

Top-1: the translated held-out row's nearest held-out target by cosine, both sides centred with
the anchors' target mean, is its own pair (chance 1/2,000). Cells are mean (min–max) over splits.

    python benchmarks/bench_irp_real.py ../shared/data/docstrings_en.npz
    python benchmarks/bench_irp_real.py PATH.npz --anchors 1000 --pairs minilm_l6:mpnet_base

``--csv PATH`` also writes the table of means that ``doc/user_guide/irp.rst`` shows (one row per
pair and anchor count, 3 decimals) and, next to it, ``PATH`` with ``_figures`` before the suffix:
the figures the guide's prose quotes, one ``key,value`` per line (see ``summary``).
"""

import argparse
import csv
import os
import time
import warnings

import numpy as np
import torch
from _common import write_figures
from _real import centred_top1, split

from skalign import InverseRelativeProjector
from skalign.datasets import load_docstring_embeddings
from skalign.metrics import top_k_accuracy

PAIRS = ["minilm_l6:mpnet_base", "minilm_l6:me5_small_q4", "mpnet_base:me5_small_q4",
         "mpnet_base:minilm_l6"]


def procrustes(AX, AY, X):
    """Centre with the anchors' means, unit-normalise rows, ``W = UVᵀ``; returns centred output."""
    mx, my = AX.mean(0), AY.mean(0)

    def unit(A):
        return A / np.linalg.norm(A, axis=1, keepdims=True)

    U, _, Vt = np.linalg.svd(unit(AX - mx).T @ unit(AY - my), full_matrices=False)
    return unit(X - mx) @ U @ Vt


def evaluate(E, pair, n_anchors, seed, deltas, n_heldout=2000):
    src, tgt = pair.split(":")
    X, Y = E[src].astype(np.float64), E[tgt].astype(np.float64)
    test, train = split(len(X), n_heldout, seed)
    AX, AY = X[train[:n_anchors]], Y[train[:n_anchors]]
    my = AY.mean(0)
    out = {"procrustes": top_k_accuracy(Y[test] - my, procrustes(AX, AY, X[test]))}
    fits = [("default", {})]
    fits += [((alpha, delta), {"pruning_threshold": delta, "alpha": alpha})
             for alpha in ("gcv", 0.0) for delta in deltas]
    for key, params in fits:
        irp = InverseRelativeProjector(random_state=seed, **params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            irp.fit(AX, AY)
        out[key] = centred_top1(Y[test], irp.transform(X[test]), my)
    return out


def cell(values):
    values = np.asarray(values)
    return f"{values.mean():.3f} ({values.min():.3f}–{values.max():.3f})"


NAMES = {"minilm_l6": "MiniLM", "mpnet_base": "MPNet", "me5_small_q4": "e5"}


def table_rows(rows, deltas):
    """The guide's table: pair, anchors, Procrustes, defaults, GCV δ columns, pinv δ columns."""
    head = ["pair", "anchors", "Procrustes", "defaults"]
    head += [f"δ={d:g}" for d in deltas] + [f"α=0, δ={d:g}" for d in deltas]
    out = [head]
    for pair, k, res, _ in rows:
        src, tgt = pair.split(":")
        cells = [res["procrustes"], res["default"]] + [res[("gcv", d)] for d in deltas]
        cells += [res[(0.0, d)] for d in deltas]
        out.append([f"{NAMES.get(src, src)} → {NAMES.get(tgt, tgt)}", k]
                   + [f"{np.mean(c):.3f}" for c in cells])
    return out


def summary(rows, deltas, splits):
    """The figures the guide's prose quotes, computed from the same runs as the table."""
    def gap(pairs):
        g = [np.mean(res["procrustes"]) - np.mean(res["default"])
             for pair, _, res, _ in rows if pair in pairs]
        return (min(g), max(g)) if g else (float("nan"), float("nan"))

    english = {"minilm_l6:mpnet_base", "mpnet_base:minilm_l6"}
    e5 = {pair for pair, *_ in rows if "me5" in pair.split(":")[1]}
    spread = max(max(np.max(v) - np.mean(v), np.mean(v) - np.min(v))
                 for _, _, res, _ in rows for v in res.values())
    below_best = max(1 - np.mean(res["default"]) / best for _, _, res, best in rows)
    low = [d for d in deltas if d <= 0.5]
    spread_low = max(1 - min(np.mean(res[("gcv", d)]) for d in low) / best
                     for _, _, res, best in rows)
    loss_08 = [1 - np.mean(res[("gcv", 0.8)]) / best for _, _, res, best in rows] \
        if 0.8 in deltas else [float("nan")]
    cells = {}
    for pair, k, res, _ in rows:
        src, tgt = (NAMES.get(e, e) for e in pair.split(":"))
        cells[f"{src}_{tgt}_{k}_procrustes"] = np.mean(res["procrustes"])
        cells[f"{src}_{tgt}_{k}_defaults"] = np.mean(res["default"])
        for alpha, name in (("gcv", "gcv"), (0.0, "pinv")):
            for d in deltas:
                cells[f"{src}_{tgt}_{k}_{name}_d{d:g}".replace(".", "")] = np.mean(res[(alpha, d)])
    return {
        **cells,
        "splits": splits,
        "rows": len(rows),
        "procrustes_wins": sum(np.mean(r["procrustes"]) > np.mean(r["default"])
                               for _, _, r, _ in rows),
        "max_spread": spread,
        "defaults_below_best_delta_pct": 100 * below_best,
        "delta_0_to_05_within_pct": 100 * spread_low,
        "delta_08_loss_min_pct": 100 * min(loss_08),
        "delta_08_loss_max_pct": 100 * max(loss_08),
        "gap_english_min": gap(english)[0],
        "gap_english_max": gap(english)[1],
        "gap_e5_min": gap(e5)[0],
        "gap_e5_max": gap(e5)[1],
    }


def write_csv(path, rows, deltas, splits):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(table_rows(rows, deltas))
    root, ext = os.path.splitext(path)
    write_figures(f"{root}_figures{ext}",
                  ((k, repr(float(v))) for k, v in summary(rows, deltas, splits).items()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=None,
                        help="docstrings_en.npz (default: the vendored 1,350-row subset)")
    parser.add_argument("--pairs", nargs="+", default=PAIRS, help="source:target encoder keys")
    parser.add_argument("--anchors", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--deltas", type=float, nargs="+", default=[0.0, 0.3, 0.5, 0.8, 0.9])
    parser.add_argument("--heldout", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--csv", default=None,
                        help="write the guide's table here and its prose figures beside it")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    E = load_docstring_embeddings(args.path).embeddings
    pairs = [p for p in args.pairs if all(k in E for k in p.split(":"))]
    heldout = min(args.heldout, min(len(v) for v in E.values()) // 2)
    defaults = InverseRelativeProjector().get_params()
    print(f"IRP defaults: pruning_threshold={defaults['pruning_threshold']}, "
          f"n_subspaces={defaults['n_subspaces']}, alpha={defaults['alpha']!r}; "
          f"{args.splits} splits, {heldout} held-out pairs; top-1 mean (min–max)")
    rows = []
    for pair in pairs:
        for k in args.anchors:
            t0 = time.perf_counter()
            runs = [evaluate(E, pair, k, seed, args.deltas, heldout) for seed in range(args.splits)]
            res = {key: [r[key] for r in runs] for key in runs[0]}
            best = max(np.mean(res[("gcv", d)]) for d in args.deltas)
            rows.append((pair, k, res, best))
            print(f"\n{pair.replace(':', ' → ')}, {k} anchors ({time.perf_counter() - t0:.0f} s)")
            print(f"  {'Procrustes':<22}{cell(res['procrustes'])}")
            print(f"  {'IRP defaults':<22}{cell(res['default'])}   "
                  f"{np.mean(res['default']) / best:.3f} × best δ")
            for alpha, name in (("gcv", "alpha='gcv'"), (0.0, "alpha=0 (pinv)")):
                for d in args.deltas:
                    mean = np.mean(res[(alpha, d)])
                    print(f"  {name + f', δ={d}':<22}{cell(res[(alpha, d)])}   "
                          f"{mean / best:.3f} × best δ", flush=True)
    if args.csv:
        write_csv(args.csv, rows, args.deltas, args.splits)
    return rows


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
