"""Batched Karcher mean on the sphere: skalign's torch implementation against geomstats.

``m`` unit points per sample, ``n`` samples, width ``d``, at angles up to ``--spread`` degrees from
a random centre. Both libraries compute all samples at once on the CPU:

* ``skalign`` — :func:`skalign.manifold.karcher_mean` (Gram-space iteration), float32 and float64
  input, default ``tol=1e-6`` rad;
* ``geomstats batch (defaults)`` — ``FrechetMean(Hypersphere(d-1), method="batch")`` as shipped
  (``epsilon=1e-4`` on the *sum* over samples of squared gradient norms, ``max_iter=32``);
* ``geomstats batch (tol matched)`` — the same with ``epsilon = n · tol²`` and ``max_iter=1000``,
  i.e. the per-sample stopping rule of skalign on average.

Errors are the largest angle (degrees) to a tight reference (geomstats batch, ``epsilon=1e-20``).
Times are the best of ``--repeats`` runs; memory is the peak resident-set growth during a run.
The default ``--threads 1`` pins torch and numpy's BLAS to one thread: on a shared machine,
OpenMP's spinning barriers make multi-threaded timings of small kernels meaningless.

    python benchmarks/bench_karcher.py            # m = 5, n = 10^4, d = 128 (the issue's target)
    python benchmarks/bench_karcher.py --quick    # n = 2000, d = 32
"""

import argparse
import os
import time
import warnings

import numpy as np
import torch
from _common import PeakRSS

from skalign.manifold import karcher_mean


def make_cloud(n, m, d, spread_deg, seed=0):
    """``(n, m, d)`` unit points at angles uniform in ``[0, spread]`` from random centres."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((n, d))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    T = rng.standard_normal((n, m, d))
    T -= np.einsum("nmd,nd->nm", T, c)[..., None] * c[:, None]
    T /= np.linalg.norm(T, axis=-1, keepdims=True)
    ang = np.deg2rad(spread_deg) * rng.uniform(0, 1, (n, m, 1))
    return np.cos(ang) * c[:, None] + np.sin(ang) * T


def _geomstats():
    os.environ.setdefault("GEOMSTATS_BACKEND", "numpy")
    dtype = torch.get_default_dtype()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from geomstats.geometry.hypersphere import Hypersphere
        from geomstats.learning.frechet_mean import FrechetMean
    torch.set_default_dtype(dtype)

    def run(X, **settings):
        est = FrechetMean(Hypersphere(dim=X.shape[-1] - 1), method="batch")
        if settings:
            est.set(**settings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(np.transpose(X, (1, 0, 2)))
        return np.asarray(est.estimate_)

    return run


def _angle_deg(A, B):
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    chord, co = np.linalg.norm(A - B, axis=-1), np.linalg.norm(A + B, axis=-1)
    return np.degrees(2 * np.arctan2(chord, co))


def _time(fn, repeats):
    best, out, mem = np.inf, None, 0.0
    for _ in range(repeats):
        with PeakRSS(interval=0.002) as rss:
            t0 = time.perf_counter()
            out = fn()
            best = min(best, time.perf_counter() - t0)
        mem = max(mem, rss.mib)
    return best, out, mem


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="n = 2000, d = 32")
    p.add_argument("-n", type=int, default=None, help="samples (default 10^4)")
    p.add_argument("-m", type=int, default=5, help="points (encoders) per sample")
    p.add_argument("-d", type=int, default=None, help="width (default 128)")
    p.add_argument("--spread", type=float, default=45.0, help="max angle to the centre, degrees")
    p.add_argument("--tol", type=float, default=1e-6, help="skalign's tol (radians)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    n = args.n or (2000 if args.quick else 10_000)
    d = args.d or (32 if args.quick else 128)
    m = args.m
    torch.set_num_threads(args.threads)
    try:
        from threadpoolctl import threadpool_limits
        limiter = threadpool_limits(args.threads)
    except ImportError:  # pragma: no cover
        limiter = None

    X = make_cloud(n, m, d, args.spread)
    X32 = torch.from_numpy(X.astype(np.float32))
    X64 = torch.from_numpy(X)
    gs_run = _geomstats()
    ref = gs_run(X, epsilon=1e-20, max_iter=500)

    cases = [
        ("skalign float32", lambda: karcher_mean(X32, tol=args.tol).numpy()),
        ("skalign float64", lambda: karcher_mean(X64, tol=args.tol).numpy()),
        ("geomstats batch (defaults)", lambda: gs_run(X)),
        ("geomstats batch (tol matched)",
         lambda: gs_run(X, epsilon=n * args.tol**2, max_iter=1000)),
    ]
    rows = []
    for name, fn in cases:
        fn()  # warm-up
        t, out, mem = _time(fn, args.repeats)
        rows.append({"method": name, "time_s": t, "peak_mib": mem,
                     "max_err_deg": float(_angle_deg(out, ref).max())})
    base = rows[0]["time_s"]
    print(f"Karcher mean, m={m}, n={n}, d={d}, spread ≤ {args.spread:g}°, "
          f"{args.threads} thread(s), best of {args.repeats}")
    print(f"{'method':32s} {'time (ms)':>10s} {'peak RSS (MiB)':>15s} {'max err (°)':>12s} "
          f"{'speed-up of skalign float32':>28s}")
    for r in rows:
        print(f"{r['method']:32s} {1e3 * r['time_s']:10.1f} {r['peak_mib']:15.1f} "
              f"{r['max_err_deg']:12.2e} {r['time_s'] / base:27.1f}x")
    if limiter is not None:
        limiter.unregister()
    return rows


if __name__ == "__main__":
    main()
