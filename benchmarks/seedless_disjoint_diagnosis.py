"""Where zero-pair discovery goes wrong on disjoint pools: the start, the soft phase, the hard loop.

One draw of ``_seedless_common.draw(..., disjoint=True)`` (source pool: 1,500 texts, target pool:
1,500 other texts, 1,000 held-out texts) per encoder pair and state. Each stage of
:class:`~skalign.AnchorBootstrapper`'s self-learning is scored with the ground truth the
benchmark has:

* ``pairs``: the stage's mutual pairs (source row ``i``, target row ``j``). Disjoint pools have no
  true pair; the best a pair can be is the target-pool row nearest to ``i``'s own target
  embedding (which is not in the pool). ``rank1`` / ``rank10``: share of pairs whose ``j`` is that
  nearest row / among the 10 nearest; ``pair_cos``: mean cosine of ``j`` to ``i``'s own target.
* ``top1``, ``mrr``: an orthogonal map fitted on the stage's pairs (or the stage's own map),
  evaluated on the held-out texts like the benchmark (top-1 among all 1,000 targets).
* ``objective``: the self-learning objective of the stage's map (mean over source rows of the
  best CSLS score, k = 10), the quantity the soft and hard loops climb;
* ``cert``: the bootstrapper's held-out certificate of the stage's map on the pools.

Stages: ``signatures`` (mutual pairs of the signature start's CSLS scores), ``soft r`` (the soft
phase of the bootstrapper's start ``r``, one per entry of ``SOFT_SCHEDULE``), ``soft 1 → hard``
(the hard self-learning from the first soft phase's pairs; ``p0=0.1``: with vecmap's keep
probability 0.1 instead of 0.5; ``full soft``: the soft phase again in the full dimension, from
the CSLS scores of the map fitted on those pairs), ``centroids k`` (``--centroids``: a
distribution-level start, k-means centroids of each pool matched by their within-pool cosine
matrices with scipy's ``quadratic_assignment``, and the mutual pairs of the map fitted on the
matched centroids); then *oracle* starts: Procrustes on ``n`` true pairs of the source-pool texts
(``oracle n``), its mutual pairs on the pools, the hard loop from them (``oracle n → hard``), the
soft phase in the full dimension from its CSLS scores (``oracle n → soft``) and, from ``--wp-min``
pairs on, Wasserstein–Procrustes rounds (``oracle n → wp``: an entropic OT plan between the
mapped source pool and the target pool, POT's ``ot.sinkhorn``, Procrustes on
:math:`X^\\top P Y`). Written: ``results/seedless_disjoint_diagnosis.csv`` (a row per stage,
as it runs) and ``..._figures.csv`` (``key,value``, quoted by the user guide).

    nice -n 19 env OMP_NUM_THREADS=1 python benchmarks/seedless_disjoint_diagnosis.py \\
        ../shared/data/docstrings_en.npz --pairs 0 1 2 --centroids 50
"""

import argparse
import csv
import re
import time
from pathlib import Path

import numpy as np
import torch
from _seedless_common import ENCODER_PAIRS, draw, load, top1_mrr

from skalign import AnchorBootstrapper
from skalign._backend import row_normalize
from skalign._self_learning import (
    SOFT_SCHEDULE,
    csls_scores,
    orthogonal_map,
    self_learn,
    soft_self_learn,
)

RESULTS = Path(__file__).resolve().parent / "results"


def wasserstein_procrustes(XP, YP, W, reg=0.05, n_iter=3):
    """Rounds of: entropic OT plan between ``XP W`` and ``YP`` (cost 1 - cos, POT's log-domain
    ``ot.sinkhorn`` on torch tensors, ``reg`` × the median cost), Procrustes on
    :math:`X^\top P Y`."""
    import ot

    n, m = len(XP), len(YP)
    a = torch.full((n,), 1 / n, dtype=torch.float64)
    b = torch.full((m,), 1 / m, dtype=torch.float64)
    for _ in range(n_iter):
        M = (1 - (XP @ W) @ YP.T).double()
        P = ot.sinkhorn(a, b, M, reg * float(M.median()), method="sinkhorn_log",
                        numItermax=200, warn=False)
        W = orthogonal_map(XP.T @ (P.to(XP.dtype) @ YP))
    return W


