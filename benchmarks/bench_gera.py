"""GeRAAligner: time and peak memory of one training epoch, and of a fit's set-up.

One epoch = one pass over the training pairs in mini-batches of ``pair_batch_size`` (256). The
contrastive-only epoch (``alpha=0``) is the reference; the issue's target is that the geometric
term adds at most 3x its cost. Each variant is fitted for ``--repeats + 1`` epochs without early
stopping (``verbose=2`` prints the seconds since the start of training after every epoch); the
epoch time is the mean of the epochs after the first (first-call allocations), and the set-up
is the rest of the fit: centring, the kNN graphs of ``mode="local"`` (built once per
fit and space) and the Procrustes start.

    python benchmarks/bench_gera.py            # 10^4 pairs + 10^5 unpaired, d = 768, K = 32
    python benchmarks/bench_gera.py --quick    # 2,000 pairs + 20,000 unpaired, d = 256, K = 32

At full size the exact graph over 1.1 x 10^5 points costs ~2 x 10^13 flops per space: the local
variant's set-up takes minutes on a few CPU cores.
"""

import argparse
import contextlib
import io
import re
import time

import numpy as np
import torch
from _common import PeakRSS

from skalign import GeRAAligner, UnpairedPool


def clustered(n, d, rng, n_clusters=100):
    centres = 2.0 * rng.standard_normal((n_clusters, d))
    return (centres[rng.integers(n_clusters, size=n)] + rng.standard_normal((n, d))).astype(
        np.float32)


def timed_fit(est, X, Y, n_pairs):
    """(epoch seconds: the mean of the epochs after the first, set-up seconds: the fit's time
    outside its epochs, peak RSS MiB or peak CUDA MiB). The printed times have a resolution of
    0.01 s: time sizes whose epochs take well over that."""
    dev = torch.device(est.device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    printed = io.StringIO()
    with PeakRSS() as mem, contextlib.redirect_stdout(printed):
        t0 = time.perf_counter()
        est.fit(X[:n_pairs], Y[:n_pairs], unpaired=UnpairedPool(X=X[n_pairs:], y=Y[n_pairs:]))
        wall = time.perf_counter() - t0
    marks = [float(t) for t in re.findall(r"iteration +\d+ .*\(([\d.]+) s\)",
                                          printed.getvalue())]
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else mem.mib
    return (marks[-1] - marks[0]) / (len(marks) - 1), max(0.0, wall - marks[-1]), peak


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=None)
    parser.add_argument("--unpaired", type=int, default=None)
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--neighbors", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="epochs timed per variant (median)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args(argv)
    n_pairs = args.pairs or (2_000 if args.quick else 10_000)
    n_unpaired = args.unpaired or (20_000 if args.quick else 100_000)
    d = args.dim or (256 if args.quick else 768)
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    X = clustered(n_pairs + n_unpaired, d, rng)
    Y = X @ np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32)

    variants = [("contrastive only (alpha=0)", dict(alpha=0.0)),
                ("GeRA local", dict(alpha=1.0, mode="local")),
                ("GeRA batch", dict(alpha=1.0, mode="batch"))]
    rows = []
    for name, kw in variants:
        est = GeRAAligner(n_neighbors=args.neighbors, early_stopping=False,
                          max_iter=args.repeats + 1, verbose=2, random_state=0,
                          device=args.device, **kw)
        epoch_s, setup_s, peak = timed_fit(est, X, Y, n_pairs)
        rows.append({"variant": name, "epoch_s": epoch_s, "setup_s": setup_s, "peak_mib": peak})

    base = rows[0]["epoch_s"]
    where = (f"cpu ({torch.get_num_threads()} threads)" if args.device == "cpu"
             else args.device)
    print(f"one epoch: {n_pairs:,} pairs (batches of 256) + {n_unpaired:,} unpaired, d = {d}, "
          f"K = {args.neighbors}, on {where}")
    mem_kind = "peak CUDA alloc MiB" if args.device.startswith("cuda") else "peak RSS +MiB"
    print(f"{'variant':<30}{'epoch s':>10}{'x contrastive':>15}{'set-up s':>10}{mem_kind:>22}")
    for r in rows:
        ratio = r["epoch_s"] / base if base else float("nan")
        print(f"{r['variant']:<30}{r['epoch_s']:10.3f}{ratio:15.2f}"
              f"{r['setup_s']:10.2f}{r['peak_mib']:22.0f}")
    return rows


if __name__ == "__main__":
    main()
