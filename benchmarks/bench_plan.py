"""Wall time of ``skalign plan`` on 2,000 pairs and a 100,000-row sample of each store.

``python benchmarks/bench_plan.py [NPZ] [--pairs 2000] [--store-rows 100000] [--workdir DIR]
[--quick]``

The development set has only 4,000 texts, so the 100,000-row store samples are **synthesised**:
the old encoder's (MiniLM) and the new encoder's (MPNet) rows of the 2,000 texts outside the
pairs, tiled 50 times with Gaussian noise of 0.05 × the mean row norm added to every copy, the
target sample shuffled. They are written as ``.npy`` files with the pairs, and the command
``skalign plan --source A --target B --unpaired-source P --unpaired-target Q --store-size
100000 --json --report plan.html`` runs in this process (reading, the default candidates —
procrustes, linear, bootstrap — both sides, the learning curve, the ceiling and the report
included). Target (issue 16): <= 60 s on 2 cores. Run with ``OMP_NUM_THREADS`` unset to use both.
``--csv PATH`` writes the figures as ``key,value`` (``benchmarks/results/bench_plan.csv``, quoted
by the user guide).
"""

import argparse
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import write_figures

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--store-rows", type=int, default=100000)
    p.add_argument("--workdir", default=None)
    p.add_argument("--quick", action="store_true", help="500 pairs, 10,000-row samples")
    p.add_argument("--csv", default=None, help="also write the figures (key,value) here")
    args = p.parse_args(argv)
    if args.quick:
        args.pairs, args.store_rows = 500, 10000
    Z = np.load(args.npz)
    A, B = Z["minilm_l6"].astype(np.float32), Z["mpnet_base"].astype(np.float32)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(A))
    pairs, rest = perm[:args.pairs], perm[args.pairs:]
    reps = -(-args.store_rows // len(rest))

    def tiled(M):
        T = np.tile(M[rest], (reps, 1))[:args.store_rows]
        scale = 0.05 * np.linalg.norm(M, axis=1).mean() / np.sqrt(M.shape[1])
        return T + scale * rng.standard_normal(T.shape, dtype=np.float32)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_plan_"))
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "a.npy", A[pairs])
    np.save(work / "b.npy", B[pairs])
    np.save(work / "p.npy", tiled(A))
    np.save(work / "q.npy", rng.permutation(tiled(B)))
    from skalign.cli import main as cli

    lines = []
    buf = io.StringIO()
    import resource

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        status = cli(["plan", "--source", str(work / "a.npy"), "--target", str(work / "b.npy"),
                      "--unpaired-source", str(work / "p.npy"), "--unpaired-target",
                      str(work / "q.npy"), "--store-size", str(args.store_rows), "--json",
                      "--report", str(work / "plan.html")])
    secs = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    plan = json.loads(buf.getvalue())
    lines.append(f"skalign plan: {args.pairs} pairs + {args.store_rows:,}-row store samples "
                 f"(synthesised), exit {status}: {secs:.1f} s wall, {cpu:.1f} s CPU "
                 f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
                 f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    lines.append(f"recommendation: {plan['recommendation']['action']} with "
                 f"{plan['recommendation']['method']} ({plan['recommendation']['side']} side)")
    for line in lines:
        print(line)
    if args.csv:
        write_figures(args.csv, [("pairs", args.pairs), ("store_rows", args.store_rows),
                                 ("wall_s", secs), ("cpu_s", cpu), ("cpu_count", os.cpu_count()),
                                 ("load_avg_1min_end", os.getloadavg()[0]),
                                 ("exit_status", status)])
    if not args.workdir:
        shutil.rmtree(work)
    return secs


if __name__ == "__main__":
    main()
