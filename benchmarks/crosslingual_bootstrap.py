"""AnchorBootstrapper English → German from a few seed pairs and unpaired pools.

Data: ``benchmarks/data/crosslingual_de.npz`` (``benchmarks/make_crosslingual.py``). Maps:
English MiniLM → German multilingual-e5 and English e5 → German e5 (same model, two
languages; there the identity, "no map", is the reference to beat).

Protocol per draw: the 2,897 pairs are permuted; the first ``--pool`` (1,500) texts form the
pools, the others are held out. ``--seeds`` of the pool texts are the known pairs; the target
pool is the same texts by the target encoder, **shuffled**. ``AnchorBootstrapper`` (defaults:
Procrustes inside, ``n_anchors=300``; more with ``--param``) discovers the rest. Reported:
``exact``, the fraction of discovered pairs that are true translations; held-out top-1 (every
held-out German text a candidate) of ``boot.transform``; the same for Procrustes on the seeds
alone, Procrustes on 1,000 true pool pairs (the supervised ceiling) and, for the same model,
no map (raw identity) and no map with each language centred on its own pool; and the warnings
the fit raised.

    python benchmarks/crosslingual_bootstrap.py
    python benchmarks/crosslingual_bootstrap.py --maps "e5 en -> e5 de" --seeds 15 --draws 0
    python benchmarks/crosslingual_bootstrap.py --param n_anchors=1000
"""

import argparse
import ast
import csv
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from _crosslingual import MAPS, load_crosslingual

from skalign import AnchorBootstrapper, ProcrustesAligner, UnpairedPool
from skalign.metrics import top_k_accuracy

RESULTS = Path(__file__).resolve().parent / "results"


def run_draw(X, Y, draw, n_seed, params, n_pool=1500, n_ceiling=1000, same_model=False):
    rng = np.random.default_rng(draw)
    order = rng.permutation(len(X))
    pool, test = order[:n_pool], order[n_pool:]
    perm = rng.permutation(n_pool)          # target pool row j is pool text perm[j]
    seeds = rng.choice(n_pool, n_seed, replace=False)
    Xp, Yp, Xe, Ye = X[pool], Y[pool], X[test], Y[test]
    boot = AnchorBootstrapper(random_state=draw, **params)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        boot.fit(Xp[seeds], Yp[seeds], unpaired=UnpairedPool(X=Xp, y=Yp[perm]))
    secs = time.perf_counter() - t0
    src, tgt = boot.anchor_pairs_.T
    ceiling = ProcrustesAligner().fit(Xp[:n_ceiling], Yp[:n_ceiling])
    out = {
        "exact": float(np.mean(perm[tgt] == src)) if len(src) else float("nan"),
        "n_disc": int(len(src)),
        "top1 bootstrap": top_k_accuracy(Ye, boot.transform(Xe)),
        "top1 Procrustes seeds": top_k_accuracy(Ye, ProcrustesAligner().fit(
            Xp[seeds], Yp[seeds]).transform(Xe)),
        "top1 Procrustes 1000 true": top_k_accuracy(Ye, ceiling.transform(Xe)),
        "rounds": int(boot.n_iter_),
        "fit_s": secs,
        "warnings": "; ".join(sorted({type(w.message).__name__ for w in caught})),
    }
    if same_model:
        out["top1 no map"] = top_k_accuracy(Ye, Xe)
        out["top1 no map, centred"] = top_k_accuracy(Ye - Yp.mean(0), Xe - Xp.mean(0))
    return out


def parse_param(text):
    key, value = text.split("=", 1)
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass
    return key, value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="crosslingual_de.npz (default: vendored)")
    parser.add_argument("--maps", nargs="+", default=["MiniLM en -> e5 de", "e5 en -> e5 de"],
                        choices=list(MAPS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 15, 25])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--pool", type=int, default=1500)
    parser.add_argument("--param", action="append", default=[], type=parse_param,
                        help="AnchorBootstrapper parameter as key=value (repeatable)")
    parser.add_argument("--csv", default=str(RESULTS / "crosslingual_bootstrap.csv"))
    parser.add_argument("--summary-csv",
                        default=str(RESULTS / "crosslingual_bootstrap_summary.csv"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    emb = load_crosslingual(args.data)
    params = dict(args.param)
    print(f"AnchorBootstrapper params {params or 'defaults'}; pool {args.pool}, held out "
          f"{len(next(iter(emb.values()))) - args.pool}; mean over {args.draws} draws "
          f"[min-max]")
    rows, summary = [], []
    for name in args.maps:
        src, tgt = MAPS[name]
        for n_seed in args.seeds:
            same = src.split("_", 1)[1] == tgt.split("_", 1)[1]
            cells = [run_draw(emb[src], emb[tgt], d, n_seed, params, args.pool, same_model=same)
                     for d in range(args.draws)]
            for d, c in enumerate(cells):
                rows.append({"map": name, "seeds": n_seed, "draw": d,
                             **{k: round(v, 4) if isinstance(v, float) else v
                                for k, v in c.items()}})
            print(f"\n{name}, {n_seed} seeds:")
            line = {"map": name, "seeds": n_seed}
            for key in cells[0]:
                if key == "warnings":
                    print(f"  {key:<26} {[c[key] or '-' for c in cells]}")
                    line["fits warned"] = f"{sum(bool(c[key]) for c in cells)} of {len(cells)}"
                    continue
                v = np.array([c[key] for c in cells], dtype=float)
                print(f"  {key:<26} {v.mean():.3f} [{v.min():.3f}-{v.max():.3f}]", flush=True)
                if key not in ("n_disc", "rounds"):
                    digits = 1 if key == "fit_s" else 3
                    line[key] = (f"{v.mean():.{digits}f} ({v.min():.{digits}f}-"
                                 f"{v.max():.{digits}f})")
            summary.append(line)
    for path, table in ((args.csv, rows), (args.summary_csv, summary)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            keys = list(dict.fromkeys(k for r in table for k in r))
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=keys, restval="")
                writer.writeheader()
                writer.writerows(table)
    return rows


if __name__ == "__main__":
    main()
