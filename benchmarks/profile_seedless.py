"""Where a zero-pair ``AnchorBootstrapper`` fit spends its time (issue 15).

``python benchmarks/profile_seedless.py [NPZ] --pair 0 --state 9 [--top 25]`` draws the pools
as ``bench_seedless.py`` does (``--pair`` indexes its encoder pairs: 0 MiniLM → MPNet, 1 MiniLM
→ e5, 2 MPNet → e5), fits with zero pairs under cProfile and prints the fit's seconds, the load
average when it started, the torch threads (from ``OMP_NUM_THREADS``, all cores when unset),
what each restart did, and the functions with the most cumulative and own time.
Data: ``../shared/data/docstrings_en.npz``.
"""

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _seedless_common import ENCODER_PAIRS, draw, fit_skalign, load, top1_mrr  # noqa: E402

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pair", type=int, default=0)
    p.add_argument("--state", type=int, default=9)
    p.add_argument("--pool", type=int, default=3000)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    source, target = ENCODER_PAIRS[args.pair]
    X, Y, partner, Xe, Ye, _, Yt = draw(load(args.npz), source, target, args.state, args.pool)
    load_avg = os.getloadavg()[0]
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    boot, seconds, warned, exact = fit_skalign(X, Y, partner, 0, args.state, Yt=Yt)
    profile.disable()
    wall = time.perf_counter() - t0
    top1, _ = top1_mrr(Ye, boot.transform(Xe))
    print(f"{source} -> {target}, state {args.state}: fit {seconds:.1f} s ({wall:.1f} s "
          f"profiled), load {load_avg:.2f}, {torch.get_num_threads()} threads; top-1 "
          f"{top1:.3f}, {exact:.3f} of the pairs right, certificate {boot.certificate_:.3f}"
          + (" (warned)" if warned else ""))
    for r in boot.restarts_:
        print("  restart", {k: (round(v, 3) if isinstance(v, float) else v)
                            for k, v in r.items()})
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
