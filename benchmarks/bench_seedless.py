"""Zero-pair and few-seed alignment: skalign vs mini-vec2vec vs the supervised ceiling.

On every encoder pair of the development set (``../shared/data/docstrings_en.npz``), per random
state: a pool of ``--pool`` texts per side (the target side shuffled, same texts) and 1,000
held-out texts (see ``_seedless_common.py``). Rows:

* ``skalign 0 pairs``: ``AnchorBootstrapper().fit(None, None, unpaired=pool)``;
* ``skalign 5 pairs``: the same with 5 true seed pairs;
* ``mini-vec2vec defaults``: ``MiniVec2Vec().fit(A, B)`` (PyPI ``mini-vec2vec`` 0.1.2;
  n_clusters=20, n_runs=30, top_k=50, alpha=0.5, subsample=0.33). Its ``transform`` does not
  zero-pad, so narrower sources are padded here and the output cut to the target width;
* ``mini-vec2vec n_clusters=50, subsample=1.0``: ``--mv2v-other`` (the other setting tried:
  more centroids, all rows in every k-means run);
* ``Procrustes 1,000 pairs``: the supervised ceiling.

Printed: median top-1 and MRR over the states, the success rate (top-1 ≥ 0.9 × the ceiling of
the same draw) and the median fit seconds; written: ``results/bench_seedless.csv`` (one row per
pair and method, the table of the user guide), ``results/bench_seedless_runs.csv`` and
``results/bench_seedless_figures.csv`` (``key,value``: the figures the guide's prose quotes).

``--disjoint``: the source pool and the target pool hold different texts (the 3,000 texts not
held out, cut in two halves of 1,500: source embeddings of one, target embeddings of the other);
the seed pairs are source-pool texts with their own target embeddings, and the ceiling is
Procrustes on 1,000 true pairs of the source-pool texts. Written to
``results/bench_seedless_disjoint.csv`` unless ``--out`` says otherwise.

    OMP_NUM_THREADS=1 python benchmarks/bench_seedless.py ../shared/data/docstrings_en.npz
    python benchmarks/bench_seedless.py PATH.npz --states 0 1 --no-mv2v
    python benchmarks/bench_seedless.py PATH.npz --resume --mv2v-states 0 --mv2v-other "{}"
    python benchmarks/bench_seedless.py PATH.npz --disjoint --no-mv2v
"""

import argparse
import ast
import csv
import os
import re
import time
from pathlib import Path

import numpy as np
import torch
from _seedless_common import ENCODER_PAIRS, ceiling, draw, fit_skalign, load, top1_mrr

RESULTS = Path(__file__).resolve().parent / "results"
MV2V_OTHER = dict(n_clusters=50, subsample=1.0)


