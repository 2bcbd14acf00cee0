"""InverseRelativeProjector: fit time and the one-matrix transform vs looping over subspaces.

``n`` source rows of width ``d`` are translated with ``k`` paired anchors and ``ω`` subspaces, at
every pruning threshold δ given (default: 0, 0.3 = the default, 0.5, 0.8 = the paper's stitching
setting, 0.9). ``fit`` is timed as the best of ``--repeat`` runs (the default GCV ridge). The
anchor-completed ``transform`` (one ``d × d`` product, :math:`\\bar M`) is timed against two
straightforward implementations that loop over the ω subspaces and apply them one by one:

* ``loop: encode+decode`` — Eq. 5 literally: per subspace, cosines to its source anchors then the
  product with its target pseudo-inverse, summed;
* ``loop: ω maps`` — per subspace its own ``d × d`` map ``M_i``, summed.

All three run in float32 on the same device, on the same row batches, and must agree. Peak memory
is the resident-set peak above the start of each step (and ``torch.cuda.max_memory_allocated``
on a GPU).

    python benchmarks/bench_irp.py            # n = 10^5, d = 768, k = 1000, ω = 16
    python benchmarks/bench_irp.py --fit-only --repeat 3 --threads 1   # fit times only
    python benchmarks/bench_irp.py --quick    # n = 10^4, d = 128, k = 200
"""

import argparse
import time

import numpy as np
import sklearn
import torch
from _common import PeakRSS, batch_rows

from skalign import InverseRelativeProjector


def _unit(B):
    """Rows scaled to unit norm (a zero row stays zero)."""
    return B / torch.linalg.vector_norm(B, dim=1, keepdim=True).clamp_min(1e-30)


def make_data(n, d, k, seed=0):
    """Anisotropic 'embeddings' (spectrum j^-1) and a noisy scaled rotation of them."""
    rng = np.random.default_rng(seed)
    sd = np.arange(1, d + 1) ** -0.5
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    AX = rng.standard_normal((k, d)) * sd
    AY = 2.5 * AX @ Q + 7.0 + 0.05 * rng.standard_normal((k, d)) * sd.mean()
    X = (rng.standard_normal((n, d), dtype=np.float32) * sd.astype(np.float32))
    return AX.astype(np.float32), AY.astype(np.float32), X


def loop_fns(irp, AX, AY, device):
    """The two straightforward per-subspace transforms, as batch functions."""
    C_x = AX.astype(np.float64) - AX.mean(0, dtype=np.float64)
    C_y = AY.astype(np.float64) - AY.mean(0, dtype=np.float64)
    Ax = C_x / np.linalg.norm(C_x, axis=1, keepdims=True)
    Ay = C_y / np.linalg.norm(C_y, axis=1, keepdims=True)
    def to_tensor(a):
        return torch.as_tensor(np.asarray(a, np.float32), device=device)

    enc, dec, maps = [], [], []
    for idx in irp.subspace_indices_:
        S = Ay[idx]  # the ridge pseudo-inverse S (SᵀS + αI)⁻¹ of the fitted alpha_
        P = S @ np.linalg.inv(S.T @ S + irp.alpha_ * np.eye(S.shape[1]))
        enc.append(to_tensor(Ax[idx].T))
        dec.append(to_tensor(P))
        maps.append(to_tensor(Ax[idx].T @ P))
    mu_x, mu_y = to_tensor(irp.source_mean_), to_tensor(irp.target_mean_)
    w, s = len(maps), irp.target_scale_

    # Eq. 5: centre and normalise a row, average the subspaces' decodings, normalise the mean,
    # then scale by the targets' mean norm and add their mean back
    def encode_decode(B):
        x = _unit(B - mu_x)
        return _unit(sum((x @ E) @ D for E, D in zip(enc, dec)) / w) * s + mu_y

    def per_map(B):
        x = _unit(B - mu_x)
        return _unit(sum(x @ M for M in maps) / w) * s + mu_y

    return {"loop: encode+decode": encode_decode, "loop: ω maps": per_map}


