"""AnchorBootstrapper vs a straightforward anchor optimisation: time, peak memory, MRR.

The straightforward implementation recomputes, at every Adam step, the dense ``n × n`` plan with
POT's log-domain Sinkhorn (``ot.sinkhorn(..., method="sinkhorn_log")``) on the seed-column
relative representations, and the full relative representations of the target pool. When that
baseline is too slow for the requested size, it is timed for ``--naive-steps`` steps and its total
time is extrapolated linearly to ``--steps`` (marked ``extrapolated``; its MRR is then not
measured). Synthetic pools with a known permutation; MRR@10 of the relative representations with
the discovered anchors (the item itself retrieved among the target pool).

    python benchmarks/bench_bootstrap.py            # 20k pools, 300 anchors, 250 steps; 1e5 sparse
    python benchmarks/bench_bootstrap.py --quick    # 2k pools, 100 anchors, 50 steps; 1e4 sparse
"""

import argparse
import time

import numpy as np
import ot
import torch

from skalign import AnchorBootstrapper, LinearAligner, UnpairedPool
from skalign.datasets import make_paired_spaces

from _common import PeakRSS


def make_problem(n, d=32, noise=0.1, seed=0):
    X, Y = make_paired_spaces(n_samples=n + 15, n_features=d, noise=noise, random_state=seed)
    perm = np.random.default_rng(seed).permutation(n)
    return X[:15], Y[:15], X[15:], Y[15:][perm], perm


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def rel_mrr(Xp, Yp, perm, anchors_x, anchors_y, k=10, n_eval=2000):
    """MRR@k of retrieving each item's target relative representation from its source one."""
    rows = np.arange(min(n_eval, len(Xp)))
    RX = unit(unit(Xp[perm[rows]]) @ unit(anchors_x).T)  # sources of target rows `rows`
    RY = unit(unit(Yp) @ unit(anchors_y).T)
    S = RX @ RY.T
    rank = (S > S[np.arange(len(rows)), rows][:, None]).sum(1) + 1
    return float(np.mean(np.where(rank <= k, 1.0 / rank, 0.0)))


def naive(Xs, Ys, Xp, Yp, src, steps, lr=0.02, max_sinkhorn=200, reg_rel=1e-2, seed=0):
    """The straightforward loop: a fresh dense POT plan and full relative representations per step."""
    g = torch.Generator().manual_seed(seed)
    LX, LY = torch.tensor(unit(Xs)), torch.tensor(unit(Ys))
    XP, YP = torch.tensor(unit(Xp)), torch.tensor(unit(Yp))
    RX = XP @ torch.cat([LX, XP[src]]).T
    A = torch.nn.Parameter(torch.randn(len(src), YP.shape[1], generator=g, dtype=torch.float64))
    opt = torch.optim.Adam([A], lr=lr)
    w = torch.full((len(XP),), 1.0 / len(XP), dtype=torch.float64)
    for _ in range(steps):
        opt.zero_grad()
        with torch.no_grad():
            C = torch.cdist(YP @ LY.T, RX[:, :len(LX)]) ** 2
            P = ot.sinkhorn(w, w, C, reg_rel * float(C.median()), method="sinkhorn_log",
                            numItermax=max_sinkhorn, stopThr=1e-4, warn=False)
            T = (P / P.sum(1, keepdim=True)) @ RX
        An = A / A.norm(dim=1, keepdim=True)
        loss = ((T - YP @ torch.cat([LY, An]).T) ** 2).mean()
        loss.backward()
        opt.step()
    An = (A / A.norm(dim=1, keepdim=True)).detach()
    return (An @ YP.T).argmax(1).numpy()


def run(n, n_anchors, steps, naive_steps, plan="auto", run_naive=True):
    Xs, Ys, Xp, Yp, perm = make_problem(n)
    rows = []
    boot = AnchorBootstrapper(LinearAligner(), n_anchors=n_anchors, max_iter=steps, tol=None,
                              plan=plan, random_state=0)
    with PeakRSS(interval=0.01) as mem:
        t0 = time.perf_counter()
        boot.fit(Xs, Ys, unpaired=UnpairedPool(X=Xp, y=Yp))
        secs = time.perf_counter() - t0
    src, tgt = boot.anchor_pairs_.T
    rows.append((f"AnchorBootstrapper ({boot.plan_})", n, steps, secs, mem.mib,
                 np.mean(perm[tgt] == src), rel_mrr(Xp, Yp, perm, boot.anchors_X_, boot.anchors_y_),
                 "measured"))
    if run_naive:
        k = naive_steps if naive_steps and naive_steps < steps else steps
        with PeakRSS(interval=0.01) as mem:
            t0 = time.perf_counter()
            tgt_n = naive(Xs, Ys, Xp, Yp, torch.as_tensor(src), k)
            secs = time.perf_counter() - t0
        note = "measured" if k == steps else f"extrapolated from {k} steps"
        mrr = rel_mrr(Xp, Yp, perm, np.vstack([Xs, Xp[src]]), np.vstack([Ys, Yp[tgt_n]])) \
            if k == steps else float("nan")
        acc = np.mean(perm[tgt_n] == src) if k == steps else float("nan")
        rows.append(("naive dense POT every step", n, steps, secs * steps / k,
                     mem.mib, acc, mrr, note))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--naive-steps", type=int, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.quick:
        n, anchors, steps, big = args.n or 1000, 100, 50, 10_000
        naive_steps = args.naive_steps or steps
    else:
        n, anchors, steps, big = args.n or 20_000, 300, 250, 100_000
        naive_steps = args.naive_steps or 3
    rows = run(n, anchors, steps, naive_steps)
    rows += run(big, anchors, steps, 0, plan="sparse", run_naive=False)
    header = f"{'method':34s} {'n':>7s} {'steps':>5s} {'time s':>9s} {'peak MiB':>9s} {'exact':>6s} {'MRR@10':>7s}  note"
    print(header)
    print("-" * len(header))
    for name, nn, st, secs, mib, acc, mrr, note in rows:
        print(f"{name:34s} {nn:7d} {st:5d} {secs:9.2f} {mib:9.1f} {acc:6.3f} {mrr:7.3f}  {note}")
    return rows


if __name__ == "__main__":
    main()
