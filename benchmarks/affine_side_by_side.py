"""The numpy affine map of two versions of skalign side by side, in one process (issue 20).

``python benchmarks/affine_side_by_side.py --old-commit REV [--rows 1e6] [--repeats 5]
[--csv OUT]``

What ``skalign translate`` computes for each batch of a ``.npy``, Parquet, LanceDB or FAISS
store under a ``ProcrustesAligner`` or ``LinearAligner``: the batch checked for NaN and
infinities, then the fitted affine map into a reused output buffer. ``bench_stores.py``'s model
and rows (``ProcrustesAligner`` MiniLM → MPNet, 384 → 768, on the vendored pairs; its rows tiled
with noise), in the command's batches. ``REV``'s ``skalign/`` is extracted as ``skalign_old``
(``_common.old_package``); both versions get the same fitted parts. Each repeat times every
batch with both, the first version alternating from repeat to repeat. The old version is
given the check its batch translator made (a sum of the batch) when its map has no
``checked``. Printed per repeat: both versions' seconds over all rows, and whether their
outputs are identical (``max_abs_diff``); then the medians, which ``--csv`` writes beside the
table as ``<stem>_summary.csv`` (``key,value``). Threads: the environment's (numpy's BLAS on
every core unless said otherwise).
"""

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import old_package, write_figures, write_rows  # noqa: E402
from bench_stores import make_model_and_rows  # noqa: E402


def checked_map(backend, args, kw):
    """``backend``'s affine map as ``f(B, out) -> (out, finite)``."""
    fn = backend.affine_numpy_fn(*args, dtype=np.float32, **kw)
    if hasattr(fn, "checked"):
        return fn.checked

    def checked(B, out):
        finite = bool(np.isfinite(np.add.reduce(B, axis=None)))
        return fn(B, out=out), finite

    return checked


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old-commit", default="HEAD")
    p.add_argument("--rows", type=float, default=1e6)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--csv")
    args = p.parse_args(argv)
    from skalign._stores.pipeline import default_batch_size, output_dim

    model, X = make_model_and_rows(int(args.rows))
    parts, kw = model._affine()
    maps = {"old": checked_map(importlib.import_module(old_package(args.old_commit)
                                                       + "._backend"), parts, kw),
            "new": checked_map(importlib.import_module("skalign._backend"), parts, kw)}
    batch = default_batch_size(X.shape[1], output_dim(model))
    outs = {v: np.empty((batch, output_dim(model)), np.float32) for v in maps}
    rows = []
    for rep in range(args.repeats):
        order = ["old", "new"] if rep % 2 == 0 else ["new", "old"]
        seconds, worst = dict.fromkeys(maps, 0.0), 0.0
        for lo in range(0, len(X), batch):
            B = X[lo:lo + batch]
            for v in order:
                t0 = time.perf_counter()
                out, finite = maps[v](B, outs[v][:len(B)])
                seconds[v] += time.perf_counter() - t0
                assert finite
            worst = max(worst, float(np.abs(outs["old"][:len(B)] - outs["new"][:len(B)]).max()))
        row = dict(repeat=rep, first=order[0], rows=len(X), batch=batch,
                   old_s=round(seconds["old"], 3), new_s=round(seconds["new"], 3),
                   new_over_old=round(seconds["new"] / seconds["old"], 3), max_abs_diff=worst)
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    med = {v: float(np.median([r[f"{v}_s"] for r in rows])) for v in maps}
    summary = dict(rows=len(X), old_s=round(med["old"], 3), new_s=round(med["new"], 3),
                   new_over_old=round(float(np.median([r["new_over_old"] for r in rows])), 3),
                   max_abs_diff=max(r["max_abs_diff"] for r in rows))
    print("median " + " ".join(f"{k}={v}" for k, v in summary.items()))
    if args.csv:
        write_rows(args.csv, rows)
        out = Path(args.csv)
        write_figures(out.with_name(out.stem + "_summary.csv"), summary)
    return rows


if __name__ == "__main__":
    main()
