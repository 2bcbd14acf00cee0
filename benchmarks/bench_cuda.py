"""skalign on a CUDA device against the same machine's CPU: fit seconds, quality, throughput.

Three parts, each a table (and a CSV under ``--out``), all on the development set
``docstrings_en.npz`` (``../shared/data``) and all on one machine, so the CPU and GPU columns
compare:

``estimators``
    Every estimator that translates, fitted on 1,000 MiniLM -> MPNet pairs (GeRA and the
    bootstrapper also get a 2,000-row unpaired pool), device ``"cpu"`` then ``"cuda"``: fit
    seconds (median of ``--repeats`` fits after one warm-up fit) and top-1 on 1,000 held-out
    texts.
``seedless``
    ``AnchorBootstrapper`` from 0 and 5 seed pairs on the draws of ``bench_seedless.py`` (pools of
    3,000 texts, the same split and success rule: top-1 >= 0.9 x Procrustes on 1,000 true pairs),
    on the GPU for ``--states``, and on the CPU (all cores) for the first state; mini-vec2vec
    (its defaults, CPU) beside them where it is installed.
``transform``
    One fitted 384 -> 768 Procrustes model applied to 1,000,000 numpy rows (numpy in, numpy out,
    so the host-device copies count) on each device: rows per second, median of ``--repeats``;
    then the GPU's stages one by one (copies in, product, copies out).

Run ``python benchmarks/bench_cuda.py DATA --out DIR``; on a machine without CUDA it says so and
stops. The user guide's GPU section was made from a run on a lent NVIDIA H100 (16 CPU cores).
"""

import argparse
import copy
import csv
import os
import time
from pathlib import Path

import numpy as np
import sklearn
import torch
from _common import batch_rows, write_rows
from _real import ENCODER_PAIRS, ceiling_map, draw, fit_skalign, load, top1_mrr

PAIR = ("minilm_l6", "mpnet_base")


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, repeats):
    fn()  # warm-up: CUDA context, kernels, cuBLAS/cuSOLVER handles
    times = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        out = fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def estimators(E, repeats, gpu):
    from skalign import (
        AnchorBootstrapper,
        ASIFAligner,
        GeRAAligner,
        InverseRelativeProjector,
        LinearAligner,
        ProcrustesAligner,
        UnpairedPool,
    )

    rows = np.random.default_rng(0).permutation(len(E[PAIR[0]]))
    pairs, pool, test = rows[:1000], rows[1000:3000], rows[-1000:]
    X, Y = E[PAIR[0]], E[PAIR[1]]
    unpaired = UnpairedPool(X=X[pool], y=Y[pool])
    made = [
        ("ProcrustesAligner", lambda d: ProcrustesAligner(device=d), False),
        ("LinearAligner", lambda d: LinearAligner(device=d), False),
        ("ASIFAligner", lambda d: ASIFAligner(device=d), False),
        ("InverseRelativeProjector", lambda d: InverseRelativeProjector(random_state=0, device=d),
         False),
        ("GeRAAligner", lambda d: GeRAAligner(random_state=0, device=d), True),
        ("AnchorBootstrapper (15 seeds)", lambda d: AnchorBootstrapper(random_state=0, device=d),
         True),
    ]
    out = []
    for name, make, with_pool in made:
        row = {"estimator": name}
        for label, device in (("cpu", "cpu"), ("gpu", gpu)):
            if name.startswith("AnchorBootstrapper"):
                def fit(d=device):
                    return make(d).fit(X[pairs[:15]], Y[pairs[:15]], unpaired)
            elif with_pool:
                def fit(d=device):
                    return make(d).fit(X[pairs], Y[pairs], unpaired)
            else:
                def fit(d=device):
                    return make(d).fit(X[pairs], Y[pairs])
            seconds, est = _timed(fit, repeats)
            pred = est.transform(X[test])
            if pred.shape[1] == Y.shape[1]:
                top1, _ = top1_mrr(Y[test], pred)
            else:  # ASIF, GeRA: both sides in their shared space
                top1, _ = top1_mrr(est.transform_target(Y[test]), pred)
            row[f"{label}_s"] = round(seconds, 3)
            row[f"{label}_top1"] = round(top1, 3)
        row["speed-up"] = round(row["cpu_s"] / row["gpu_s"], 1)
        out.append(row)
        print(row, flush=True)
    return out


