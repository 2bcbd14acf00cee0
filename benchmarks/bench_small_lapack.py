"""Small decompositions on one thread or two, on an idle machine and beside busy processes.

``python benchmarks/bench_small_lapack.py [--busy 0 1] [--repeats 30] [--csv OUT]``

For each matrix (the decompositions skalign's fits repeat: the soft self-learning's 128 × 128
polar map, the hard loop's 384 × 768 one, a 384 × 384 and a 768 × 768 ``eigh``, the SVD of
2,000 × 384 anchors), the median milliseconds of torch's call with the process's threads (both
cores; what torch does by default) and with skalign's setting (one thread below its size limit,
``SMALL_LAPACK`` multiply-adds m·n·min(m, n), the default above it), with ``--busy`` processes
spinning beside it (0: an idle machine, as far as the machine is idle). Each busy process
starts a session of its own, like a job started from another shell: where the kernel groups
tasks by session (``/proc/sys/kernel/sched_autogroup_enabled`` = 1, the default of many
distributions), each session gets an equal share of the cores, and a two-thread call waits for
its second thread far longer than its share of the cores would explain. The table records the
setting. Prints a table; ``--csv`` writes its figures as ``key,value`` rows
(``busy1__svd_128_x_128__speedup``).
"""

import argparse
import multiprocessing as mp
import os
import re
import statistics
import time

import torch
from _common import write_figures

#: skalign's size limit for one-thread decompositions (the user guide's "Threads"; the test of
#: this script checks it against the package's)
SMALL_LAPACK = 2**24


def _spin(stop):
    os.setsid()  # a job of another session, as from another shell (its own autogroup, if any)
    while not stop.is_set():
        pass


def _autogroup():
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return int(f.read())
    except OSError:
        return ""


def _cases():
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    sym = rand(768, 768)
    return [
        ("svd 128 x 128 (soft-loop polar)", rand(128, 128), torch.linalg.svd),
        ("svd 384 x 768 (hard-loop polar)", rand(384, 768), torch.linalg.svd),
        ("eigh 384 x 384", sym[:384, :384] @ sym[:384, :384].T, torch.linalg.eigh),
        ("eigh 768 x 768", sym @ sym.T, torch.linalg.eigh),
        ("svd 2000 x 384 (anchors)", rand(2000, 384), torch.linalg.svd),
    ]


def _median_ms(fn, A, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(A)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--busy", type=int, nargs="+", default=[0, 1])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--csv", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for busy in args.busy:
        stop = mp.Event()
        spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
        for s in spinners:
            s.start()
        try:
            for name, A, fn in _cases():
                fn(A)  # first-call allocations
                m, n = A.shape
                one = m * n * min(m, n) <= SMALL_LAPACK
                threads_ms = _median_ms(fn, A, args.repeats)
                torch.set_num_threads(1 if one else args.threads)
                small_ms = _median_ms(fn, A, args.repeats)
                torch.set_num_threads(args.threads)
                rows.append({"busy": busy, "case": name, "threads": args.threads,
                             "small_lapack_threads": 1 if one else args.threads,
                             "threads_ms": round(threads_ms, 2),
                             "small_lapack_ms": round(small_ms, 2),
                             "speedup": round(threads_ms / small_ms, 2),
                             "load_1min": round(os.getloadavg()[0], 2),
                             "autogroup": _autogroup()})
        finally:
            stop.set()
            for s in spinners:
                s.join()
    print(f"autogroup (sessions share the cores equally): {_autogroup()}")
    print(f"{'busy':>4} {'case':<34}{'threads':>8}{'ms':>10}{'small_lapack':>14}{'ms':>10}"
          f"{'speed-up':>10}{'load':>7}")
    for r in rows:
        print(f"{r['busy']:>4} {r['case']:<34}{r['threads']:>8}{r['threads_ms']:>10.2f}"
              f"{r['small_lapack_threads']:>14}{r['small_lapack_ms']:>10.2f}{r['speedup']:>10.2f}"
              f"{r['load_1min']:>7.2f}")
    if args.csv:  # key,value rows (the user guide's figures): busy<N>__<case>__<column>
        cases = [re.sub(r"\W+", "_", r["case"].split(" (")[0]).strip("_") for r in rows]
        write_figures(args.csv, [("autogroup", _autogroup())] + [
            (f"busy{r['busy']}__{case}__{col}", r[col]) for r, case in zip(rows, cases)
            for col in ("threads_ms", "small_lapack_ms", "speedup", "load_1min")])
    return rows


if __name__ == "__main__":
    main()
