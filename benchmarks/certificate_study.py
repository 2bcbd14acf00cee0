"""Does AnchorBootstrapper's success certificate rank successes above failures, and warn on each?

Over encoder pairs × pool sizes × seed counts × random states, plus a deliberately impossible
case (the target pool replaced by random vectors), every fit is labelled a success when its
held-out top-1 reaches 0.9 × the ceiling (Procrustes on 1,000 true pairs of the same draw) and a
failure otherwise (always for the impossible case). Printed: every run, the ROC AUC of
``certificate_`` for success, and the confusion table of success against the
:class:`~skalign.exceptions.DiscoveryFailedWarning`. Written: ``results/certificate_study.csv``.

    OMP_NUM_THREADS=1 python benchmarks/certificate_study.py ../shared/data/docstrings_en.npz
    python benchmarks/certificate_study.py PATH.npz --resume \
        --bench-runs benchmarks/results/bench_seedless_runs.csv

``--bench-runs`` adds the skalign fits of ``bench_seedless.py`` runs files (3,000-row pools, 0
and 5 seeds) to the ROC and confusion figures (not to ``--out``); the figures are also written
to ``results/certificate_study_summary.csv``.
    python benchmarks/certificate_study.py PATH.npz --pools 1000 --seeds 0 5 --states 0
"""

import argparse
import csv
import os
from pathlib import Path

import numpy as np
import torch
from _common import write_figures
from _seedless_common import ENCODER_PAIRS, ceiling, draw, fit_skalign, load, top1_mrr
from sklearn.metrics import roc_auc_score

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--pools", type=int, nargs="+", default=[1500, 3000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 3, 5, 15, 25])
    ap.add_argument("--states", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default=str(RESULTS / "certificate_study.csv"))
    ap.add_argument("--bench-runs", nargs="*", default=[],
                    help="runs files of bench_seedless.py whose skalign fits join the study")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in --out and skip them (the file is rewritten "
                         "after every fit)")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    E = load(args.data)
    runs = read_runs(args.out) if args.resume and Path(args.out).exists() else []
    done = {(r["source"], r["target"], r["n_pool"], r["n_seed"], r["state"]) for r in runs}
    cases = [(s, t, True) for s, t in ENCODER_PAIRS] + [(s, t, False) for s, t in ENCODER_PAIRS]
    for source, target, impossible in cases:
        for n_pool in args.pools:
            for n_seed in (args.seeds if not impossible else args.seeds[:1]):
                for state in args.states:
                    key = (source, "random" if impossible else target, n_pool, n_seed, state)
                    if key in done:
                        continue
                    X, Y, partner, Xe, Ye, Xt, Yt = draw(E, source, target, state, n_pool,
                                                         impossible)
                    ceil, _ = ceiling(Xt, Yt, Xe, Ye)
                    boot, sec, warned, exact = fit_skalign(X, Y, partner, n_seed, state)
                    top1 = 0.0 if impossible else top1_mrr(Ye, boot.transform(Xe))[0]
                    ok = (not impossible) and top1 >= 0.9 * ceil
                    row = dict(source=source, target="random" if impossible else target,
                               n_pool=n_pool, n_seed=n_seed, state=state,
                               discovery=boot.discovery_, top1=round(top1, 4),
                               ceiling=round(ceil, 4), exact=round(exact, 4),
                               certificate=round(boot.certificate_, 4), warned=warned,
                               success=ok, seconds=round(sec, 1))
                    runs.append(row)
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                    write_runs(args.out, runs)
    own = len(runs)
    runs = runs + [r for path in args.bench_runs for r in bench_runs(path)]
    y = np.array([r["success"] for r in runs])
    score = np.array([r["certificate"] for r in runs])
    warned = np.array([r["warned"] for r in runs])
    auc = roc_auc_score(y, score) if 0 < y.sum() < len(y) else float("nan")
    print(f"\n{len(runs)} runs ({own} here, {len(runs) - own} from bench_seedless): "
          f"{int(y.sum())} successes, {int((~y).sum())} failures")
    print(f"ROC AUC of certificate_ for success: {auc:.4f}")
    print("                 warned   not warned")
    print(f"  success     {int((y & warned).sum()):9d} {int((y & ~warned).sum()):12d}")
    print(f"  failure     {int((~y & warned).sum()):9d} {int((~y & ~warned).sum()):12d}")
    fail, ok = score[~y], score[y]
    summary = {"runs": len(runs), "runs_here": own, "successes": int(y.sum()),
               "failures": int((~y).sum()), "roc_auc": auc,
               "failures_warned": int((~y & warned).sum()),
               "successes_warned": int((y & warned).sum()),
               "failure_certificate_max": float(fail.max()) if len(fail) else float("nan"),
               "success_certificate_min": float(ok.min()) if len(ok) else float("nan")}
    write_figures(Path(args.out).with_name(Path(args.out).stem + "_summary.csv"), summary)
    return auc


def write_runs(path, runs):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(runs[0]))
        w.writeheader()
        w.writerows(runs)


def bench_runs(path):
    """The skalign fits of a ``bench_seedless.py`` runs file, as rows of this study."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["method"].startswith("skalign")]
    return [dict(source=r["source"], target=r["target"], n_pool=int(r["n_pool"]),
                 n_seed=int(r["method"].split()[1]), state=int(r["state"]), discovery="",
                 top1=float(r["top1"]), ceiling=float(r["ceiling"]), exact=float("nan"),
                 certificate=float(r["certificate"]), warned=r["warned"] == "True",
                 success=r["success"] == "True", seconds=float(r["seconds"]))
            for r in rows]


def read_runs(path):
    """Runs written by an earlier call, numbers parsed back."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("n_pool", "n_seed", "state"):
            r[k] = int(r[k])
        for k in ("warned", "success"):
            r[k] = r[k] == "True"
        for k in ("top1", "ceiling", "exact", "certificate", "seconds"):
            r[k] = float(r[k])
    return rows


if __name__ == "__main__":
    main()
