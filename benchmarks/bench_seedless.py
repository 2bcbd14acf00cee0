"""Zero-pair and few-seed alignment: skalign vs mini-vec2vec vs the supervised ceiling.

On every encoder pair of the development set (``../shared/data/docstrings_en.npz``), per random
state: a pool of ``--pool`` texts per side (the target side shuffled, same texts) and 1,000
held-out texts (``_real.draw``). Rows:

* ``skalign 0 pairs``: ``AnchorBootstrapper().fit(None, None, unpaired=pool)``;
* ``skalign 5 pairs``: the same with 5 true seed pairs;
* ``mini-vec2vec defaults``: ``MiniVec2Vec().fit(A, B)`` (PyPI ``mini-vec2vec`` 0.1.2;
  n_clusters=20, n_runs=30, top_k=50, alpha=0.5, subsample=0.33). Its ``transform`` does not
  zero-pad, so narrower sources are padded here and the output cut to the target width;
* ``mini-vec2vec n_clusters=50, subsample=1.0``: ``--mv2v-other`` (the other setting tried:
  more centroids, all rows in every k-means run);
* ``Procrustes 1,000 pairs``: the supervised ceiling.

Printed and written per pair and method: median top-1, MRR and neighbourhood retention
(``recall10``, :func:`skalign.metrics.retrieval_retention` of the held-out texts as a translated
store) over the states, the successes (top-1 ≥ 0.9 × the ceiling of the same draw), median fit
seconds and CPU seconds (all threads: unlike the wall time it barely moves on a shared machine).
Each run's row also holds the load average when its fit started and the torch threads. Files:
``results/bench_seedless.csv`` (the user guide's table), ``_runs.csv`` (every run) and
``_figures.csv`` (``key,value``: the figures its prose quotes).

``--crosslingual``: the English -> German pairs of ``benchmarks/data/crosslingual_de.npz`` (its
path as DATA; 2,897 texts, so pools of at most 1,897 rows: use ``--pool 1500``), MiniLM English
-> e5 German and e5 English -> e5 German; for the second, one model in two languages, a row
``no map`` (the raw embeddings, each side centred as in every row's ranking) is the reference to
beat. Written to ``results/bench_seedless_crosslingual.csv`` unless ``--out`` says otherwise.

``--disjoint``: the source pool and the target pool hold different texts (the 3,000 texts not
held out, cut in two halves of 1,500: source embeddings of one, target embeddings of the other);
the seed pairs are source-pool texts with their own target embeddings, and the ceiling is
Procrustes on 1,000 true pairs of the source-pool texts. Written to
``results/bench_seedless_disjoint.csv`` unless ``--out`` says otherwise.

    OMP_NUM_THREADS=1 python benchmarks/bench_seedless.py ../shared/data/docstrings_en.npz
    python benchmarks/bench_seedless.py PATH.npz --states 0 1 --no-mv2v
    python benchmarks/bench_seedless.py PATH.npz --resume --mv2v-other "{}"
    python benchmarks/bench_seedless.py PATH.npz --disjoint --no-mv2v
    python benchmarks/bench_seedless.py benchmarks/data/crosslingual_de.npz --crosslingual \
        --pool 1500
    python benchmarks/bench_seedless.py PATH.npz --resume --no-mv2v --merge A_runs.csv B_runs.csv
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
from _common import write_rows
from _real import (
    CROSSLINGUAL_PAIRS,
    ENCODER_PAIRS,
    ceiling_map,
    draw,
    fit_skalign,
    load,
    retention10,
    top1_mrr,
)

RESULTS = Path(__file__).resolve().parent / "results"
CEILING = "Procrustes 1,000 pairs"
MV2V_OTHER = dict(n_clusters=50, subsample=1.0)
NO_MAP = "no map"
#: the encoder pairs of this run: ENCODER_PAIRS, or CROSSLINGUAL_PAIRS with --crosslingual
PAIRS = list(ENCODER_PAIRS)


def fit_mv2v(X, Y, state, **params):
    """mini-vec2vec (the relative-representation variant), timed; returns a transform."""
    from mini_vec2vec import MiniVec2Vec

    t0, c0 = time.perf_counter(), time.process_time()
    model = MiniVec2Vec().fit(X, Y, random_seed=state, verbose=False, **params)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    d_in, d_out = model.W.shape[0], Y.shape[1]

    def transform(A):
        A = np.pad(A, ((0, 0), (0, d_in - A.shape[1]))) if A.shape[1] < d_in else A
        return model.transform(A)[:, :d_out]

    return transform, seconds, cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--states", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--pool", type=int, default=3000)
    ap.add_argument("--no-mv2v", action="store_true", help="skip mini-vec2vec")
    ap.add_argument("--mv2v-other", type=ast.literal_eval, default=MV2V_OTHER,
                    help="mini-vec2vec fit parameters of its second row, a dict literal; {} "
                         "leaves the second row out")
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 5],
                    help="seed-pair counts of the skalign rows (none: no skalign rows)")
    ap.add_argument("--pairs", type=int, nargs="+", default=None,
                    help="indices into ENCODER_PAIRS (CROSSLINGUAL_PAIRS with --crosslingual)")
    ap.add_argument("--crosslingual", action="store_true",
                    help="DATA is crosslingual_de.npz: its English -> German pairs")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in the runs CSV and skip the methods that ran "
                         "on their pair and state")
    ap.add_argument("--merge", nargs="+", default=[], metavar="RUNS_CSV",
                    help="with --resume: runs CSVs of other calls (e.g. run side by side with "
                         "their own --out) whose rows replace those of the same pair, state and "
                         "method")
    ap.add_argument("--disjoint", action="store_true",
                    help="source and target pools from different texts (halves)")
    ap.add_argument("--device", default="cpu",
                    help="where skalign's fits run (its rows are named '... (DEVICE)' when not "
                         "the CPU); mini-vec2vec runs on the CPU")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    global PAIRS
    PAIRS = list(CROSSLINGUAL_PAIRS if args.crosslingual else ENCODER_PAIRS)
    if args.pairs is None:
        args.pairs = list(range(len(PAIRS)))
    if args.out is None:
        name = "bench_seedless_disjoint.csv" if args.disjoint else "bench_seedless.csv"
        if args.crosslingual:
            name = name.replace("bench_seedless", "bench_seedless_crosslingual")
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
    for path in args.merge:
        new = read_runs(Path(path))
        keys = {run_key(r) for r in new}
        runs = [r for r in runs if run_key(r) not in keys] + new
    if args.merge:
        write_rows(runs_path, sorted(runs, key=run_order))
    threads = torch.get_num_threads()
    for source, target in [PAIRS[i] for i in args.pairs]:
        for state in args.states:
            done = {r["method"] for r in runs
                    if (r["source"], r["target"], r["state"]) == (source, target, state)}
            other = ", ".join(f"{k}={v}" for k, v in args.mv2v_other.items())
            settings = [] if args.no_mv2v else [("mini-vec2vec defaults", {})]
            if settings and args.mv2v_other:
                settings.append((f"mini-vec2vec {other}", args.mv2v_other))
            wanted = [w for w in [_skalign_method(n, args.device) for n in args.seeds]
                      + [n for n, _ in settings] if w not in done]
            if not wanted:
                continue
            runs = [r for r in runs if not ((r["source"], r["target"], r["state"])
                                            == (source, target, state)
                                            and r["method"] in {*wanted, CEILING, NO_MAP})]
            X, Y, partner, Xe, Ye, Xt, Yt = draw(E, source, target, state, args.pool,
                                                 disjoint=args.disjoint)
            ceil_pred = ceiling_map(Xt, Yt).transform(Xe)
            ceil = top1_mrr(Ye, ceil_pred)[0]
            nan = float("nan")

            def row(method, pred, sec=nan, cpu=nan, note="", cert=nan, warned="", load_avg=""):
                t1, mrr = top1_mrr(Ye, pred)
                return dict(source=source, target=target, n_pool=len(X), state=state,
                            disjoint=args.disjoint, method=method, top1=round(t1, 4),
                            mrr=round(mrr, 4), recall10=round(retention10(Ye, pred), 4),
                            ceiling=round(ceil, 4), success=t1 >= 0.9 * ceil,
                            seconds=round(sec, 1), cpu_seconds=round(cpu, 1), note=note,
                            certificate=round(cert, 4), warned=warned,
                            load=round(load_avg, 2) if load_avg != "" else "",
                            threads=threads if load_avg != "" else "")

            results = [row(CEILING, ceil_pred)]
            if args.crosslingual and source.split("_", 1)[1] == target.split("_", 1)[1]:
                # one model, two languages: the raw embeddings are the reference to beat
                results.append(row(NO_MAP, Xe))
            for n_seed in args.seeds:
                method = _skalign_method(n_seed, args.device)
                if method not in wanted:
                    continue
                load_avg, c0 = os.getloadavg()[0], time.process_time()
                boot, sec, warned, _ = fit_skalign(X, Y, partner, n_seed, state, Yt=Yt,
                                                   device=args.device)
                results.append(row(method, boot.transform(Xe), sec, time.process_time() - c0,
                                   f"certificate {boot.certificate_:.3f}"
                                   + (" (warned)" if warned else ""),
                                   boot.certificate_, warned, load_avg))
            for name, params in settings:
                if name not in wanted:
                    continue
                load_avg = os.getloadavg()[0]
                transform, sec, cpu = fit_mv2v(X, Y, state, **params)
                results.append(row(name, transform(Xe), sec, cpu, load_avg=load_avg))
            for r in results:
                runs.append(r)
                print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
            write_rows(runs_path, sorted(runs, key=run_order))
    table = []
    kind = "disjoint texts" if args.disjoint else "same texts"
    rows = min(args.pool, 1500) if args.disjoint else args.pool
    n_states = len({r["state"] for r in runs})
    print(f"\npools of {rows} texts per side ({kind}), up to {n_states} random states per "
          "pair (column states); medians")
    print(f"{'pair':32s} {'method':42s} {'top-1':>6s} {'MRR':>6s} {'R@10':>6s} {'success':>8s} "
          f"{'fit s':>6s} {'cpu s':>6s} {'states':>6s}")
    for source, target in PAIRS:
        methods = sorted(dict.fromkeys(r["method"] for r in runs if r["source"] == source
                                       and r["target"] == target), key=method_order)
        if not methods:
            continue
        for method in methods:
            rs = [r for r in runs if (r["source"], r["target"], r["method"])
                  == (source, target, method)]
            summary = {
                "pair": f"{source} → {target}", "method": method,
                "top1": round(float(np.median([r["top1"] for r in rs])), 3),
                "mrr": round(float(np.median([r["mrr"] for r in rs])), 3),
                "recall10": _median_recall(rs),
                "success": f"{sum(r['success'] for r in rs)}/{len(rs)}",
                "seconds": round(float(np.median([r["seconds"] for r in rs])), 1)
                if method not in (CEILING, NO_MAP) else "",
                "cpu_seconds": _median_cpu(rs) if method not in (CEILING, NO_MAP) else "",
                "states": len(rs),
            }
            table.append(summary)
            print(f"{summary['pair']:32s} {method:42s} {summary['top1']:6.3f} "
                  f"{summary['mrr']:6.3f} {summary['recall10']!s:>6s} {summary['success']:>8s} "
                  f"{summary['seconds']!s:>6s} "
                  f"{summary['cpu_seconds']!s:>6s} {len(rs):6d}")
    write_rows(Path(args.out), table)
    write_rows(Path(args.out.replace(".csv", "_figures.csv")), figures(runs))
    return table


def _skalign_method(n_seed, device):
    return f"skalign {n_seed} pairs" + ("" if device == "cpu" else f" ({device})")


def figures(runs):
    """``key,value`` rows quoted in the user guide: per pair and method, over the states.

    Keys ``<source>__<target>__<method>__<what>``, the method as a slug (``skalign_0_pairs``);
    ``what``: ``top1`` (median), ``top1_min``, ``recall10`` (median) and ``recall10_min``
    (where every run has it), ``ratio_min`` (smallest top-1 / ceiling),
    ``successes``, ``warned``, ``states``, ``seconds`` (median), ``seconds_max``,
    ``cpu_seconds`` (median), ``cpu_seconds_max``, ``cpu_seconds_success_max`` (the successful
    runs' largest), ``load_min`` and ``load_max``.
    """
    out = []
    for source, target in PAIRS:
        rs = [r for r in runs if (r["source"], r["target"]) == (source, target)]
        for method in sorted(dict.fromkeys(r["method"] for r in rs), key=method_order):
            m = [r for r in rs if r["method"] == method]
            slug = re.sub(r"\W+", "_", method.lower()).strip("_")
            top1 = [r["top1"] for r in m]
            values = {"top1": np.median(top1), "top1_min": min(top1),
                      **({"recall10": _median_recall(m), "recall10_min":
                          min(r["recall10"] for r in m)} if _median_recall(m) != "" else {}),
                      "ratio_min": min(r["top1"] / r["ceiling"] for r in m),
                      "successes": sum(r["success"] for r in m),
                      "warned": sum(str(r["warned"]) == "True" for r in m),
                      "states": len(m)}
            if method not in (CEILING, NO_MAP):
                values["seconds"] = np.median([r["seconds"] for r in m])
                values["seconds_max"] = max(r["seconds"] for r in m)
                cpu = _cpu_seconds(m)
                if cpu:  # runs from before the column have none
                    values["cpu_seconds"], values["cpu_seconds_max"] = np.median(cpu), max(cpu)
                    won = _cpu_seconds([r for r in m if r["success"]])
                    if won:
                        values["cpu_seconds_success_max"] = max(won)
                loads = [float(r["load"]) for r in m if r.get("load") not in (None, "")]
                if loads:  # 1-minute load average when each fit started (newer runs only)
                    values["load_min"], values["load_max"] = min(loads), max(loads)
            out += [{"key": f"{source}__{target}__{slug}__{k}", "value": round(float(v), 4)}
                    for k, v in values.items()]
    return out


def _cpu_seconds(runs):
    """CPU seconds of the runs that have them (runs from before the column hold NaN)."""
    return [r["cpu_seconds"] for r in runs if not np.isnan(r["cpu_seconds"])]


def _median_recall(runs):
    """Median recall@10 retention over the runs, "" unless every run has it (runs from before
    the column have none)."""
    r10 = [r.get("recall10", float("nan")) for r in runs]
    return "" if np.isnan(r10).any() else round(float(np.median(r10)), 3)


def _median_cpu(runs):
    """Median CPU seconds of the runs that have them ("" where none has)."""
    cpu = _cpu_seconds(runs)
    return round(float(np.median(cpu)), 1) if cpu else ""


def run_key(r):
    return r["source"], r["target"], r["state"], r["method"]


def run_order(r):
    """Runs by encoder pair, state, then method (the table's order)."""
    return PAIRS.index((r["source"], r["target"])), r["state"], method_order(r["method"])


def method_order(method):
    """The table's order: the ceiling, no map, skalign by seed count, then mini-vec2vec."""
    seeds = re.match(r"skalign (\d+) pairs", method)
    if method in (CEILING, NO_MAP):
        return 0, int(method == NO_MAP)
    return (1, int(seeds[1])) if seeds else (2, method)


def read_runs(path):
    """Runs written by an earlier call, numbers parsed back."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["state"] = int(r["state"])
        r["success"] = r["success"] == "True"
        for k in ("top1", "mrr", "ceiling", "seconds"):
            r[k] = float(r[k])
        r["cpu_seconds"] = float(r.get("cpu_seconds") or "nan")
        r["recall10"] = float(r.get("recall10") or "nan")
    return rows


if __name__ == "__main__":
    main()
