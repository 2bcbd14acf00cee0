"""Default fits alone and beside a CPU hog on every core, side by side; the bootstrapper's guard.

``python benchmarks/bench_busy.py [--data ../shared/data/docstrings_en.npz] [--pairs 2000]
[--pool 3000] [--seeds 15 200 1000] [--repeats 1] [--only NAME ...] [--hogs N]``

Part 1: each estimator's default fit on the real development set (MiniLM → MPNet,
``--pairs`` training pairs; the ensemble on MiniLM and mE5, the zero-pair and seeded
bootstrapper on ``--pool``-row unpaired pools, IRP on 1,000 anchors into MPNet's 768
dimensions), timed once on the machine as it is ("idle") and once with ``--hogs`` processes
(default: one per core) spinning beside it ("busy"), one right after the other, ``--repeats``
times each; the table gives the medians, busy/idle and the 1-minute load average read before
each measurement. The first row, a fixed loop of pure Python on one thread, is the control: its
busy/idle is what the machine's scheduler gives any one-thread work beside the hogs.

Part 2: ``AnchorBootstrapper`` with its guard (the default, ``validation_fraction=0.2``) and
without it (``validation_fraction=None``) at each ``--seeds`` count, back to back on the same
split: seconds, guarded/unguarded, and the top-1 of the seed pairs' own Procrustes map (the
start), of the guarded and of the unguarded fit on held-out texts (1,000 rows, both sides
centred, the mapped source text's nearest target by cosine among the held-out targets).

Public API only. Nothing it prints is committed.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from skalign import (
    AnchorBootstrapper,
    ASIFAligner,
    GeRAAligner,
    InverseRelativeProjector,
    LinearAligner,
    OrthogonalEnsembleAligner,
    ProcrustesAligner,
    RelativeProjector,
    UnpairedPool,
    stack_views,
)
from skalign.datasets import load_docstring_embeddings
from skalign.metrics import top_k_accuracy

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"
N_TEST = 1000


_SPIN = "import os\nos.setsid()\nwhile True:\n    pass\n"


class Hogs:
    """``n`` processes spinning on the CPU, each in a session of its own (a job started from
    another shell), started once and paused (SIGSTOP) between the busy measurements."""

    def __init__(self, n):
        self.procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(n)]
        self.pause()

    def pause(self):
        for p in self.procs:
            p.send_signal(signal.SIGSTOP)

    def resume(self):
        for p in self.procs:
            p.send_signal(signal.SIGCONT)
        time.sleep(0.5)  # every hog on a core before the clock starts

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()


def load1():
    return os.getloadavg()[0]


def timed(fn):
    load = load1()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn()
    return time.perf_counter() - t0, load, out


def side_by_side(fn, hogs, repeats):
    """Median seconds (and highest loads) of ``fn`` alone and beside the ``hogs``, alternating."""
    idle, busy, li, lb = [], [], [], []
    for _ in range(repeats):
        s, load, _ = timed(fn)
        idle.append(s)
        li.append(load)
        hogs.resume()
        try:
            s, load, _ = timed(fn)
        finally:
            hogs.pause()
        busy.append(s)
        lb.append(load)
    return statistics.median(idle), statistics.median(busy), max(li), max(lb)


def split(A, B, n_known, n_pool, seed=0):
    """Held-out rows, known pairs and unpaired pools (the known pairs among the pool's rows,
    the target side shuffled)."""
    perm = np.random.default_rng(seed).permutation(len(A))
    test, rest = perm[:N_TEST], perm[N_TEST:N_TEST + n_pool]
    known = rest[:n_known]
    pool = UnpairedPool(X=A[rest], y=B[np.random.default_rng(seed + 1).permutation(rest)])
    return test, known, pool


def top1(est, A, B, test):
    mu = B[test].mean(0)
    return top_k_accuracy(B[test] - mu, est.transform(A[test]) - mu)


def _control():
    """A fixed amount of one-thread work: its busy/idle is the floor the machine's scheduler
    sets for any fit on one thread."""
    total = 0
    for i in range(3_000_000):
        total += i * i
    return total


def fit_cases(E, args):
    A, B = E["minilm_l6"], E["mpnet_base"]
    test, known, pool = split(A, B, args.pairs, args.pool)
    _, seeds, _ = split(A, B, 15, args.pool)
    anchors = known[:1000]
    cases = {
        "control: pure Python on one thread": _control,
        "ProcrustesAligner": lambda: ProcrustesAligner().fit(A[known], B[known]),
        "LinearAligner": lambda: LinearAligner().fit(A[known], B[known]),
        "RelativeProjector": lambda: RelativeProjector().fit(A[known], B[known]),
        "ASIFAligner": lambda: ASIFAligner().fit(A[known], B[known]),
        "InverseRelativeProjector (1,000 anchors, d=768)":
            lambda: InverseRelativeProjector(random_state=0).fit(A[anchors], B[anchors]),
        "GeRAAligner": lambda: GeRAAligner(random_state=0).fit(A[known], B[known]),
        "AnchorBootstrapper (15 seeds)":
            lambda: AnchorBootstrapper(random_state=0).fit(A[seeds], B[seeds], unpaired=pool),
        "AnchorBootstrapper (no seed)":
            lambda: AnchorBootstrapper(random_state=0).fit(None, None, unpaired=pool),
    }
    if "me5_small_q4" in E:
        V = stack_views([E["minilm_l6"][known], E["me5_small_q4"][known]])
        cases["OrthogonalEnsembleAligner (2 views)"] = \
            lambda: OrthogonalEnsembleAligner(n_views=2).fit(V)
    return cases


def guard_rows(E, args):
    A, B = E["minilm_l6"], E["mpnet_base"]
    rows = []
    for n in args.seeds:
        test, seeds, pool = split(A, B, n, args.pool)
        start = top1(ProcrustesAligner().fit(A[seeds], B[seeds]), A, B, test)
        out = {}
        for name, frac in (("guarded", 0.2), ("unguarded", None)):
            est = AnchorBootstrapper(validation_fraction=frac, random_state=0)
            s, load, _ = timed(lambda est=est: est.fit(A[seeds], B[seeds], unpaired=pool))
            out[name] = (s, load, top1(est, A, B, test), getattr(est, "kept_start_", None))
        rows.append((n, start, out))
        g, u = out["guarded"], out["unguarded"]
        print(f"{n:>6} {g[0]:8.1f} {u[0]:8.1f} {g[0] / u[0]:6.2f}  {start:6.3f} {g[2]:6.3f} "
              f"{u[2]:6.3f} {str(g[3]):>5}  {g[1]:5.1f} {u[1]:5.1f}", flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--pool", type=int, default=3000)
    p.add_argument("--seeds", type=int, nargs="*", default=[15, 200, 1000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hogs", type=int, default=os.cpu_count())
    p.add_argument("--only", nargs="*", default=None, help="fit cases whose name starts so")
    args = p.parse_args(argv)
    data = load_docstring_embeddings(args.data if Path(args.data).exists() else None)
    E = data.embeddings
    print(f"{len(E['minilm_l6'])} texts, {os.cpu_count()} cores, {args.hogs} hogs; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    cases = fit_cases(E, args)
    if args.only is not None:
        cases = {k: v for k, v in cases.items() if any(k.startswith(o) for o in args.only)}
    fit_rows = []
    hogs = Hogs(args.hogs)
    try:
        if cases:
            print(f"\n{'fit (default parameters)':<48} {'idle s':>8} {'busy s':>8} "
                  f"{'busy/idle':>9} {'load':>5} {'load':>5}")
        for name, fn in cases.items():
            idle, busy, li, lb = side_by_side(fn, hogs, args.repeats)
            fit_rows.append((name, idle, busy))
            print(f"{name:<48} {idle:8.2f} {busy:8.2f} {busy / idle:9.2f} {li:5.1f} {lb:5.1f}",
                  flush=True)
        rows = []
        if args.seeds:  # back to back, the hogs paused
            print(f"\n{'seeds':>6} {'guard s':>8} {'none s':>8} {'ratio':>6}  {'start':>6} "
                  f"{'guard':>6} {'none':>6} {'kept':>5}  {'load':>5} {'load':>5}")
            rows = guard_rows(E, args)
    finally:
        hogs.close()
    print(f"\nload average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return fit_rows, rows


if __name__ == "__main__":
    main()
