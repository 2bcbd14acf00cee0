"""Cross-lingual discovery with the current AnchorBootstrapper defaults, one draw.

    cd benchmarks && python crosslingual_discovery_check.py

English → German on ``data/crosslingual_de.npz`` (see ``make_crosslingual.py``): a pool of 1,500
pairs (German side shuffled), 5 or 15 of them as seed pairs, 1,397 held-out rows; prints held-out
top-1 among all held-out candidates, the success certificate, the warnings raised and the fit
seconds, and writes them to ``results/crosslingual_discovery_check.csv`` (the cross-lingual guide
page includes it). ``crosslingual_bootstrap.py`` has the 3-draw study (measured before self-learning
discovery and ``n_anchors="auto"`` became the defaults).
"""
import csv
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from _crosslingual import load_crosslingual, split

from skalign import AnchorBootstrapper, UnpairedPool
from skalign.metrics import top_k_accuracy

HERE = __import__("pathlib").Path(__file__).resolve().parent
A = load_crosslingual()
rows = []
for name, (s, t) in [("MiniLM en -> e5 de", ("en_minilm_l6", "de_me5_small_q4")),
                     ("e5 en -> e5 de", ("en_me5_small_q4", "de_me5_small_q4"))]:
    X, Y = A[s], A[t]
    test, rest = split(len(X), 1397, 0)
    pool_rows = rest[:1500]
    rng = np.random.default_rng(0)
    for n_seed in (5, 15):
        seeds = pool_rows[:n_seed]
        t0 = time.time()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            pool = UnpairedPool(X=X[pool_rows], y=Y[rng.permutation(pool_rows)])
            b = AnchorBootstrapper(random_state=0).fit(X[seeds], Y[seeds], unpaired=pool)
        names = sorted({type(x.message).__name__ for x in w})
        rows.append([name, n_seed, f"{top_k_accuracy(Y[test], b.transform(X[test])):.3f}",
                     f"{b.certificate_:.3f}", " ".join(names) or "none",
                     f"{time.time() - t0:.1f}"])
        print(name, n_seed, "top1", round(top_k_accuracy(Y[test], b.transform(X[test])), 3),
              "cert", round(b.certificate_, 3), names, round(time.time()-t0, 1), "s", flush=True)
with open(HERE / "results" / "crosslingual_discovery_check.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["map", "seed pairs", "held-out top-1", "certificate", "warnings", "fit s"])
    w.writerows(rows)
