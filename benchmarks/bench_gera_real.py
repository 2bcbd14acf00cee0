"""GeRA and the pair-only baselines on real sentence-encoder embeddings: defaults vs tuned.

For each target encoder, number of pairs and random split (``_real.pairs_and_pools``: ``--test``
rows held out, ``n`` known pairs, the rest of the others as unpaired pools, the target side
shuffled): held-out top-1 retrieval, the translated (or shared-space) source row's nearest
held-out target by cosine being its own pair (chance ``1 / test``). Methods that translate into
the target space (ridge, Procrustes) are compared after centring both sides on the target pool's
mean, the information GeRA gets.

    python benchmarks/bench_gera_real.py ../shared/data/docstrings_en.npz
    python benchmarks/bench_gera_real.py PATH.npz --pairs 50 --splits 3 --no-grid   # quick

Rows: GeRA at its defaults (contrastive fine-tuning of a Procrustes start, its epochs chosen on
held-out pairs, ``alpha=0``); GeRA with the geometric term (``alpha=1``); "GeRA best", the best
of a small grid (alpha x temperature x max_iter) *picked on the held-out set* (an oracle, an
upper bound for tuning); GeRA's start (``early_stopping=False, max_iter=1`` at a negligible
learning rate: no training); ridge with the leave-one-out penalty (``LinearAligner()``) and with
the held-out-best penalty (oracle); Procrustes; ASIF with and without centring.

``--csv CELLS.csv`` writes every cell of every split. ``--table-from CELLS.csv --doc-csv PREFIX``
tabulates such a file without rerunning: ``PREFIX_<target>.csv`` per target encoder (the tables of
``doc/user_guide/gera.rst``) and ``PREFIX_figures.csv``, the figures its prose quotes as
``key,value`` lines (see ``doc_figures``).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import time
import warnings

import numpy as np
import torch
from _common import write_figures, write_rows
from _real import centred_top1, pairs_and_pools, read_rows

from skalign import ASIFAligner, GeRAAligner, LinearAligner, ProcrustesAligner
from skalign.datasets import load_docstring_embeddings

GRID = {"alpha": [0.0, 1.0], "temperature": [0.2, 0.5], "max_iter": [10, 20, 40]}
RIDGE_ALPHAS = [1e-2, 1e-1, 1.0, 10.0, 100.0]


def run_cell(A, B, n_pairs, seed, n_test, grid):
    Xp, Yp, Xte, Yte, pool, my = pairs_and_pools(A, B, n_pairs, seed, n_test)
    out = {}

    def gera(**kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = GeRAAligner(random_state=seed, **kw).fit(Xp, Yp, unpaired=pool)
        return est.score(Xte, Yte)

    t0 = time.perf_counter()
    out["GeRA defaults"] = gera()
    out["GeRA fit s"] = time.perf_counter() - t0
    out["GeRA alpha=1"] = gera(alpha=1.0)
    out["GeRA init (Procrustes)"] = gera(early_stopping=False, max_iter=1, learning_rate=1e-12)
    if grid:
        keys = list(grid)
        scores = {vals: gera(**dict(zip(keys, vals))) for vals in itertools.product(*grid.values())}
        best = max(scores, key=scores.get)
        out["GeRA best (oracle)"] = scores[best]
        out["GeRA best setting"] = ", ".join(f"{k}={v}" for k, v in zip(keys, best))
    ridge = LinearAligner().fit(Xp, Yp)
    out["ridge LOO"] = centred_top1(Yte, ridge.transform(Xte), my)
    out["ridge LOO alpha"] = ridge.alpha_
    out["ridge best (oracle)"] = max(centred_top1(
        Yte, LinearAligner(alpha=a).fit(Xp, Yp).transform(Xte), my) for a in RIDGE_ALPHAS)
    out["Procrustes"] = centred_top1(Yte, ProcrustesAligner().fit(Xp, Yp).transform(Xte), my)
    for center in (True, False):
        out[f"ASIF center={center}"] = ASIFAligner(center=center).fit(Xp, Yp).score(Xte, Yte)
    return out


METHODS = ["GeRA defaults", "GeRA alpha=1", "GeRA best (oracle)", "GeRA init (Procrustes)",
           "ridge LOO", "ridge best (oracle)", "Procrustes", "ASIF center=True",
           "ASIF center=False"]


DOC_ROWS = [("GeRA defaults", "GeRA defaults"), ("GeRA ``alpha=1``", "GeRA alpha=1"),
            ("GeRA best (oracle)", "GeRA best (oracle)"),
            ("GeRA's start (Procrustes init)", "GeRA init (Procrustes)"),
            ("ridge (LOO)", "ridge LOO"), ("ridge (oracle α)", "ridge best (oracle)"),
            ("Procrustes", "Procrustes"), ("ASIF defaults", "ASIF center=True")]


def _values(rows, target, n, method):
    return np.array([r[method] for r in rows if r["target"] == target and r["pairs"] == n
                     and r.get(method) not in (None, "")], dtype=float)


def doc_tables(rows):
    """``{target: table rows}``: methods down, pair counts across, ``mean ± std``."""
    out = {}
    for target in dict.fromkeys(r["target"] for r in rows):
        pairs = sorted({r["pairs"] for r in rows if r["target"] == target})
        table = [["pairs"] + [f"{n:,}" for n in pairs]]
        for label, method in DOC_ROWS:
            cells = [_values(rows, target, n, method) for n in pairs]
            if all(len(c) for c in cells):
                table.append([label] + [f"{c.mean():.3f} ± {c.std():.3f}".replace(" 0.", " .")
                                        for c in cells])
        out[target] = table
    return out


def doc_figures(rows):
    """The figures the guide's prose quotes: margins in points of top-1 (100 × difference)."""
    def mean(target, n, method):
        return _values(rows, target, n, method).mean()

    targets = list(dict.fromkeys(r["target"] for r in rows))
    pairs = sorted({r["pairs"] for r in rows})
    few = [n for n in pairs if n <= 100]
    many = [n for n in pairs if n >= 300]
    fig = {"splits": max(r["split"] for r in rows) + 1}
    margin = [100 * (mean(t, n, "GeRA defaults")
                     - max(mean(t, n, "ridge best (oracle)"), mean(t, n, "Procrustes")))
              for t in targets for n in few]
    fig.update(few_pairs_margin_min=min(margin), few_pairs_margin_max=max(margin),
               few_pairs_wins=sum(m > 0 for m in margin), few_pairs_cells=len(margin))
    for t in targets:
        vs_procrustes = [100 * (mean(t, n, "GeRA defaults") - mean(t, n, "Procrustes"))
                         for n in many]
        vs_start = [100 * (mean(t, n, "GeRA defaults") - mean(t, n, "GeRA init (Procrustes)"))
                    for n in many]
        if many:
            fig[f"{t}_many_vs_procrustes_min"] = min(vs_procrustes)
            fig[f"{t}_many_vs_procrustes_max"] = max(vs_procrustes)
            fig[f"{t}_many_vs_start_min"] = min(vs_start)
            fig[f"{t}_many_vs_start_max"] = max(vs_start)
    geo = [100 * (mean(t, n, "GeRA alpha=1") - mean(t, n, "GeRA defaults"))
           for t in targets for n in pairs if n > min(pairs)]
    geo_few = [100 * (mean(t, min(pairs), "GeRA alpha=1") - mean(t, min(pairs), "GeRA defaults"))
               for t in targets]
    fig.update(geometric_min=min(geo), geometric_max=max(geo), geometric_fewest_min=min(geo_few),
               geometric_fewest_max=max(geo_few))
    loo = [100 * (mean(t, n, "ridge best (oracle)") - mean(t, n, "ridge LOO"))
           for t in targets for n in pairs if n <= 300]
    fig.update(ridge_loo_short_min=min(loo), ridge_loo_short_max=max(loo))
    return fig


