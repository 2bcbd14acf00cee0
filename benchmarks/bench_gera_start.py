"""GeRA's defaults against their own Procrustes start on the development data's held-out splits.

Issue 50, item 5: no estimator ends below its own start. For each map, number of pairs and
random split the rows are permuted, the first ``--test`` are held out (2,000 same-language,
1,000 cross-lingual, as ``tune_gera_real.py`` and ``crosslingual_baselines.py``), the first ``n``
of the others are the known pairs and the rest form the unpaired pools (target side shuffled).
Held-out top-1 (every held-out target a candidate) of:

* ``Procrustes``: :class:`~skalign.ProcrustesAligner`, both sides centred on the target pool mean;
* ``start``: GeRA's Procrustes start (``early_stopping=False, max_iter=1,
  learning_rate=1e-12``: no training), scored in its shared space like GeRA;
* ``GeRA``: ``GeRAAligner(random_state=split)`` at its defaults, with the pools.

Same-language maps read the full development set (``../shared/data/docstrings_en.npz``, or
``--dev PATH``; without it the vendored 1,350-row subset, MiniLM -> MPNet only, 350 held out);
cross-lingual maps read ``benchmarks/data/crosslingual_de.npz``. One CPU thread.

    python benchmarks/bench_gera_start.py                       # 3 splits, 25 / 200 / 1,000 pairs
    python benchmarks/bench_gera_start.py --first-split 3       # 3 other splits
    python benchmarks/bench_gera_start.py --splits 1 --pairs 200 --maps "MiniLM en -> e5 de"
"""

from __future__ import annotations

import argparse
import csv
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from _crosslingual import MAPS as XLING_MAPS
from _crosslingual import load_crosslingual

from skalign import GeRAAligner, ProcrustesAligner, UnpairedPool
from skalign.datasets import load_docstring_embeddings
from skalign.metrics import top_k_accuracy

DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"
SAME = {"MiniLM -> MPNet": ("minilm_l6", "mpnet_base"),
        "MiniLM -> e5": ("minilm_l6", "me5_small_q4")}


def run_cell(A, B, n_pairs, seed, n_test):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(A))
    test, train = perm[:n_test], perm[n_test:]
    pairs, rest = train[:n_pairs], train[n_pairs:]
    pool = UnpairedPool(X=A[rest], y=B[rng.permutation(rest)])
    Xp, Yp, Xte, Yte = A[pairs], B[pairs], A[test], B[test]
    my = B[train].mean(0)
    out = {"Procrustes": top_k_accuracy(Yte - my, ProcrustesAligner().fit(Xp, Yp).transform(Xte)
                                        - my)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = GeRAAligner(early_stopping=False, max_iter=1, learning_rate=1e-12,
                            random_state=seed).fit(Xp, Yp, unpaired=pool)
        t0 = time.perf_counter()
        gera = GeRAAligner(random_state=seed).fit(Xp, Yp, unpaired=pool)
        out["fit_s"] = time.perf_counter() - t0
    out["start"] = start.score(Xte, Yte)
    out["GeRA"] = gera.score(Xte, Yte)
    out["best_epoch"] = getattr(gera, "best_epoch_", "")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", default=str(DEV), help="docstrings_en.npz (full dev set)")
    parser.add_argument("--maps", nargs="+", default=list(SAME) + list(XLING_MAPS))
    parser.add_argument("--pairs", nargs="+", type=int, default=[25, 200, 1000])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--first-split", type=int, default=0, help="seed of the first split")
    parser.add_argument("--csv", default=None, help="write every cell to this CSV file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    dev = Path(args.dev)
    same = load_docstring_embeddings(dev if dev.is_file() else None).embeddings
    xling = load_crosslingual()
    rows = []
    print(f"{'map':<22} {'pairs':>5} {'Procrustes':>10} {'start':>7} {'GeRA':>7} "
          f"{'GeRA-start min':>14} {'epochs':>9} {'fit s':>6}")
    for name in args.maps:
        if name in SAME:
            src, tgt = SAME[name]
            if tgt not in same:
                continue
            A, B, n_test = same[src], same[tgt], 2000 if len(same[src]) >= 4000 else 350
        else:
            src, tgt = XLING_MAPS[name]
            A, B, n_test = xling[src], xling[tgt], 1000
        for n in args.pairs:
            seeds = range(args.first_split, args.first_split + args.splits)
            cells = [run_cell(A, B, n, seed, n_test) for seed in seeds]
            for seed, c in zip(seeds, cells):
                rows.append({"map": name, "pairs": n, "split": seed, **c})
            mean = {k: np.mean([c[k] for c in cells]) for k in ("Procrustes", "start", "GeRA",
                                                                 "fit_s")}
            gap = min(c["GeRA"] - c["start"] for c in cells)
            epochs = ",".join(str(c["best_epoch"]) for c in cells)
            print(f"{name:<22} {n:>5} {mean['Procrustes']:>10.3f} {mean['start']:>7.3f} "
                  f"{mean['GeRA']:>7.3f} {gap:>+14.3f} {epochs:>9} {mean['fit_s']:>6.2f}",
                  flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return rows


if __name__ == "__main__":
    main()