def fit_mv2v(X, Y, state, **params):
    """mini-vec2vec (the relative-representation variant), timed; returns a transform."""
    from mini_vec2vec import MiniVec2Vec

    t0 = time.perf_counter()
    model = MiniVec2Vec().fit(X, Y, random_seed=state, verbose=False, **params)
    seconds = time.perf_counter() - t0
    d_in, d_out = model.W.shape[0], Y.shape[1]

    def transform(A):
        A = np.pad(A, ((0, 0), (0, d_in - A.shape[1]))) if A.shape[1] < d_in else A
        return model.transform(A)[:, :d_out]

    return transform, seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--states", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--pool", type=int, default=3000)
    ap.add_argument("--no-mv2v", action="store_true", help="skip mini-vec2vec")
    ap.add_argument("--mv2v-other", type=ast.literal_eval, default=MV2V_OTHER,
                    help="mini-vec2vec fit parameters of its second row, a dict literal; {} "
                         "leaves the second row out")
    ap.add_argument("--mv2v-states", type=int, nargs="+", default=None,
                    help="random states mini-vec2vec runs on (default: all of --states)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 5],
                    help="seed-pair counts of the skalign rows")
    ap.add_argument("--pairs", type=int, nargs="+", default=list(range(len(ENCODER_PAIRS))),
                    help="indices into ENCODER_PAIRS")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in the runs CSV and skip their pair and state")
    ap.add_argument("--disjoint", action="store_true",
                    help="source and target pools from different texts (halves)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.out is None:
        name = "bench_seedless_disjoint.csv" if args.disjoint else "bench_seedless.csv"
        args.out = str(RESULTS / name)
    runs_path = Path(args.out.replace(".csv", "_runs.csv"))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if not args.no_mv2v:
        try:
            import mini_vec2vec  # noqa: F401
        except ImportError:
            print("mini-vec2vec is not installed (see pyproject.toml, extra benchmarks): skipped")
            args.no_mv2v = True
    E = load(args.data)
    runs = read_runs(runs_path) if args.resume and runs_path.exists() else []
    done = {(r["source"], r["target"], int(r["state"])) for r in runs}
    for source, target in [ENCODER_PAIRS[i] for i in args.pairs]:
        for state in args.states:
            if (source, target, state) in done:
                continue
            X, Y, partner, Xe, Ye, Xt, Yt = draw(E, source, target, state, args.pool,
                                                 disjoint=args.disjoint)
            ceil, ceil_mrr = ceiling(Xt, Yt, Xe, Ye)
            results = [("Procrustes 1,000 pairs", ceil, ceil_mrr, float("nan"), "",
                        float("nan"), "")]
            for n_seed in args.seeds:
                boot, sec, warned, _ = fit_skalign(X, Y, partner, n_seed, state, Yt=Yt)
                t1, mrr = top1_mrr(Ye, boot.transform(Xe))
                results.append((f"skalign {n_seed} pairs", t1, mrr, sec,
                                f"certificate {boot.certificate_:.3f}"
                                + (" (warned)" if warned else ""),
                                boot.certificate_, warned))
            if not args.no_mv2v and (args.mv2v_states is None or state in args.mv2v_states):
                other = ", ".join(f"{k}={v}" for k, v in args.mv2v_other.items())
                settings = [("mini-vec2vec defaults", {})]
                if args.mv2v_other:
                    settings.append((f"mini-vec2vec {other}", args.mv2v_other))
                for name, params in settings:
                    transform, sec = fit_mv2v(X, Y, state, **params)
                    t1, mrr = top1_mrr(Ye, transform(Xe))
                    results.append((name, t1, mrr, sec, "", float("nan"), ""))
            for method, t1, mrr, sec, note, cert, warned in results:
                row = dict(source=source, target=target, n_pool=len(X), state=state,
                           disjoint=args.disjoint, method=method,
                           top1=round(t1, 4), mrr=round(mrr, 4), ceiling=round(ceil, 4),
                           success=t1 >= 0.9 * ceil, seconds=round(sec, 1), note=note,
                           certificate=round(cert, 4), warned=warned)
                runs.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            write_csv(runs_path, runs)
    table = []
    kind = "disjoint texts" if args.disjoint else "same texts"
    rows = min(args.pool, 1500) if args.disjoint else args.pool
    n_states = len({r["state"] for r in runs})
    print(f"\npools of {rows} texts per side ({kind}), up to {n_states} random states per "
          "pair (column states); medians")
    print(f"{'pair':32s} {'method':42s} {'top-1':>6s} {'MRR':>6s} {'success':>8s} {'fit s':>6s} "
          f"{'states':>6s}")
    for source, target in ENCODER_PAIRS:
        methods = dict.fromkeys(r["method"] for r in runs if r["source"] == source
                                and r["target"] == target)
        if not methods:
            continue
        for method in methods:
            rs = [r for r in runs if (r["source"], r["target"], r["method"])
                  == (source, target, method)]
            summary = {
                "pair": f"{source} → {target}", "method": method,
                "top1": round(float(np.median([r["top1"] for r in rs])), 3),
                "mrr": round(float(np.median([r["mrr"] for r in rs])), 3),
                "success": f"{sum(r['success'] for r in rs)}/{len(rs)}",
                "seconds": round(float(np.median([r["seconds"] for r in rs])), 1)
                if method != "Procrustes 1,000 pairs" else "",
                "states": len(rs),
            }
            table.append(summary)
            print(f"{summary['pair']:32s} {method:42s} {summary['top1']:6.3f} "
                  f"{summary['mrr']:6.3f} {summary['success']:>8s} {summary['seconds']!s:>6s} "
                  f"{len(rs):6d}")
    write_csv(Path(args.out), table)
    write_csv(Path(args.out.replace(".csv", "_figures.csv")), figures(runs))
    return table


def figures(runs):
    """``key,value`` rows quoted in the user guide: per pair and method, over the states.

    Keys ``<source>__<target>__<method>__<what>``, the method as a slug (``skalign_0_pairs``);
    ``what``: ``top1`` (median), ``top1_min``, ``ratio_min`` (smallest top-1 / ceiling),
    ``successes``, ``warned``, ``states``, ``seconds`` (median), ``seconds_max``.
    """
    out = []
    for source, target in ENCODER_PAIRS:
        rs = [r for r in runs if (r["source"], r["target"]) == (source, target)]
        for method in dict.fromkeys(r["method"] for r in rs):
            m = [r for r in rs if r["method"] == method]
            slug = re.sub(r"\W+", "_", method.lower()).strip("_")
            top1 = [r["top1"] for r in m]
            values = {"top1": np.median(top1), "top1_min": min(top1),
                      "ratio_min": min(r["top1"] / r["ceiling"] for r in m),
                      "successes": sum(r["success"] for r in m),
                      "warned": sum(str(r["warned"]) == "True" for r in m),
                      "states": len(m)}
            if method != "Procrustes 1,000 pairs":
                values["seconds"] = np.median([r["seconds"] for r in m])
                values["seconds_max"] = max(r["seconds"] for r in m)
            out += [{"key": f"{source}__{target}__{slug}__{k}", "value": round(float(v), 4)}
                    for k, v in values.items()]
    return out


def write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def read_runs(path):
    """Runs written by an earlier call, numbers parsed back."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["state"] = int(r["state"])
        r["success"] = r["success"] == "True"
        for k in ("top1", "mrr", "ceiling", "seconds"):
            r[k] = float(r[k])
    return rows


if __name__ == "__main__":
    main()
