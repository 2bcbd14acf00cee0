"""The hard phase from the same soft pairs with keep probability 0.5 and 1 (issue 15).

``python benchmarks/seedless_hard_keep.py [NPZ] --fits 0:0:0 1:1:0 [--out CSV]``

Each fit (``pair:state:seeds``; pairs index ``bench_seedless.py``'s encoder pairs: 0 MiniLM →
MPNet, 1 MiniLM → e5, 2 MPNet → e5; 3,000-row pools drawn as there) runs
``AnchorBootstrapper(random_state=state)``; where it calls the hard self-learning, the same soft
pairs go through :func:`skalign._self_learning.self_learn` with ``p0=0.5`` (the random dropping
of vecmap's stochastic dictionary induction, the default before) and ``p0=1`` (none, the
bootstrapper's now), both with the bootstrapper's generator state. Printed per fit and keep
probability: hard iterations, CPU seconds, the objective, the mutual CSLS pairs under the map
and the share of them right (the texts are known here), and the held-out top-1 of Procrustes on
those pairs (the bootstrapper's inner fit). Run with ``OMP_NUM_THREADS=1``. Data:
``../shared/data/docstrings_en.npz``; ``results/seedless_hard_keep.csv``::

    nice -n 19 env OMP_NUM_THREADS=1 python benchmarks/seedless_hard_keep.py \\
        ../shared/data/docstrings_en.npz --fits 0:0:0 1:1:0 1:3:5 0:2:5 2:0:0 \\
        --out benchmarks/results/seedless_hard_keep.csv
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_rows  # noqa: E402
from _seedless_common import ENCODER_PAIRS, draw, load, top1_mrr  # noqa: E402

import skalign._bootstrap_seedless as bootstrap  # noqa: E402
from skalign import AnchorBootstrapper, ProcrustesAligner, UnpairedPool  # noqa: E402
from skalign._matching import csls_match  # noqa: E402

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--fits", nargs="+", default=["1:0:0"], help="pair:state:seeds")
    p.add_argument("--pool", type=int, default=3000)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    E, rows, self_learn = load(args.npz), [], bootstrap.self_learn
    for spec in args.fits:
        pair, state, n_seed = map(int, spec.split(":"))
        source, target = ENCODER_PAIRS[pair]
        X, Y, partner, Xe, Ye, _, _ = draw(E, source, target, state, args.pool)

        def both(XS, YS, a, b, LX, LY, *, generator, **kwargs):
            kept = None
            for p0 in (0.5, 1.0):
                gen = torch.Generator(generator.device)
                gen.set_state(generator.get_state())
                c0 = time.process_time()
                W, history, objective = self_learn(XS, YS, a, b, LX, LY, **{
                    **kwargs, "p0": p0, "generator": gen})
                cpu = time.process_time() - c0
                match = csls_match(XS @ W, YS, k=10)
                src = torch.nonzero(match.mutual()).flatten().numpy()
                tgt = match.forward.numpy()[src]
                top1, _ = top1_mrr(Ye, ProcrustesAligner().fit(X[src], Y[tgt]).transform(Xe))
                row = {"pair": pair, "state": state, "seeds": n_seed, "p0": p0,
                       "iterations": len(history), "cpu_seconds": round(cpu, 2),
                       "objective": round(objective, 5), "mutual_pairs": len(src),
                       "right": round(float(np.mean(partner[src] == tgt)), 4),
                       "top1": round(top1, 4)}
                rows.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                if p0 == 1.0:
                    kept = W, history, objective
            return kept

        bootstrap.self_learn = both
        try:
            seeds = (X[:n_seed], Y[partner[:n_seed]]) if n_seed else (None, None)
            AnchorBootstrapper(random_state=state).fit(*seeds,
                                                       unpaired=UnpairedPool(X=X, y=Y))
        finally:
            bootstrap.self_learn = self_learn
    if args.out:
        write_rows(args.out, rows)


if __name__ == "__main__":
    main()
