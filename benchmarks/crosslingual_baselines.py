"""English → German on the cross-lingual development set: no map, Procrustes, ridge, GeRA.

Data: ``benchmarks/data/crosslingual_de.npz`` (2,897 English/German UI-string pairs from the
gettext catalogs of five PyPI wheels, ``benchmarks/make_crosslingual.py``). Maps: English
multilingual-e5 → German multilingual-e5 (same model, two languages), English MiniLM → German
e5 (384 → 384) and English MPNet → German e5 (768 → 384).

Protocol per random split (as ``benchmarks/tune_gera_real.py``): the rows are permuted, the first
``--test`` (1,000) are held out; the first ``n`` of the others are the known pairs and the rest
form the unpaired pools (target side shuffled). Metrics on the held-out rows, every held-out
target a candidate (chance ``1 / test``): top-1 and recall@10 of the translated source's own
target, and ``J@10``, the neighbourhood Jaccard between the held-out rows' 10 nearest neighbours
after translation and in the target space (:func:`skalign.metrics.neighborhood_jaccard`).
Translations into the target space are compared after centring both sides on the target pool's
mean (the information GeRA gets); GeRA's own rows compare its two maps in the shared space.

Rows: ``no map`` (identity, same model only), ``no map, centred`` (each language centred on
its own pool mean: no pairs used), ``Procrustes`` (:class:`~skalign.ProcrustesAligner`,
centred), ``ridge LOO`` (``LinearAligner()``: leave-one-out penalty), ``ridge best (oracle)``
(penalty picked on the held-out rows), ``GeRA defaults`` (``GeRAAligner(random_state=split)``
with the pools).

    python benchmarks/crosslingual_baselines.py                      # 5 splits, 200 and 1,000
    python benchmarks/crosslingual_baselines.py --pairs 200 --splits 2 --maps "e5 en -> e5 de"
"""

import argparse
import csv
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from _crosslingual import MAPS, load_crosslingual, split

from skalign import GeRAAligner, LinearAligner, ProcrustesAligner, UnpairedPool
from skalign.metrics import neighborhood_jaccard, top_k_accuracy

RIDGE_ALPHAS = [1e-2, 1e-1, 1.0, 10.0, 100.0]
RESULTS = Path(__file__).resolve().parent / "results"


def scores(Y_true, Y_pred):
    return {"top1": top_k_accuracy(Y_true, Y_pred),
            "r10": top_k_accuracy(Y_true, Y_pred, k=10),
            "j10": neighborhood_jaccard(Y_pred, Y_true, k=10)}


def gera_label(kw):
    return "GeRA " + (", ".join(f"{k}={v:g}" for k, v in kw.items()) if kw else "defaults")


def run_cell(A, B, n_pairs, seed, n_test, same_model, gera_variants=({},)):
    test, train = split(len(A), n_test, seed)
    rng = np.random.default_rng(seed)
    pairs, rest = train[:n_pairs], train[n_pairs:]
    pool = UnpairedPool(X=A[rest], y=B[rng.permutation(rest)])
    Xp, Yp, Xte, Yte = A[pairs], B[pairs], A[test], B[test]
    mx, my = A[train].mean(0), B[train].mean(0)
    out = {}
    if same_model:
        out["no map"] = scores(Yte, Xte)
        out["no map, centred"] = scores(Yte - my, Xte - mx)

    def translated(est):
        return scores(Yte - my, est.transform(Xte) - my)

    out["Procrustes"] = translated(ProcrustesAligner().fit(Xp, Yp))
    ridge = LinearAligner().fit(Xp, Yp)
    out["ridge LOO"] = {**translated(ridge), "alpha": ridge.alpha_}
    best = max((translated(LinearAligner(alpha=a).fit(Xp, Yp)) | {"alpha": a}
                for a in RIDGE_ALPHAS), key=lambda s: s["top1"])
    out["ridge best (oracle)"] = best
    for kw in gera_variants:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gera = GeRAAligner(random_state=seed, **kw).fit(Xp, Yp, unpaired=pool)
        fit_s = time.perf_counter() - t0
        out[gera_label(kw)] = {**scores(gera.transform_target(Yte), gera.transform(Xte)),
                               "fit_s": fit_s}
    return out


def _number(text):
    return int(text) if text.lstrip("-").isdigit() else float(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="crosslingual_de.npz (default: vendored)")
    parser.add_argument("--maps", nargs="+", default=list(MAPS), choices=list(MAPS))
    parser.add_argument("--pairs", nargs="+", type=int, default=[200, 1000])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--gera", action="append", default=[], metavar="KEY=VALUE",
                        help="extra GeRA row with these parameters (repeatable, comma-separated)")
    parser.add_argument("--csv", default=str(RESULTS / "crosslingual_baselines.csv"))
    parser.add_argument("--summary-csv",
                        default=str(RESULTS / "crosslingual_baselines_summary.csv"))
    parser.add_argument("--table-from", default=None, metavar="CSV",
                        help="only rewrite --summary-csv from a per-split CSV of an earlier run")
    args = parser.parse_args(argv)
    if args.table_from:
        with open(args.table_from, newline="") as f:
            write_csv(args.summary_csv, summarize(list(csv.DictReader(f))))
        return None
    torch.set_num_threads(1)
    emb = load_crosslingual(args.data)
    variants = [{}] + [{kv.split("=")[0]: _number(kv.split("=")[1]) for kv in g.split(",")}
                       for g in args.gera]
    rows = []
    for name in args.maps:
        src, tgt = MAPS[name]
        same = src.split("_", 1)[1] == tgt.split("_", 1)[1]
        for n in args.pairs:
            cells = []
            for seed in range(args.splits):
                cells.append(run_cell(emb[src], emb[tgt], n, seed, args.test, same, variants))
            print(f"\n{name}: {n} pairs, {args.test} held-out candidates (chance "
                  f"{1 / args.test:.4f}), mean ± sd over {args.splits} splits")
            print(f"  {'method':<34} {'top-1':>13} {'recall@10':>13} {'J@10':>13}")
            for method in cells[0]:
                vals = {m: np.array([c[method][m] for c in cells]) for m in ("top1", "r10", "j10")}
                for seed, c in enumerate(cells):
                    rows.append({"map": name, "pairs": n, "split": seed, "method": method,
                                 **{k: round(float(v), 4) for k, v in c[method].items()}})
                print(f"  {method:<34} " + " ".join(f"{v.mean():.3f} ± {v.std():.3f}"
                                                   for v in vals.values()), flush=True)
    if args.csv:
        write_csv(args.csv, rows)
    if args.summary_csv:
        write_csv(args.summary_csv, summarize(rows))
    return rows


def summarize(rows):
    """One line per (map, pairs, method): mean ± sd over the splits, the user guide's table."""
    groups = {}
    for r in rows:
        groups.setdefault((r["map"], int(r["pairs"]), r["method"]), []).append(r)
    out = []
    for (name, n, method), rs in groups.items():
        line = {"map": name, "pairs": n, "method": method}
        for key, label in (("top1", "top-1"), ("r10", "recall@10"), ("j10", "J@10")):
            v = np.array([float(r[key]) for r in rs])
            line[label] = f"{v.mean():.3f} ± {v.std():.3f}"
        out.append(line)
    return out


def write_csv(path, table):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in table for k in r))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, restval="")
        writer.writeheader()
        writer.writerows(table)


if __name__ == "__main__":
    main()