def _batched(fn, X, batch, device):
    """``fn`` over the rows of ``X`` in batches on ``device``, into one float32 numpy array."""
    out = None
    for lo in range(0, len(X), batch):
        Y = fn(torch.as_tensor(X[lo:lo + batch], device=device)).cpu().numpy()
        out = np.empty((len(X), Y.shape[1]), np.float32) if out is None else out
        out[lo:lo + len(Y)] = Y
    return out


def _timed(fn, device, repeat=1):
    """Run ``fn`` ``repeat`` times; the best time (robust to other load on the machine) and the
    largest memory peak."""
    best, peak, gpu = float("inf"), 0.0, float("nan")
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            out = fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            secs = time.perf_counter() - t0
        best, peak = min(best, secs), max(peak, mem.mib)
        if device.type == "cuda":
            gpu = torch.cuda.max_memory_allocated() / 2**20
        del secs
    return out, best, peak, gpu


HEAD = ("transform", "δ", "anchors/subspace", "fit s", "transform s", "×slower", "max |Δ|",
        "peak RSS MiB", "peak GPU MiB")
ROW = "{:<20} {:>4} {:>16.1f} {:>7.2f} {:>11.2f} {:>8.1f} {:>9.1e} {:>12.0f} {:>12.0f}"


def _emit(rows, row):
    rows.append(row)
    print(ROW.format(*row), flush=True)


def run(n, d, k, n_subspaces, thresholds, device="cpu", repeat=1, seed=0, fit_only=False):
    device = torch.device(device)
    AX, AY, X = make_data(n, d, k, seed)
    Xin = torch.from_numpy(X).to(device) if device.type == "cuda" else X
    rows = []
    for delta in thresholds:
        irp = InverseRelativeProjector(pruning_threshold=delta, n_subspaces=n_subspaces,
                                       random_state=0, device=str(device))
        irp.fit(AX[:50], AY[:50])  # warm-up: first-call initialisation of the linear algebra
        _, fit_s, fit_mib, fit_gpu = _timed(lambda: irp.fit(AX, AY), device, repeat)
        kept = irp.anchors_per_subspace_.mean()
        if fit_only:
            _emit(rows, ("IRP fit", delta, kept, fit_s, float("nan"), float("nan"), float("nan"),
                         fit_mib, fit_gpu))
            continue
        ref, secs, mib, gpu = _timed(lambda: irp.transform(Xin), device, repeat)
        _emit(rows, ("IRP (one matrix)", delta, kept, fit_s, secs, 1.0, 0.0, max(fit_mib, mib),
                     max(fit_gpu, gpu)))
        # transform's batches: input and output rows, counted twice
        batch = irp.batch_size or batch_rows(2 * (d + d), working_memory=sklearn.get_config()[
            "working_memory"])
        for name, fn in loop_fns(irp, AX, AY, device).items():
            out, lsecs, lmib, lgpu = _timed(lambda: _batched(fn, Xin, batch, device), device,
                                            repeat)
            err = float(np.abs(out - ref).max())
            _emit(rows, (name, delta, kept, float("nan"), lsecs, lsecs / secs, err, lmib, lgpu))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n=1e4, d=128, k=200")
    parser.add_argument("-n", type=int, default=None)
    parser.add_argument("-d", type=int, default=None)
    parser.add_argument("-k", type=int, default=None, help="number of anchors")
    parser.add_argument("--subspaces", type=int, default=16)
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.0, 0.3, 0.5, 0.8, 0.9])
    parser.add_argument("--fit-only", action="store_true", help="time fit only, no transforms")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=2, help="report the best of this many runs")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (1 avoids OpenMP oversubscription on a "
                             "shared machine, which slows the many small SVD steps by 10-100x)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.n or (10_000 if args.quick else 100_000)
    d = args.d or (128 if args.quick else 768)
    k = args.k or (200 if args.quick else 1000)
    print(f"n={n}, d={d}, k={k}, ω={args.subspaces}, device={args.device}, "
          f"torch threads={torch.get_num_threads()}, best of {args.repeat}")
    print("{:<20} {:>4} {:>16} {:>7} {:>11} {:>8} {:>9} {:>12} {:>12}".format(*HEAD), flush=True)
    return run(n, d, k, args.subspaces, args.thresholds, device=args.device, repeat=args.repeat,
               fit_only=args.fit_only)


if __name__ == "__main__":
    main()
