"""Translate a large .npy store with ``skalign translate``: throughput, peak memory, dask shards.

``python benchmarks/bench_translate.py [--rows 10000000] [--workdir DIR] [--quick] [--csv PATH]
[--direction forward|inverse] [--device cpu|cuda|auto] [--parquet-rows 0]``

1. Writes ``rows × 384`` float16 random embeddings to ``DIR/in.npy`` and fits a 384 → 768
   Procrustes map on random pairs (what is translated does not change the cost).
2. The floor: a plain loop over memory-mapped windows of the input, one float32 matrix product
   plus bias per window (torch, as skalign uses) and a sequential write of the float32 result
   after an ``.npy`` header — the least any translation of this file must do.
3. ``skalign translate model.skops in.npy out.npy --quiet`` in this process (validation, model
   file, temporary output and rename included), with its peak resident memory above the start.
4. Parquet: the first ``--parquet-rows`` rows as 8 shards, translated by the local streaming
   path and by :func:`skalign.parallel.translate_parquet` on a 2-worker ``LocalCluster``.

``--device`` is passed to ``skalign translate`` (where the model computes; the floor stays on
the CPU); ``--parquet-rows 0`` skips step 4.

Targets (issue 12): CLI throughput ≥ 0.7 × the floor, CLI peak RSS < 1.5 GB. All files are
deleted at the end. The full size needs 7.7 GB (input) + 30.7 GB (output) + the floor's output
(30.7 GB, deleted before the CLI runs) of free disk.

``--csv PATH`` writes every figure (the JSON printed at the end, plus the machine's CPU count and
its 1-minute load average at the start) as ``key,value`` lines: ``doc/user_guide/migrate.rst``
quotes ``benchmarks/results/bench_translate.csv``.
"""

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import PeakRSS, batch_rows, write_figures


def make_input(path, rows, dim, chunk=1 << 18, seed=0):
    rng = np.random.default_rng(seed)
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(rows, dim))
    for start in range(0, rows, chunk):
        stop = min(start + chunk, rows)
        mm[start:stop] = rng.standard_normal((stop - start, dim), dtype=np.float32)
    mm.flush()
    del mm


def floor_translate(src, dst, W, b, batch_size):
    """Memory-mapped read, one matrix product + bias, sequential write: the floor."""
    import torch

    Wt, bt = torch.from_numpy(W.astype(np.float32)), torch.from_numpy(b.astype(np.float32))
    head = np.load(src, mmap_mode="r")
    rows, dim = head.shape
    out = np.lib.format.open_memmap(dst, mode="w+", dtype=np.float32, shape=(rows, W.shape[1]))
    offset = out.offset
    del out
    with open(dst, "r+b") as f:
        f.seek(offset)
        for start in range(0, rows, batch_size):
            n = min(batch_size, rows - start)
            window = np.memmap(src, dtype=head.dtype, mode="r",
                               offset=head.offset + start * dim * head.dtype.itemsize,
                               shape=(n, dim))
            x = torch.from_numpy(np.asarray(window, dtype=np.float32))
            f.write(torch.addmm(bt, x, Wt).numpy().data)
            del window


