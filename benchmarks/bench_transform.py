"""Batched transform of a large embedding matrix in bounded memory (the foundation's promise).

Translates ``n`` rows of width ``d`` read from a memory-mapped ``.npy`` file (as a vector store
would be) with the two baselines and reports time, throughput and the peak resident memory *above*
the input and output arrays themselves, for the default ``batch_size`` (from scikit-learn's
``working_memory``) and a small explicit one.

    python benchmarks/bench_transform.py            # n = 10^6, d = 1024 (about 8 GB of disk)
    python benchmarks/bench_transform.py --quick    # n = 10^5, d = 256
"""

import argparse
import os
import tempfile
import time

import numpy as np
import psutil
from _common import PeakRSS
from sklearn import config_context

from skalign import LinearAligner, ProcrustesAligner


def run(n, d, working_memory=256, seed=0):
    rng = np.random.default_rng(seed)
    anchors_X = rng.standard_normal((2000, d)).astype(np.float32)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32)
    anchors_Y = anchors_X @ Q
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store.npy")
        store = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
        for start in range(0, n, 65536):
            stop = min(n, start + 65536)
            store[start:stop] = rng.standard_normal((stop - start, d), dtype=np.float32)
        store.flush()
        del store
        out_mb = n * d * 4 / 2**20
        for est in (ProcrustesAligner(), LinearAligner(alpha=1e-3)):
            est.fit(anchors_X, anchors_Y)
            for batch_size in (None, 4096):
                est.set_params(batch_size=batch_size)
                X = np.load(path, mmap_mode="r")
                with config_context(working_memory=working_memory), PeakRSS() as mem:
                    t0 = time.perf_counter()
                    out = est.transform(X)
                    secs = time.perf_counter() - t0
                check = np.sort(rng.choice(n, size=min(n, 512), replace=False))
                # the anchors are an exact rotation Q, so the translation of a stored row x is x Q
                err = float(np.abs(out[check] - np.asarray(X[check]) @ Q).max())
                rows.append((type(est).__name__, batch_size or f"auto ({working_memory} MiB)",
                             secs, n / secs, mem.mib, out_mb, err))
                del out, X
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int, default=None)
    parser.add_argument("-d", type=int, default=None)
    parser.add_argument("--working-memory", type=int, default=256, help="MiB (sklearn config)")
    args = parser.parse_args(argv)
    n = args.n or (100_000 if args.quick else 1_000_000)
    d = args.d or (256 if args.quick else 1024)
    rows = run(n, d, args.working_memory)
    print(f"transform of {n:,} x {d} float32 rows from a memory map "
          f"(CPU, {psutil.cpu_count()} cores)")
    print(f"{'estimator':<20}{'batch_size':>20}{'seconds':>10}{'rows/s':>14}"
          f"{'peak RSS +MiB':>15}{'output MiB':>12}{'max |err|':>11}")
    for name, bs, secs, rate, peak, out_mb, err in rows:
        print(f"{name:<20}{str(bs):>20}{secs:10.2f}{rate:14,.0f}{peak:15.0f}{out_mb:12.0f}"
              f"{err:11.1e}")
    print("peak RSS +MiB includes the output array and the memory-mapped input pages the OS keeps "
          "resident; the batch buffers add at most 2 x working_memory on top.")
    return rows


if __name__ == "__main__":
    main()
