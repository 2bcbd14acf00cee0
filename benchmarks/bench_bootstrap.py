"""AnchorBootstrapper vs the paper's anchor optimisation as written: time, peak memory, quality.

Synthetic pools with a known permutation (``make_paired_spaces``: 32-d, orthogonal map, 10 %
noise; 15 seed pairs; the target pool shuffled); quality is the exact-pair rate and the MRR@10
of retrieving each pool item's target relative representation from its source one (anchors:
seeds + discovered pairs; at most 2,000 items evaluated).

The straightforward baseline is the paper's loop as written (Cannistraci et al. 2023): free
target anchors on the sphere (random start), and at **every** Adam step a fresh correspondence
from POT's log-domain Sinkhorn (``ot.sinkhorn(..., method="sinkhorn_log")``, ε = 1e-2 of the
median cost) between the full relative representations of both pools with respect to the seeds
and the *current* anchors, then an Adam step on the MSE between the transported source relative
representations and the target ones; finally each anchor snaps to its nearest target row. It is
run in full (250 steps, nothing extrapolated) on 500-point pools only: each step costs a dense
``n × n`` Sinkhorn solve. At 20,000 and 100,000 points only AnchorBootstrapper runs (chunked
CSLS; the 10⁵ run discovers among ``max_candidates=10000`` source rows against the whole target
pool, in bounded memory).

    python benchmarks/bench_bootstrap.py            # 500-point pools vs the paper loop; 20k pools
    python benchmarks/bench_bootstrap.py --full     # ... and a 10^5-point run
    python benchmarks/bench_bootstrap.py --quick    # smoke test: 300 pools, 40 anchors, 20 steps
    python benchmarks/bench_bootstrap.py --start    # the start guard on real encoders (below)

``--start``: the defaults against their start, the inner Procrustes fitted on the seeds alone,
with and without the start guard (``validation_fraction=None``). MiniLM -> MPNet (the vendored
subset) and MiniLM en -> e5 de (``benchmarks/data/crosslingual_de.npz``), 350 held-out texts of
1,350, 25 / 200 / 1,000 seeds among the 1,000 others, which form the pools (target shuffled;
``wrong`` pools: source and target pools of 500 different texts each). Held-out top-1, every
held-out target a candidate, both sides centred.
"""

import argparse
import time

import numpy as np
import ot
import torch
from _common import PeakRSS
from _crosslingual import load_crosslingual

from skalign import AnchorBootstrapper, LinearAligner, ProcrustesAligner, UnpairedPool
from skalign.datasets import load_docstring_embeddings, make_paired_spaces
from skalign.metrics import top_k_accuracy


def make_problem(n, d=32, noise=0.1, seed=0):
    X, Y = make_paired_spaces(n_samples=n + 15, n_features=d, noise=noise, random_state=seed)
    perm = np.random.default_rng(seed).permutation(n)
    return X[:15], Y[:15], X[15:], Y[15:][perm], perm


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def rel_mrr(Xp, Yp, perm, anchors_x, anchors_y, k=10, n_eval=2000):
    """MRR@k of retrieving each item's target relative representation from its source one."""
    rows = np.arange(min(n_eval, len(Xp)))
    mx, my = Xp.mean(0), Yp.mean(0)
    RX = unit(unit(Xp[perm[rows]] - mx) @ unit(anchors_x - mx).T)  # sources of target rows
    RY = unit(unit(Yp - my) @ unit(anchors_y - my).T)
    S = RX @ RY.T
    rank = (S > S[np.arange(len(rows)), rows][:, None]).sum(1) + 1
    return float(np.mean(np.where(rank <= k, 1.0 / rank, 0.0)))


def paper_loop(Xs, Ys, Xp, Yp, src, steps, lr=0.02, reg_rel=1e-2, sinkhorn_iter=100, seed=0):
    """The paper's AO as written: a new POT log-domain plan from the current anchors every step."""
    g = torch.Generator().manual_seed(seed)
    mx, my = Xp.mean(0), Yp.mean(0)
    LX, LY = torch.tensor(unit(Xs - mx)), torch.tensor(unit(Ys - my))
    XP, YP = torch.tensor(unit(Xp - mx)), torch.tensor(unit(Yp - my))
    RX = XP @ torch.cat([LX, XP[src]]).T  # (n, s + k), fixed
    W = torch.nn.Parameter(torch.randn(len(src), YP.shape[1], generator=g, dtype=torch.float64))
    opt = torch.optim.Adam([W], lr=lr)
    a = torch.full((len(XP),), 1.0 / len(XP), dtype=torch.float64)
    b = torch.full((len(YP),), 1.0 / len(YP), dtype=torch.float64)
    for _ in range(steps):
        opt.zero_grad()
        RY = YP @ torch.cat([LY, W / W.norm(dim=1, keepdim=True)]).T
        with torch.no_grad():
            C = torch.cdist(RX, RY) ** 2
            P = ot.sinkhorn(a, b, C, reg_rel * float(C.median()), method="sinkhorn_log",
                            numItermax=sinkhorn_iter, stopThr=1e-6, warn=False)
            T = (P / P.sum(0, keepdim=True)).T @ RX  # transported source rel. reps per target
        loss = ((T - RY) ** 2).mean()
        loss.backward()
        opt.step()
    A = (W / W.norm(dim=1, keepdim=True)).detach()
    return (A @ YP.T).argmax(1).numpy()


