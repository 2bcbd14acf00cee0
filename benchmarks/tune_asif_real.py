"""ASIFAligner on real sentence-encoder embeddings: centring, ``n_nonzero`` and ``exponent``.

Same splits and metric as ``tune_gera_real.py`` (held-out top-1 among ``--test`` rows, mean ±
standard deviation over the splits; the pairs are the anchors):

    python benchmarks/tune_asif_real.py ../shared/data/docstrings_en.npz
"""

import argparse
import itertools

import numpy as np
import torch

from skalign import ASIFAligner
from skalign.datasets import load_docstring_embeddings


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--source", default="minilm_l6")
    parser.add_argument("--targets", nargs="+", default=["mpnet_base", "me5_small_q4"])
    parser.add_argument("--pairs", nargs="+", type=int, default=[50, 300, 1000])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--test", type=int, default=2000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    emb = load_docstring_embeddings(args.path).embeddings
    A = emb[args.source]
    grid = list(itertools.product([True, False], [50, 100, 800], [1.0, 3.0, 8.0]))
    for target, n in itertools.product(args.targets, args.pairs):
        B = emb[target]
        scores = np.zeros((args.splits, len(grid)))
        for seed in range(args.splits):
            perm = np.random.default_rng(seed).permutation(len(A))
            test, pairs = perm[:args.test], perm[args.test:args.test + n]
            for j, (center, k, p) in enumerate(grid):
                est = ASIFAligner(center=center, n_nonzero=k, exponent=p).fit(A[pairs], B[pairs])
                scores[seed, j] = est.score(A[test], B[test])
        print(f"\n{args.source} -> {target}, {n} pairs (anchors):")
        for j in np.argsort(-scores.mean(0)):
            center, k, p = grid[j]
            print(f"  center={center!s:<5} n_nonzero={k:<4} exponent={p:<4} "
                  f"{scores[:, j].mean():.3f} ± {scores[:, j].std():.3f}")


if __name__ == "__main__":
    main()
