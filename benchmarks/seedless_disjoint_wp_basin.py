"""How wide is Wasserstein–Procrustes' basin on disjoint pools, and is the soft phase's map in it?

The disjoint-pool diagnosis (``seedless_disjoint_diagnosis.py``) found that rounds of
Wasserstein–Procrustes (WP: an entropic OT plan between the mapped source pool and the target
pool, then Procrustes on it) hold the ceiling map on disjoint pools. This script asks the
next question: from how weak a start does WP get there? Starts, on the benchmark's disjoint draw
(``_seedless_common.draw(..., disjoint=True)``: 1,500 source texts, 1,500 other target texts,
1,000 held-out texts): Procrustes on ``n`` true pairs of source-pool texts (``oracle n``, the map
a user with ``n`` known pairs would start from), and the map fitted on the mutual pairs of the
bootstrapper's first soft phase (``soft 1``, the zero-pair start). Each then gets ``--rounds``
rounds of WP (``seedless_disjoint_diagnosis.wasserstein_procrustes``, one round at a time);
held-out top-1 (among all 1,000 targets) is recorded after every round.

Written: ``results/seedless_disjoint_wp_basin.csv`` (a row per start and round) and
``..._figures.csv`` (``key,value``: ``<source>__<target>__s<state>__<start>__r<round>``, quoted by
the user guide).

    nice -n 19 env OMP_NUM_THREADS=1 python benchmarks/seedless_disjoint_wp_basin.py \\
        ../shared/data/docstrings_en.npz --pairs 0 1
"""

import argparse
import time
from pathlib import Path

import torch
from _common import write_rows
from _seedless_common import ENCODER_PAIRS, draw, load, top1_mrr
from seedless_disjoint_diagnosis import wasserstein_procrustes

from skalign import AnchorBootstrapper
from skalign._backend import row_normalize
from skalign._self_learning import SOFT_SCHEDULE, orthogonal_map, soft_self_learn

RESULTS = Path(__file__).resolve().parent / "results"


def soft_start(XP, YP, state):
    """The map fitted on the mutual pairs of the bootstrapper's first soft phase (zero pairs)."""
    boot = AnchorBootstrapper(random_state=state)
    boot.plan_ = "dense"
    e_x, e_y = XP[:0], YP[:0]
    C, svd_x, svd_y = boot._signature_start(XP, YP, e_x, e_y)
    k, t_start, t_soft = SOFT_SCHEDULE[0]
    XR, YR = boot._principal(XP, e_x, k, svd_x), boot._principal(YP, e_y, k, svd_y)
    # plain steps (extrapolation=0), as when the recorded results ran: the over-relaxed steps
    # came later and end at the same objective in fewer iterations
    Wr, _ = soft_self_learn(XR[0], YR[0], C, XR[1], YR[1], start_temperature=t_start,
                            temperature=t_soft, max_iter=150, extrapolation=0)
    a, b = boot._mutual_pairs(XR[0] @ Wr, YR[0])
    return orthogonal_map(XP[a].T @ YP[b])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--pairs", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--states", type=int, nargs="+", default=[0])
    ap.add_argument("--oracle", type=int, nargs="*", default=[20, 50, 100])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", default=str(RESULTS / "seedless_disjoint_wp_basin.csv"))
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    E = load(args.data)
    rows, figures = [], []
    for source, target in [ENCODER_PAIRS[i] for i in args.pairs]:
        for state in args.states:
            X, Y, _, Xe, Ye, Xt, Yt = draw(E, source, target, state, 3000, disjoint=True)
            mx, my = X.mean(0), Y.mean(0)
            XP = row_normalize(torch.as_tensor(X - mx))
            YP = row_normalize(torch.as_tensor(Y - my))
            XE = row_normalize(torch.as_tensor(Xe - mx))
            starts = {}
            for n in args.oracle:
                Xo = row_normalize(torch.as_tensor(Xt[:n] - mx))
                Yo = row_normalize(torch.as_tensor(Yt[:n] - my))
                starts[f"oracle {n}"] = orthogonal_map(Xo.T @ Yo)
            starts["soft 1"] = soft_start(XP, YP, state)
            for name, W in starts.items():
                t0 = time.process_time()
                for r in range(args.rounds + 1):
                    if r:
                        W = wasserstein_procrustes(XP, YP, W, n_iter=1)
                    top1 = round(top1_mrr(Ye, (XE @ W).numpy())[0], 3)
                    rows.append(dict(source=source, target=target, state=state, start=name,
                                     round=r, top1=top1,
                                     cpu_s=round(time.process_time() - t0, 1)))
                    figures.append(dict(key=f"{source}__{target}__s{state}__"
                                            f"{name.replace(' ', '_')}__r{r}", value=top1))
                    print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
                write_rows(args.out, rows)
                write_rows(args.out.replace(".csv", "_figures.csv"), figures)


if __name__ == "__main__":
    main()