def _row(name, n, secs, mib, perm, src, tgt, Xs, Ys, Xp, Yp, note=""):
    exact = float(np.mean(perm[tgt] == src))
    mrr = rel_mrr(Xp, Yp, perm, np.vstack([Xs, Xp[src]]), np.vstack([Ys, Yp[tgt]]))
    return (name, n, secs, mib, exact, mrr, note)


def run_ours(n, n_anchors, plan="auto", **params):
    Xs, Ys, Xp, Yp, perm = make_problem(n)
    boot = AnchorBootstrapper(LinearAligner(), n_anchors=n_anchors, plan=plan, random_state=0,
                              **{"discovery": "rounds", **params})
    with PeakRSS(interval=0.01) as mem:
        t0 = time.perf_counter()
        boot.fit(Xs, Ys, unpaired=UnpairedPool(X=Xp, y=Yp))
        secs = time.perf_counter() - t0
    src, tgt = boot.anchor_pairs_.T
    extra = ", ".join(f"{k}={v}" for k, v in params.items())
    name = f"AnchorBootstrapper ({boot.plan_}{', ' + extra if extra else ''})"
    return _row(name, n, secs, mem.mib, perm, src, tgt, Xs, Ys, Xp, Yp,
                f"{boot.n_iter_} rounds")


def run_paper(n, n_anchors, steps, sinkhorn_iter):
    Xs, Ys, Xp, Yp, perm = make_problem(n)
    src = np.random.default_rng(0).permutation(n)[:n_anchors - 15]
    with PeakRSS(interval=0.01) as mem:
        t0 = time.perf_counter()
        tgt = paper_loop(Xs, Ys, Xp, Yp, torch.as_tensor(src), steps, sinkhorn_iter=sinkhorn_iter)
        secs = time.perf_counter() - t0
    return _row("paper loop, POT sinkhorn_log every step", n, secs, mem.mib, perm, src, tgt,
                Xs, Ys, Xp, Yp, f"{steps} steps x {sinkhorn_iter} Sinkhorn it., measured")


def start_guard(seeds=(25, 200, 1000), splits=(0,)):
    """Rows (data, pools, seeds, split, start, guarded, unguarded, stage, fit s) of ``--start``."""
    import warnings

    E = load_docstring_embeddings().embeddings
    x = load_crosslingual()
    data = {"MiniLM -> MPNet": (E["minilm_l6"], E["mpnet_base"]),
            "MiniLM en -> e5 de": (x["en_minilm_l6"], x["de_me5_small_q4"])}
    rows = []
    for name, (A, B) in data.items():
        for kind in ("same texts", "wrong"):
            for n in seeds:
                for split in splits:
                    order = np.random.default_rng(split).permutation(len(A))[:1350]
                    test, rest = order[:350], order[350:]
                    s = rest[:n]
                    pool = (UnpairedPool(X=A[rest[:500]], y=B[rest[500:]]) if kind == "wrong"
                            else UnpairedPool(X=A[rest], y=B[np.random.default_rng(1)
                                                             .permutation(rest)]))
                    mu = B[test].mean(0)

                    def top1(est):
                        return top_k_accuracy(B[test] - mu, est.transform(A[test]) - mu)

                    out = [top1(ProcrustesAligner().fit(A[s], B[s]))]
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        t0 = time.perf_counter()
                        guarded = AnchorBootstrapper(random_state=split).fit(A[s], B[s],
                                                                            unpaired=pool)
                        secs = time.perf_counter() - t0
                        plain = AnchorBootstrapper(validation_fraction=None, random_state=split)
                        plain.fit(A[s], B[s], unpaired=pool)
                    rows.append((name, kind, n, split, out[0], top1(guarded), top1(plain),
                                 guarded.best_stage_, secs))
    header = (f"{'map':20s} {'pools':10s} {'seeds':>5s} {'split':>5s} {'start':>6s} "
              f"{'guarded':>7s} {'unguarded':>9s} {'stage':>5s} {'fit s':>6s}")
    print(header)
    print("-" * len(header))
    for name, kind, n, split, st, g, u, stage, secs in rows:
        print(f"{name:20s} {kind:10s} {n:5d} {split:5d} {st:6.3f} {g:7.3f} {u:9.3f} "
              f"{stage:5d} {secs:6.1f}")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--full", action="store_true", help="also run 10^5-point pools")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--start", action="store_true",
                        help="only the start guard on real encoders")
    parser.add_argument("--splits", type=int, default=1, help="splits of --start")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.start:
        return start_guard(splits=range(args.splits))
    if args.quick:
        small, anchors, steps, sink_it, big = 300, 40, 20, 50, []
    else:
        small, anchors, steps, sink_it, big = 500, 300, 250, 50, [20_000]
        if args.full:
            big.append(100_000)
    rows = [run_ours(small, anchors), run_ours(small, anchors, correspondence="sinkhorn"),
            run_ours(small, anchors, max_rounds=1),
            run_paper(small, anchors, steps, sink_it)]
    for n in big:
        rows.append(run_ours(n, anchors))
    header = (f"{'method':58s} {'n':>7s} {'time s':>8s} {'peak MiB':>9s} {'exact':>6s} "
              f"{'MRR@10':>7s}  note")
    print(header)
    print("-" * len(header))
    for name, n, secs, mib, exact, mrr, note in rows:
        print(f"{name:58s} {n:7d} {secs:8.2f} {mib:9.1f} {exact:6.3f} {mrr:7.3f}  {note}")
    return rows


if __name__ == "__main__":
    main()