def write_doc_csv(rows, prefix):
    for target, table in doc_tables(rows).items():
        with open(f"{prefix}_{target}.csv", "w", newline="") as f:
            csv.writer(f).writerows(table)
    write_figures(f"{prefix}_figures.csv",
                  ((k, repr(float(v))) for k, v in doc_figures(rows).items()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", help="docstrings_en.npz (the development set)")
    parser.add_argument("--source", default="minilm_l6")
    parser.add_argument("--targets", nargs="+", default=["mpnet_base", "me5_small_q4"])
    parser.add_argument("--pairs", nargs="+", type=int, default=[25, 50, 100, 300, 1000])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--no-grid", action="store_true", help="skip the GeRA grid (faster)")
    parser.add_argument("--csv", default=None, help="also write every cell to this CSV file")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--table-from", default=None, metavar="CELLS.csv",
                        help="tabulate a file written by --csv instead of running")
    parser.add_argument("--doc-csv", default=None, metavar="PREFIX",
                        help="with --table-from: write the guide's tables and figures")
    args = parser.parse_args(argv)
    if args.table_from:
        rows = read_rows(args.table_from, text=("target", "GeRA best setting"))
        if args.doc_csv:
            write_doc_csv(rows, args.doc_csv)
        for target, table in doc_tables(rows).items():
            print(f"\n{args.source} -> {target}")
            for line in table:
                print("  " + " | ".join(f"{c:>14}" for c in line))
        return rows
    if args.path is None:
        parser.error("the path of docstrings_en.npz is required unless --table-from is given")
    torch.set_num_threads(args.threads)
    emb = load_docstring_embeddings(args.path).embeddings
    A = emb[args.source]
    rows = []
    for target in args.targets:
        B = emb[target]
        for n in args.pairs:
            cells = [run_cell(A, B, n, seed, args.test, None if args.no_grid else GRID)
                     for seed in range(args.splits)]
            for seed, cell in enumerate(cells):
                rows.append({"target": target, "pairs": n, "split": seed, **cell})
            print(f"\n{args.source} -> {target}, {n} pairs, held-out top-1 over {args.splits} "
                  f"splits (chance {1 / args.test:.4f}):", flush=True)
            for m in METHODS:
                if m in cells[0]:
                    v = np.array([c[m] for c in cells])
                    print(f"  {m:<28} {v.mean():.3f} ± {v.std():.3f}   "
                          f"[{' '.join(f'{x:.3f}' for x in v)}]", flush=True)
            fit_s = np.mean([c["GeRA fit s"] for c in cells])
            print(f"  ridge LOO alphas: {[round(c['ridge LOO alpha'], 3) for c in cells]}; "
                  f"GeRA defaults fit {fit_s:.1f} s", flush=True)
            if "GeRA best setting" in cells[0]:
                settings = [c["GeRA best setting"] for c in cells]
                print(f"  GeRA best settings: {settings}", flush=True)
    if args.csv:
        write_rows(args.csv, rows)


if __name__ == "__main__":
    main()