def centroid_start(XP, YP, T, k, state, n_init=20):
    """k-means centroids of both pools matched by their within-pool similarity matrices.

    scikit-learn's KMeans, then scipy's ``quadratic_assignment`` (FAQ, ``n_init`` random starts,
    the best objective kept) maximising :math:`\operatorname{tr}(A P B^\top P^\top)` between
    the centroid cosine matrices; returns the matched centroid rows, the share of matches that
    are right (the target centroid nearest to the mean own target of the source cluster) and
    the orthogonal map fitted on the matched centroids.
    """
    from scipy.optimize import quadratic_assignment
    from sklearn.cluster import KMeans

    km_x = KMeans(k, n_init=4, random_state=state).fit(XP.numpy())
    km_y = KMeans(k, n_init=4, random_state=state).fit(YP.numpy())
    cx = row_normalize(torch.as_tensor(km_x.cluster_centers_, dtype=XP.dtype))
    cy = row_normalize(torch.as_tensor(km_y.cluster_centers_, dtype=YP.dtype))
    A, B = (cx @ cx.T).double().numpy(), (cy @ cy.T).double().numpy()
    rng = np.random.default_rng(state)
    best = None
    for _ in range(n_init):
        res = quadratic_assignment(A, B, method="faq",
                                   options={"maximize": True, "P0": "randomized", "rng": rng})
        if best is None or res.fun > best.fun:
            best = res
    match = torch.as_tensor(best.col_ind)
    own = torch.stack([T[torch.as_tensor(km_x.labels_ == c)].mean(0) for c in range(k)])
    right = (own @ cy.T).argmax(1)
    W = orthogonal_map(cx.T @ cy[match])
    return float((match == right).float().mean()), W


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--pairs", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--states", type=int, nargs="+", default=[0])
    ap.add_argument("--oracle", type=int, nargs="*", default=[20, 100, 1000])
    ap.add_argument("--wp-min", type=int, default=1000,
                    help="Wasserstein-Procrustes from oracle starts of this many pairs or more")
    ap.add_argument("--no-start", action="store_true", help="oracle starts only")
    ap.add_argument("--centroids", type=int, nargs="*", default=[],
                    help="k of the k-means + QAP start (none by default)")
    ap.add_argument("--same", action="store_true", help="same-text pools instead (a control)")
    ap.add_argument("--out", default=str(RESULTS / "seedless_disjoint_diagnosis.csv"))
    ap.add_argument("--append", action="store_true", help="add to the rows already in --out")
    ap.add_argument("--tabulate", action="store_true",
                    help="only write the figures file from the rows already in --out")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    E = load(args.data)
    path = Path(args.out)
    keep = (args.append or args.tabulate) and path.exists()
    rows = list(csv.DictReader(open(path))) if keep else []
    fields = ["source", "target", "state", "same", "stage", "n_pairs", "rank1", "rank10",
              "pair_cos", "top1", "mrr", "objective", "cert", "seconds"]
    if args.tabulate:
        write_figures(path, rows)
        return
    for source, target in [ENCODER_PAIRS[i] for i in args.pairs]:
        for state in args.states:
            X, Y, _, Xe, Ye, Xt, Yt = draw(E, source, target, state,
                                           1500 if args.same else 3000,
                                           disjoint=not args.same)
            mx, my = X.mean(0), Y.mean(0)
            XP = row_normalize(torch.as_tensor(X - mx))
            YP = row_normalize(torch.as_tensor(Y - my))
            T = row_normalize(torch.as_tensor(Yt - my))  # own targets of the source-pool rows
            near = torch.argsort(T @ YP.T, dim=1, descending=True)[:, :10]
            XE = row_normalize(torch.as_tensor(Xe - mx))
            boot = AnchorBootstrapper(random_state=state)
            boot.plan_ = "dense"
            gen = torch.Generator().manual_seed(state)
            empty_x, empty_y = XP[:0], YP[:0]

            def record(stage, a=None, b=None, W=None, seconds=float("nan")):
                row = dict(source=source, target=target, state=state, same=args.same,
                           stage=stage, n_pairs="", rank1="", rank10="", pair_cos="")
                if a is not None:
                    hit = near[a] == b[:, None]
                    row.update(n_pairs=len(a), rank1=round(float(hit[:, 0].float().mean()), 3),
                               rank10=round(float(hit.any(1).float().mean()), 3),
                               pair_cos=round(float((T[a] * YP[b]).sum(1).mean()), 3))
                    if W is None:
                        W = orthogonal_map(XP[a].T @ YP[b])
                t1, mrr = top1_mrr(Ye, (XE @ W).numpy())
                # the self-learning objective of the map: mean best CSLS score of the sources
                objective = float(csls_scores((XP @ W) @ YP.T, 10).max(1).values.mean())
                cert, _ = boot._held_out_orthogonal(XP, YP, W, empty_x, empty_y,
                                                    torch.Generator().manual_seed(1))
                row.update(top1=round(t1, 3), mrr=round(mrr, 3), objective=round(objective, 3),
                           cert=round(cert["score"], 3), seconds=round(seconds, 1))
                rows.append(row)
                write(path, rows, fields)
                write_figures(path, rows)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                return W

            t0 = time.perf_counter()
            C, svd_x, svd_y = boot._signature_start(XP, YP, empty_x, empty_y)
            schedule = [] if args.no_start else SOFT_SCHEDULE
            fw, bw = C.argmax(1), C.argmax(0)
            a = torch.nonzero(bw[fw] == torch.arange(len(fw))).flatten()
            if schedule:
                record("signatures", a, fw[a], seconds=time.perf_counter() - t0)
            for r, (k, t_start, t_soft) in enumerate(schedule):
                t0 = time.perf_counter()
                XR = boot._principal(XP, empty_x, k, svd_x)
                YR = boot._principal(YP, empty_y, k, svd_y)
                Wr, soft = soft_self_learn(XR[0], YR[0], C, XR[1], YR[1],
                                           start_temperature=t_start, temperature=t_soft,
                                           max_iter=150)
                a, b = boot._mutual_pairs(XR[0] @ Wr, YR[0])
                record(f"soft {r + 1} ({len(soft)} it, obj {soft[-1]['objective']:.3f})", a, b,
                       seconds=time.perf_counter() - t0)
                if r == 0:
                    t0 = time.perf_counter()
                    W, hist, obj = self_learn(XP, YP, a, b, generator=gen)
                    record(f"soft 1 → hard ({len(hist)} it, obj {obj:.3f})", W=W,
                           a=None, seconds=time.perf_counter() - t0)
                    # escape attempts: vecmap's stronger exploration, the soft phase in full
                    t0 = time.perf_counter()
                    W, hist, obj = self_learn(XP, YP, a, b, p0=0.1,
                                              generator=torch.Generator().manual_seed(0))
                    record(f"soft 1 → hard p0=0.1 ({len(hist)} it, obj {obj:.3f})", W=W,
                           seconds=time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    C0 = csls_scores((XP @ orthogonal_map(XP[a].T @ YP[b])) @ YP.T, 10)
                    W, soft = soft_self_learn(XP, YP, C0, empty_x, empty_y, max_iter=150,
                                              start_temperature=0.05, temperature=0.05)
                    record(f"soft 1 → full soft ({len(soft)} it)", W=W,
                           seconds=time.perf_counter() - t0)
            for k in args.centroids:
                t0 = time.perf_counter()
                right, W0 = centroid_start(XP, YP, T, k, state)
                W0 = record(f"centroids {k} QAP ({right:.2f} right)", W=W0,
                            seconds=time.perf_counter() - t0)
                a, b = boot._mutual_pairs(XP @ W0, YP)
                W = record(f"centroids {k} mutual pairs", a, b)
            for n_true in args.oracle:
                Xo = row_normalize(torch.as_tensor(Xt[:n_true] - mx))
                Yo = row_normalize(torch.as_tensor(Yt[:n_true] - my))
                W0 = record(f"oracle {n_true}", W=orthogonal_map(Xo.T @ Yo))
                a, b = boot._mutual_pairs(XP @ W0, YP)
                record(f"oracle {n_true} mutual pairs", a, b)
                t0 = time.perf_counter()
                W, hist, obj = self_learn(XP, YP, a, b, generator=gen)
                record(f"oracle {n_true} → hard ({len(hist)} it)", W=W,
                       seconds=time.perf_counter() - t0)
                t0 = time.perf_counter()
                C0 = csls_scores((XP @ W0) @ YP.T, 10)
                W, soft = soft_self_learn(XP, YP, C0, empty_x, empty_y, max_iter=150,
                                          start_temperature=0.05, temperature=0.05)
                record(f"oracle {n_true} → soft ({len(soft)} it)", W=W,
                       seconds=time.perf_counter() - t0)
                if n_true < args.wp_min:
                    continue
                t0 = time.perf_counter()
                W = wasserstein_procrustes(XP, YP, W0)
                record(f"oracle {n_true} → wp", W=W, seconds=time.perf_counter() - t0)


def write(path, rows, fields):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def write_figures(path, rows):
    """``key,value`` figures for the user guide, next to ``path`` (``..._figures.csv``): keys
    ``<source>__<target>__<stage>__<what>``, the stage without its parenthesised note, as a
    slug (``oracle_1000_hard``)."""
    out = []
    for r in rows:
        stage = re.sub(r"\W+", "_", r["stage"].split(" (")[0].lower()).strip("_")
        for what in ("rank1", "rank10", "top1", "objective", "cert", "seconds"):
            if r[what] not in ("", None, "nan"):
                out.append({"key": f"{r['source']}__{r['target']}__s{r['state']}__{stage}__"
                                   f"{what}", "value": r[what]})
    write(Path(str(path).replace(".csv", "_figures.csv")), out, ["key", "value"])


if __name__ == "__main__":
    main()
