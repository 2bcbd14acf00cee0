"""GeRAAligner: time and peak memory of one training epoch, and of the kNN graph build.

One epoch = one pass over the training pairs in mini-batches of ``pair_batch_size`` (256). The
contrastive-only epoch (``alpha=0``) is the reference; the issue's target is that the geometric
term adds at most 3x its cost. The kNN graphs (``mode="local"``) are built once per fit, block by
block, and are reported separately.

    python benchmarks/bench_gera.py            # 10^4 pairs + 10^5 unpaired, d = 768, K = 32
    python benchmarks/bench_gera.py --quick    # 2,000 pairs + 20,000 unpaired, d = 256, K = 32

At full size an exact graph over 1.1 x 10^5 points costs ~2 x 10^13 flops per space (minutes on a
few CPU cores); unless ``--full-graph`` is given, its time is extrapolated from ``--graph-queries``
query rows against the whole pool (the cost is linear in the number of queries) and the epochs use
a random graph of the same shape (the epoch's cost does not depend on which rows are neighbours).
"""

import argparse
import math
import time

import numpy as np
import torch
from _common import PeakRSS

from skalign import GeRAAligner
from skalign._backend import default_batch_size, make_generator, resolve_device
from skalign._gera import _initial_params, _preprocess, _Trainer
from skalign._knn import knn_graph


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def clustered(n, d, gen, n_clusters=100):
    centres = 2.0 * torch.randn(n_clusters, d, generator=gen)
    labels = torch.randint(n_clusters, (n,), generator=gen)
    return centres[labels] + torch.randn(n, d, generator=gen)


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
    parser.add_argument("--full-graph", action="store_true",
                        help="build the exact graph at full size")
    parser.add_argument("--graph-queries", type=int, default=4096)
    args = parser.parse_args(argv)
    n_pairs = args.pairs or (2_000 if args.quick else 10_000)
    n_unpaired = args.unpaired or (20_000 if args.quick else 100_000)
    d = args.dim or (256 if args.quick else 768)
    K = args.neighbors
    dev = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)

    X = clustered(n_pairs + n_unpaired, d, gen)
    Y = X @ torch.linalg.qr(torch.randn(d, d, generator=gen))[0]
    Ux = _preprocess(X, X.mean(0)).to(dev)
    Uy = _preprocess(Y, Y.mean(0)).to(dev)
    del X, Y
    n_pool = len(Ux)

    # --- the kNN graph (once per fit and space)
    exact = args.full_graph or n_pool <= 3 * args.graph_queries
    q = n_pool if exact else args.graph_queries
    with PeakRSS() as mem:
        _sync(dev)
        t0 = time.perf_counter()
        if exact:
            graph_x = knn_graph(Ux, K)[0]
        else:  # the first q query rows of the full computation, in knn_graph's blocks
            block = default_batch_size(n_pool, itemsize=Ux.element_size())
            for start in range(0, q, block):
                S = Ux[start:min(start + block, q)] @ Ux.T
                torch.topk(S, K + 1, dim=1)
                del S
        _sync(dev)
        graph_s = (time.perf_counter() - t0) * n_pool / q
    graph_mem = mem.mib
    if exact:
        graph_y = knn_graph(Uy, K)[0]
    else:
        graph_x = torch.randint(n_pool, (n_pool, K), generator=gen).to(dev)
        graph_y = torch.randint(n_pool, (n_pool, K), generator=gen).to(dev)

    variants = [("contrastive only (alpha=0)", dict(alpha=0.0)),
                ("GeRA local", dict(alpha=1.0, mode="local")),
                ("GeRA batch", dict(alpha=1.0, mode="batch"))]
    rows = []
    for name, kw in variants:
        est = GeRAAligner(n_neighbors=K, **kw)
        est.n_neighbors_ = K if est.alpha > 0 else 0  # what fit would set
        tgen = make_generator(0, dev)
        fp = _initial_params(Ux, d, init="pca", mapping="linear", hidden_size=1, generator=tgen)
        gp = _initial_params(Uy, d, init="pca", mapping="linear", hidden_size=1, generator=tgen)
        leaves = list(fp.values()) + list(gp.values())
        for t in leaves:
            t.requires_grad_(True)
        opt = torch.optim.Adam(leaves, lr=est.learning_rate)
        log_scale = torch.tensor(math.log(1 / est.temperature), device=dev)
        trainer = _Trainer(est, n_pairs, Ux, Uy, (graph_x, graph_y), fp, gp, log_scale, tgen)
        trainer.epoch(opt)  # warm-up: first-call allocations
        times, peaks = [], []
        for _ in range(args.repeats):
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            with PeakRSS() as mem:
                _sync(dev)
                t0 = time.perf_counter()
                trainer.epoch(opt)
                _sync(dev)
                times.append(time.perf_counter() - t0)
            peaks.append(torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda"
                         else mem.mib)
        rows.append({"variant": name, "epoch_s": float(np.median(times)),
                     "peak_mib": float(max(peaks))})

    base = rows[0]["epoch_s"]
    where = f"{dev} ({torch.get_num_threads()} threads)" if dev.type == "cpu" else str(dev)
    print(f"one epoch: {n_pairs:,} pairs (batches of 256) + {n_unpaired:,} unpaired, d = {d}, "
          f"k = {d}, K = {K}, on {where}")
    mem_kind = "peak CUDA alloc MiB" if dev.type == "cuda" else "peak RSS +MiB"
    print(f"{'variant':<30}{'epoch s':>10}{'x contrastive':>15}{mem_kind:>22}")
    for r in rows:
        print(f"{r['variant']:<30}{r['epoch_s']:10.3f}{r['epoch_s'] / base:15.2f}"
              f"{r['peak_mib']:22.0f}")
    how = "measured" if exact else f"extrapolated from {q:,} query rows"
    print(f"kNN graph over {n_pool:,} points (once per space and fit): {graph_s:.1f} s per space "
          f"({how}), peak +{graph_mem:.0f} MiB")
    rows.append({"variant": "kNN graph (per space)", "epoch_s": graph_s, "peak_mib": graph_mem})
    return rows


if __name__ == "__main__":
    main()