def seedless(E, states, seeds, gpu):
    try:
        import mini_vec2vec  # noqa: F401
        from bench_seedless import fit_mv2v
        have_mv2v = True
    except ImportError:
        have_mv2v = False
    fit_skalign(*draw(E, *PAIR, 0, 300)[:3], 0, 0, device=gpu)  # warm-up
    out = []
    for source, target in ENCODER_PAIRS:
        for state in states:
            X, Y, partner, Xe, Ye, Xt, Yt = draw(E, source, target, state, 3000)
            ceil, _ = top1_mrr(Ye, ceiling_map(Xt, Yt).transform(Xe))
            runs = [(gpu, n) for n in seeds]
            if state == states[0]:
                runs += [("cpu", n) for n in seeds] + ([("mini-vec2vec", 0)] if have_mv2v else [])
            for device, n_seed in runs:
                if device == "mini-vec2vec":
                    transform, seconds, _ = fit_mv2v(X, Y, state)
                    top1, mrr = top1_mrr(Ye, transform(Xe))
                    warned, cert = "", float("nan")
                else:
                    _sync()
                    boot, seconds, warned, _ = fit_skalign(X, Y, partner, n_seed, state,
                                                           device=device)
                    _sync()
                    top1, mrr = top1_mrr(Ye, boot.transform(Xe))
                    cert = boot.certificate_
                row = dict(pair=f"{source} -> {target}", state=state, seeds=n_seed,
                           device=device, seconds=round(seconds, 2), top1=round(top1, 4),
                           mrr=round(mrr, 4), ceiling=round(ceil, 4),
                           success=top1 >= 0.9 * ceil, certificate=round(cert, 3),
                           warned=warned)
                out.append(row)
                print(row, flush=True)
    return out