def write_shards(src, folder, rows, n_shards=8):
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = np.load(src, mmap_mode="r")
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(rows), n_shards)):
        start, stop = int(part[0]), int(part[-1]) + 1
        vec = pa.FixedSizeListArray.from_arrays(
            pa.array(np.asarray(X[start:stop], dtype=np.float32).reshape(-1)), X.shape[1])
        pq.write_table(pa.table({"id": pa.array(np.arange(start, stop), pa.int64()),
                                 "vector": vec}), folder / f"part-{i:03d}.parquet",
                       row_group_size=65536)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--parquet-rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--workdir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--csv", default=None, help="also write every figure to this CSV file")
    parser.add_argument("--direction", choices=("forward", "inverse"), default="forward",
                        help="inverse: the model is fitted 768 -> 384 and run backwards "
                        "(translate --direction inverse), same shapes and floor; no Parquet part")
    parser.add_argument("--device", default=None,
                        help="skalign translate --device (default: the model's, the CPU)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.parquet_rows = 20_000, 4_000

    from skalign import ProcrustesAligner
    from skalign.cli import main as cli_main
    from skalign.io import save

    d_in, d_out = 384, 768
    batch_size = args.batch_size or batch_rows(d_in, d_out)
    base = Path(args.workdir) if args.workdir else None
    work = Path(tempfile.mkdtemp(prefix="bench_translate-", dir=base))
    results = {"rows": args.rows, "dim_in": d_in, "dim_out": d_out, "batch_size": batch_size,
               "cpu_count": os.cpu_count(), "load_avg_1min_start": os.getloadavg()[0],
               "cuda": float(args.device is not None and args.device.startswith("cuda"))}
    try:
        src = work / "in.npy"
        t0 = time.perf_counter()
        make_input(src, args.rows, d_in)
        results["make_input_s"] = time.perf_counter() - t0
        rng = np.random.default_rng(1)
        if args.direction == "forward":
            model = ProcrustesAligner().fit(rng.standard_normal((2000, d_in)),
                                            rng.standard_normal((2000, d_out)))
            W = model.components_ * model.scale_
            bias = model.target_mean_ - model.source_mean_ @ W
        else:
            model = ProcrustesAligner().fit(rng.standard_normal((2000, d_out)),
                                            rng.standard_normal((2000, d_in)))
            W = model.components_.T / model.scale_
            bias = model.source_mean_ - model.target_mean_ @ W
        save(model, work / "m.skops")
        in_gb, out_gb = args.rows * d_in * 2 / 1e9, args.rows * d_out * 4 / 1e9

        with PeakRSS() as floor_mem:
            t0 = time.perf_counter()
            floor_translate(src, work / "floor.npy", W, bias, batch_size)
            floor_s = time.perf_counter() - t0
        sample = np.random.default_rng(2).choice(args.rows, size=min(args.rows, 2000),
                                                 replace=False)
        sample.sort()
        floor_sample = np.load(work / "floor.npy", mmap_mode="r")[sample].copy()
        os.remove(work / "floor.npy")

        with PeakRSS() as cli_mem:
            t0 = time.perf_counter()
            status = cli_main(["translate", str(work / "m.skops"), str(src),
                               str(work / "out.npy"), "--quiet", "--batch-size",
                               str(batch_size), "--direction", args.direction]
                              + (["--device", args.device] if args.device else []))
            cli_s = time.perf_counter() - t0
        assert status == 0
        out = np.load(work / "out.npy", mmap_mode="r")
        results["max_abs_diff"] = float(np.abs(out[sample] - floor_sample).max())
        del out
        os.remove(work / "out.npy")
        results.update(
            floor_s=floor_s, cli_s=cli_s,
            floor_rows_per_s=args.rows / floor_s, cli_rows_per_s=args.rows / cli_s,
            cli_vs_floor=floor_s / cli_s, floor_peak_rss_mib=floor_mem.mib,
            cli_peak_rss_mib=cli_mem.mib, input_gb=in_gb, output_gb=out_gb,
        )
        print(f"translate {args.rows:,} x {d_in} float16 .npy ({in_gb:.1f} GB) -> {d_out}-d "
              f"float32 ({out_gb:.1f} GB), batches of {batch_size:,} rows")
        print(f"{'path':<34}{'seconds':>9}{'rows/s':>12}{'GB/s out':>10}{'peak RSS MiB':>14}")
        for name, secs, mem in [("floor (mmap + matmul + write)", floor_s, floor_mem.mib),
                                ("skalign translate (CLI)", cli_s, cli_mem.mib)]:
            print(f"{name:<34}{secs:9.2f}{args.rows / secs:12,.0f}{out_gb / secs:10.2f}"
                  f"{mem:14.0f}")
        print(f"CLI / floor throughput: {floor_s / cli_s:.2f} (target >= 0.7); peak RSS "
              f"{cli_mem.mib:.0f} MiB (target < 1536); max |CLI - floor| on 2,000 rows "
              f"{results['max_abs_diff']:.1e}")

        if args.direction == "forward" and args.parquet_rows > 0:
            results.update(parquet(work, src, min(args.parquet_rows, args.rows), batch_size))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.csv:
        write_figures(args.csv, ((k, repr(float(v))) for k, v in results.items()))
    return results


def parquet(work, src, rows, batch_size):
    """Local streaming vs a 2-worker LocalCluster on the same 8 Parquet shards."""
    import dask
    from distributed import LocalCluster

    from skalign.io import load, translate
    from skalign.parallel import translate_parquet

    write_shards(src, work / "shards", rows)
    model = load(work / "m.skops")
    t0 = time.perf_counter()
    translate(model, work / "shards", work / "local", batch_size=batch_size)
    local_s = time.perf_counter() - t0
    with dask.config.set({"temporary-directory": str(work / "dask-scratch")}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=None) as cluster:
        t0 = time.perf_counter()
        translate_parquet(model, work / "shards", work / "dask", scheduler=cluster,
                          batch_size=batch_size)
        dask_s = time.perf_counter() - t0
    import pyarrow.parquet as pq

    a = pq.read_table(work / "local").sort_by("id")
    b = pq.read_table(work / "dask").sort_by("id")
    same = a["id"].equals(b["id"]) and a["vector"].equals(b["vector"])
    print(f"Parquet, {rows:,} rows in 8 shards: local streaming {local_s:.2f} s "
          f"({rows / local_s:,.0f} rows/s), 2-worker LocalCluster {dask_s:.2f} s "
          f"({rows / dask_s:,.0f} rows/s, cluster start excluded); identical output: {same}")
    return {"parquet_rows": rows, "parquet_local_s": local_s, "parquet_dask_s": dask_s,
            "parquet_identical": bool(same)}


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
