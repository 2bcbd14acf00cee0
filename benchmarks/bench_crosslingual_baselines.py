"""English → German on the cross-lingual development set: no map, Procrustes, ridge, GeRA.

Data: ``data/crosslingual_de.npz`` (2,897 English/German UI strings from the gettext catalogs of
five PyPI wheels, ``maint_tools/make_crosslingual.py``). Maps: English → German multilingual-e5
(one model, two languages), English MiniLM → German e5 and English MPNet → German e5.

Per random split (``_real.pairs_and_pools``): ``--test`` (1,000) rows held out, ``n`` known
pairs, the rest of the others as unpaired pools (German side shuffled). On the held-out rows,
every held-out target a candidate: top-1 and recall@10 of the translated source's own target
and ``J@10``, the Jaccard overlap of the 10 nearest neighbours after translation and in the
target space (:func:`skalign.metrics.neighborhood_jaccard`). Translations into the target space
are compared centred on the target pool's mean (the information GeRA gets); GeRA's rows compare
its two maps in the shared space.

Rows: ``no map`` (identity, same model only), ``no map, centred`` (each language on its own
mean), ``Procrustes``, ``ridge LOO`` (``LinearAligner()``), ``ridge best (oracle)`` (penalty
picked on the held-out rows), ``GeRA's start`` (``early_stopping=False, max_iter=1`` at a
negligible learning rate: no training) and ``GeRA defaults`` (with the pools; the summary's
``start kept`` counts the splits whose held-out pairs kept the start, ``best_epoch_ == 0``).

    python benchmarks/bench_crosslingual_baselines.py            # 5 splits, 200 and 1,000 pairs
    python benchmarks/bench_crosslingual_baselines.py --pairs 200 --splits 2 --maps "e5 en -> e5 de"
    python benchmarks/bench_crosslingual_baselines.py --maps "e5 en -> e5 de" --csv e5.csv \
        --summary-csv ""                          # one map per process, side by side, then
    python benchmarks/bench_crosslingual_baselines.py --table-from e5.csv minilm.csv mpnet.csv
"""

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from _common import write_rows
from _crosslingual import MAPS, load_crosslingual
from _real import centred_top1, pairs_and_pools, read_rows

from skalign import GeRAAligner, LinearAligner, ProcrustesAligner
from skalign.metrics import neighborhood_jaccard, top_k_accuracy

RIDGE_ALPHAS = [1e-2, 1e-1, 1.0, 10.0, 100.0]
RESULTS = Path(__file__).resolve().parent / "results"


def scores(Y_true, Y_pred, centre=0.0):
    return {"top1": centred_top1(Y_true, Y_pred, centre),
            "r10": top_k_accuracy(Y_true - centre, Y_pred - centre, k=10),
            "j10": neighborhood_jaccard(Y_pred - centre, Y_true - centre, k=10)}


def run_cell(A, B, n_pairs, seed, n_test, same_model):
    """``{method: scores}`` of one split."""
    Xp, Yp, Xte, Yte, pool, my = pairs_and_pools(A, B, n_pairs, seed, n_test)
    out = {}
    if same_model:
        out["no map"] = scores(Yte, Xte)
        out["no map, centred"] = scores(Yte - my, Xte - np.vstack([Xp, pool.X]).mean(0))
    out["Procrustes"] = scores(Yte, ProcrustesAligner().fit(Xp, Yp).transform(Xte), my)
    ridge = LinearAligner().fit(Xp, Yp)
    out["ridge LOO"] = {**scores(Yte, ridge.transform(Xte), my), "alpha": ridge.alpha_}
    out["ridge best (oracle)"] = max(
        ({**scores(Yte, LinearAligner(alpha=a).fit(Xp, Yp).transform(Xte), my), "alpha": a}
         for a in RIDGE_ALPHAS), key=lambda s: s["top1"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = GeRAAligner(early_stopping=False, max_iter=1, learning_rate=1e-12,
                            random_state=seed).fit(Xp, Yp, unpaired=pool)
        t0 = time.perf_counter()
        gera = GeRAAligner(random_state=seed).fit(Xp, Yp, unpaired=pool)
        fit_s = time.perf_counter() - t0
    out["GeRA's start"] = scores(start.transform_target(Yte), start.transform(Xte))
    out["GeRA defaults"] = {**scores(gera.transform_target(Yte), gera.transform(Xte)),
                            "fit_s": fit_s, "best_epoch": gera.best_epoch_}
    return out


def summarize(rows):
    """One line per (map, pairs, method): mean ± sd over the splits, the user guide's table; for
    GeRA's defaults, in how many splits the held-out pairs kept its start."""
    groups = {}
    for r in rows:
        groups.setdefault((r["map"], r["pairs"], r["method"]), []).append(r)
    out = []
    for (name, n, method), rs in groups.items():
        line = {"map": name, "pairs": n, "method": method}
        for key, label in (("top1", "top-1"), ("r10", "recall@10"), ("j10", "J@10")):
            v = np.array([r[key] for r in rs])
            line[label] = f"{v.mean():.3f} ± {v.std():.3f}"
        kept = [r["best_epoch"] == 0 for r in rs if r.get("best_epoch") is not None]
        line["start kept"] = f"{sum(kept)} of {len(kept)}" if kept else ""
        out.append(line)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="crosslingual_de.npz (default: vendored)")
    parser.add_argument("--maps", nargs="+", default=list(MAPS), choices=list(MAPS))
    parser.add_argument("--pairs", nargs="+", type=int, default=[200, 1000])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--csv", default=None, help="also write every split's rows here")
    parser.add_argument("--summary-csv",
                        default=str(RESULTS / "crosslingual_baselines_summary.csv"))
    parser.add_argument("--table-from", nargs="+", default=None, metavar="CSV",
                        help="only write --summary-csv from the --csv files of earlier runs")
    args = parser.parse_args(argv)
    if args.table_from:
        rows = [r for path in args.table_from for r in read_rows(path, text=("map", "method"))]
        write_rows(args.summary_csv, summarize(rows))
        return rows
    torch.set_num_threads(1)
    emb = load_crosslingual(args.data)
    rows = []
    for name in args.maps:
        src, tgt = MAPS[name]
        same = src.split("_", 1)[1] == tgt.split("_", 1)[1]
        for n in args.pairs:
            cells = [run_cell(emb[src], emb[tgt], n, seed, args.test, same)
                     for seed in range(args.splits)]
            print(f"\n{name}: {n} pairs, {args.test} held-out candidates (chance "
                  f"{1 / args.test:.4f}), mean ± sd over {args.splits} splits")
            print(f"  {'method':<22} {'top-1':>13} {'recall@10':>13} {'J@10':>13}")
            for method in cells[0]:
                rows += [{"map": name, "pairs": n, "split": seed, "method": method,
                          **{k: round(float(v), 4) for k, v in c[method].items()}}
                         for seed, c in enumerate(cells)]
                print(f"  {method:<22} " + " ".join(
                    f"{np.mean(v):.3f} ± {np.std(v):.3f}"
                    for v in ([c[method][m] for c in cells] for m in ("top1", "r10", "j10"))))
            print(f"  GeRA best_epoch_: {[c['GeRA defaults']['best_epoch'] for c in cells]}",
                  flush=True)
            if args.csv:  # after each cell: a long run stopped part-way keeps what it measured
                write_rows(args.csv, rows)
    if args.summary_csv:
        write_rows(args.summary_csv, summarize(rows))
    return rows


if __name__ == "__main__":
    main()