def transform(E, n_rows, repeats, gpu):
    """Throughput of one fitted model on each device, and where the GPU's time goes."""
    from skalign import ProcrustesAligner

    n_fit = min(2000, len(E[PAIR[0]]) * 2 // 3)  # the rest: real rows to compare two fits on
    X, Y = E[PAIR[0]][:n_fit], E[PAIR[1]][:n_fit]
    big = np.random.default_rng(0).standard_normal((n_rows, X.shape[1])).astype(np.float32)
    model = ProcrustesAligner(device=gpu).fit(X, Y)
    on_cpu = copy.copy(model)
    on_cpu.device_ = "cpu"  # the same fitted map, applied on the CPU (numpy path)
    refit = ProcrustesAligner(device="cpu").fit(X, Y)
    real = E[PAIR[0]][n_fit:]
    out = []
    results = {}
    for label, est in (("cpu", on_cpu), ("gpu", model)):
        seconds, Z = _timed(lambda m=est: m.transform(big), repeats)
        results[label] = Z
        row = dict(what=f"transform, numpy in/out ({label})", rows=n_rows,
                   seconds=round(seconds, 3), rows_per_s=int(n_rows / seconds))
        out.append(row)
        print(row, flush=True)
    out[-1]["max_abs_diff"] = float(np.abs(results["gpu"] - results["cpu"]).max())
    # the same map fitted on each device, on real rows (random rows also probe the directions
    # the 2,000 fitting pairs leave undetermined: the cross-covariance has rank < 384 there)
    diff = np.abs(model.transform(real) - refit.transform(real)).max()
    out.append(dict(what="CPU fit vs GPU fit, real rows", rows=len(real), max_abs_diff=float(diff)))
    if not gpu.startswith("cuda"):
        return out
    # the stages of the GPU path: the fitted affine map (its public attributes) as the product
    # that dominates it, in transform's batches (input and output counted twice)
    W, mu_x, mu_y = (torch.as_tensor(a, dtype=torch.float32, device=gpu) for a in (
        model.components_ * model.scale_, model.source_mean_, model.target_mean_))

    def fn(b):
        return (b - mu_x) @ W + mu_y

    batch = batch_rows(2 * (X.shape[1] + Y.shape[1]),
                       working_memory=sklearn.get_config()["working_memory"])
    slices = [slice(lo, min(lo + batch, n_rows)) for lo in range(0, n_rows, batch)]
    dev_in = [torch.from_numpy(big[r]).to(gpu) for r in slices]
    dev_out = [fn(b) for b in dev_in]
    host = np.empty((n_rows, Y.shape[1]), np.float32)
    stages = {
        "host -> GPU copies": lambda: [torch.from_numpy(big[r]).to(gpu) for r in slices],
        "GPU compute only": lambda: [fn(b) for b in dev_in],
        "GPU -> host copies into the output": lambda: [
            torch.from_numpy(host[r]).copy_(o) for r, o in zip(slices, dev_out)],
        "GPU -> host, new tensor then copy (before)": lambda: [
            host.__setitem__(r, o.to("cpu").numpy()) for r, o in zip(slices, dev_out)],
    }
    for what, stage in stages.items():
        seconds, _ = _timed(stage, repeats)
        row = dict(what=what, rows=n_rows, seconds=round(seconds, 3),
                   rows_per_s=int(n_rows / seconds), batch_rows=batch)
        out.append(row)
        print(row, flush=True)
    return out


def _print(title, rows):
    fields = list(dict.fromkeys(k for r in rows for k in r))
    print(f"\n{title}")
    print("  ".join(f"{f:>12s}" if i else f"{f:34s}" for i, f in enumerate(fields)))
    for r in rows:
        print("  ".join(f"{r.get(f, '')!s:>12s}" if i else f"{r.get(f, '')!s:34s}"
                        for i, f in enumerate(fields)))


def figures(out):
    """``key,value`` rows quoted in the user guide, from the part CSVs in ``out``."""
    rows = []

    def add(key, value):
        if value not in ("", None):
            rows.append({"key": key, "value": value})

    def read(part):
        path = out / f"bench_cuda_{part}.csv"
        if not path.exists():
            return []
        with open(path, newline="") as f:
            return list(csv.DictReader(f))

    for r in read("estimators"):
        slug = r["estimator"].split(" ")[0]
        for k in ("cpu_s", "gpu_s", "cpu_top1", "gpu_top1", "speed-up"):
            add(f"{slug}__{k.replace('-', '_')}", r[k])
    for r in read("seedless"):
        pair = r["pair"].replace(" -> ", "__")
        add(f"{pair}__state{r['state']}__{r['seeds']}_seeds__{r['device'].replace('-', '')}__"
            "seconds", r["seconds"])
        add(f"{pair}__state{r['state']}__{r['seeds']}_seeds__{r['device'].replace('-', '')}__"
            "top1", r["top1"])
    names = {"transform, numpy in/out (cpu)": "transform_cpu",
             "transform, numpy in/out (gpu)": "transform_gpu",
             "CPU fit vs GPU fit, real rows": "fits_real_rows",
             "host -> GPU copies": "h2d", "GPU compute only": "compute",
             "GPU -> host copies into the output": "d2h_into_output",
             "GPU -> host, new tensor then copy (before)": "d2h_before"}
    for r in read("transform"):
        for k in ("seconds", "rows_per_s", "max_abs_diff"):
            add(f"{names.get(r['what'], r['what'])}__{k}", r.get(k))
    write_rows(out / "bench_cuda_figures.csv", rows)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="docstrings_en.npz")
    ap.add_argument("--out", default=".")
    ap.add_argument("--parts", nargs="+", default=["transform", "estimators", "seedless"])
    ap.add_argument("--states", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 5])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--figures-only", action="store_true",
                    help="only write bench_cuda_figures.csv from the part CSVs in --out")
    ap.add_argument("--gpu", default="cuda",
                    help="device of the accelerated column ('cpu' only to try the script out)")
    args = ap.parse_args(argv)
    if args.figures_only:
        return figures(Path(args.out))
    if args.gpu.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("bench_cuda.py needs a CUDA device: torch.cuda.is_available() is False")
    name = torch.cuda.get_device_name() if args.gpu.startswith("cuda") else args.gpu
    print(f"device: {name}, torch {torch.__version__}, "
          f"{os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}", flush=True)
    E = load(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tables = {}
    for part in args.parts:
        if part == "estimators":
            tables[part] = estimators(E, args.repeats, args.gpu)
        elif part == "seedless":
            tables[part] = seedless(E, args.states, args.seeds, args.gpu)
        elif part == "transform":
            tables[part] = transform(E, int(args.rows), args.repeats, args.gpu)
        write_rows(out / f"bench_cuda_{part}.csv", tables[part])
    figures(out)
    for part, rows in tables.items():
        _print(part, rows)


if __name__ == "__main__":
    main()
