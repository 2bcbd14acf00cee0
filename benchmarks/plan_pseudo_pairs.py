"""How right are the pairs ``skalign plan`` discovers in the unpaired samples to evaluate on?

``python benchmarks/plan_pseudo_pairs.py [NPZ] [--pairs 25 100 500] [--csv OUT]``
(``--encoders`` and ``--half`` choose other encoders and plan-half sizes, e.g. the vendored
subset's two encoders in the smoke test)

Data: ``../shared/data/docstrings_en.npz``, every ordered pair of its three encoders, split as
``benchmarks/bench_migrate_peers.py`` splits it: a plan half of 2,000 texts whose first ``N``
are the known pairs and whose old-encoder vectors and (shuffled) new-encoder vectors are the
unpaired samples. Prints how many mutual-nearest-neighbour pairs ``skalign.plan`` finds in the
samples under the bootstrap map (rows repeating a known pair left out), the bootstrap's
certificate, and the share of those pairs that are the true ones (the texts are known here).
Run with ``OMP_NUM_THREADS=1`` on a shared machine. ``--csv`` writes the range of each column
as ``key,value`` (``benchmarks/results/plan_pseudo_pairs.csv``, quoted by the user guide).
"""

import argparse
import itertools
import time
from pathlib import Path

import numpy as np
from _common import write_figures

from skalign import UnpairedPool
from skalign._plan_store import _duplicates, _pseudo_store, _unit

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"
ENCODERS = ("minilm_l6", "mpnet_base", "me5_small_q4")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pairs", type=int, nargs="+", default=[25, 100, 500])
    p.add_argument("--csv", default=None, help="write the columns' ranges (key,value) here")
    p.add_argument("--encoders", nargs="+", default=list(ENCODERS))
    p.add_argument("--half", type=int, default=2000, help="texts in the plan half")
    args = p.parse_args(argv)
    rows = []
    Z = np.load(args.npz)
    E = {k: _unit(Z[k].astype(np.float32)) for k in args.encoders}
    print(f"{'source -> target':<30}{'pairs':>6}{'found':>7}{'right':>8}{'certificate':>13}"
          f"{'s':>6}")
    for src, tgt in itertools.permutations(args.encoders, 2):
        perm = np.random.default_rng(0).permutation(len(E[src]))
        half = perm[:args.half]
        shuffled = np.random.default_rng(1).permutation(half)
        pool = UnpairedPool(X=E[src][half], y=E[tgt][shuffled])
        where = {text: j for j, text in enumerate(shuffled)}
        truth = np.array([where[text] for text in half])  # pool.y row of each pool.X row
        for n in args.pairs:
            t0 = time.perf_counter()
            X, Y = E[src][half[:n]], E[tgt][half[:n]]
            free_p, free_q = ~_duplicates(pool.X, X), ~_duplicates(pool.y, Y)
            store = _pseudo_store(X, Y, pool, free_p, free_q, 0)
            right = np.mean(truth[store["source"]] == store["target"])
            rows.append((len(store["source"]), right, store["certificate"]))
            print(f"{src + ' -> ' + tgt:<30}{n:>6}{len(store['source']):>7}{right:>8.3f}"
                  f"{store['certificate']:>13.3f}{time.perf_counter() - t0:>6.1f}", flush=True)
    if args.csv:
        found, right, cert = (np.array(c) for c in zip(*rows))
        write_figures(args.csv, [("cases", len(rows)), ("found_min", found.min()),
                                 ("found_max", found.max()), ("right_min", right.min()),
                                 ("right_max", right.max()), ("certificate_min", cert.min())])
    return rows


if __name__ == "__main__":
    main()
