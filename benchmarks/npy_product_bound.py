"""How close can a ``.npy`` translation come to a plain write of its output? The product's time
against the write's, on this machine (issue 20's throughput target).

``python benchmarks/npy_product_bound.py [--rows 1000000] [--repeats 5] [--workdir DIR]
[--peak-n 4096] [--pause 10] [--csv PATH]``

Issue 20 asks every backend's translation for at least 0.8 × the rows/s of the backend's own
bulk load of the same output vectors; for ``.npy`` that load is a plain ``np.save``.
``bench_stores.py`` measures the ratio. This script measures it again beside what bounds it: a
translation has to compute the product of every row, and the write it is compared with does
not. With the source and model of ``bench_stores.py`` (1,000,000 × 384 → 768,
``ProcrustesAligner``) and ``skalign translate``'s batch size, alternated ``--repeats`` times,
each step after an ``os.sync()``:

- ``matmul``: ``np.matmul`` of every batch by a 384 × 768 float32 matrix into a reused buffer,
  the BLAS call alone (GFLOP/s = 2 × rows × 384 × 768 / s), and ``torch_matmul``: the same with
  ``torch.matmul`` (torch's own BLAS, not the OpenBLAS numpy uses; ``skalign translate`` does
  not import torch for a numpy-only model);
- ``translate_fn``: the function ``skalign translate`` applies to each batch of a float32
  source (``model._transform_numpy_fn``, its finiteness check included), into the same buffer:
  the product, the centring and the check;
- ``write``: ``np.save`` of the 1,000,000 × 768 output (``bench_stores.py``'s bulk load), and
  ``write_durable``: the same followed by an ``os.sync()``;
- ``translate``: ``skalign translate`` of the same source into an ``.npy`` file, its own time
  (its "in X s"; ``bench_stores.py``'s ``run_cli``), with ``translate_first_write_s``, when its
  first batch was written, and ``translate_tail_s``, its time after its last (the
  verification and the publish); ``ratio`` and ``ratio_durable`` are ``bench_stores.py``'s,
  ``write`` and ``write_durable`` over it, and ``translate_over_fn`` is it over
  ``translate_fn``.

``bound`` = median ``write`` ÷ median ``translate_fn``: the ratio a translation would reach if
it did nothing but the product, with its reads and writes fully hidden behind it. Where it is
below 0.8, no implementation of the same arithmetic meets the target on this machine; where
``matmul`` is as fast as ``translate_fn``, the product is as fast as the machine's BLAS makes it.
``bound_durable`` is the same against ``write_durable``, and ``bound_fastest_write`` against the
fastest ``write`` (a save into free memory is far faster than one that makes the kernel reclaim
page cache first). ``gflops_for_target_fastest_write``: the product rate a translation that did
nothing but the product would need for 0.8 of the fastest ``write``, against ``peak_gflops``,
the best of five 4096 × 4096 float32 ``np.matmul`` calls (about as fast as this machine
multiplies). ``touch_after_free_s`` and ``touch_after_pause_s``: memory the size of the output
allocated and filled right after the same amount was freed, and after ``--pause`` seconds more
(medians of three): on a virtual machine whose host takes back free pages, a write into memory
not touched for a while pays a fault per page. Prints a table; ``--csv PATH`` writes the
figures as ``key,value`` rows and every repeat's times beside them (``PATH``'s name +
``_runs``).
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import write_figures, write_rows
from bench_stores import (
    command_seconds,
    first_write,
    make_model_and_rows,
    run_cli,
    translate_wall,
    write_times,
)

from skalign._stores.direct_io import aligned_empty
from skalign._stores.pipeline import default_batch_size


def _timed(step):
    """Seconds of ``step()``, or what it returns where it times itself."""
    os.sync()  # the pages the step before wrote reach the disk before this one starts
    t0 = time.perf_counter()
    own = step()
    return time.perf_counter() - t0 if own is None else own


def measure(rows, repeats, workdir):
    """``{step: [seconds per repeat]}`` for the steps, alternated, and ``{part: [seconds per
    repeat]}`` of the command's run: its first write and what came after its last."""
    from skalign.io import save

    model, X = make_model_and_rows(rows)
    src, model_path, out = (Path(workdir) / n for n in ("src.npy", "m.skops", "out.npy"))
    np.save(src, X)
    save(model, model_path)
    parts = {"translate_first_write": [], "translate_tail": []}
    d_in, d_out = X.shape[1], model.n_features_out_
    batch = default_batch_size(d_in, d_out)
    fn = model._transform_numpy_fn(dtype=np.float32)
    W = np.random.default_rng(1).standard_normal((d_in, d_out)).astype(np.float32)
    buf = aligned_empty((batch, d_out), np.float32)
    output = np.asarray(model.transform(X), np.float32)
    target = Path(workdir) / "bulk.npy"

    def matmul():
        for lo in range(0, rows, batch):
            np.matmul(X[lo:lo + batch], W, out=buf[:min(batch, rows - lo)])

    def torch_matmul():
        import torch

        Xt, Wt, out = torch.from_numpy(X), torch.from_numpy(W), torch.from_numpy(buf)
        for lo in range(0, rows, batch):
            torch.matmul(Xt[lo:lo + batch], Wt, out=out[:min(batch, rows - lo)])

    def translate_fn():
        for lo in range(0, rows, batch):
            _, finite = fn.checked(X[lo:lo + batch], out=buf[:min(batch, rows - lo)])
            assert finite

    def translate():
        """The command, timed by its own "in X s" (the process start and imports aside)."""
        status, _, _, text, _ = run_cli(["translate", str(model_path), str(src), str(out)],
                                        dict(os.environ))
        assert status == 0, text
        out.unlink()
        parts["translate_first_write"].append(first_write(text))
        parts["translate_tail"].append(translate_wall(text) - write_times(text)[-1][1])
        return command_seconds(text)

    def write():
        np.save(target, output)

    def write_durable():
        np.save(target, output)
        os.sync()

    steps = {"translate": translate, "matmul": matmul, "torch_matmul": torch_matmul,
             "translate_fn": translate_fn, "write": write, "write_durable": write_durable}
    times = {name: [] for name in steps}
    for r in range(repeats):
        order = list(steps) if r % 2 == 0 else list(steps)[::-1]
        for name in order:
            times[name].append(_timed(steps[name]))
            target.unlink(missing_ok=True)
    return times, parts, batch, d_in, d_out


def first_touch(nbytes, pause, tries=3):
    """``(after_free, after_pause)``: median seconds to allocate and fill ``nbytes`` of memory
    right after the same amount was freed, and after ``pause`` seconds more. On a virtual
    machine whose host takes back the guest's free pages, the second pays a fault per page that
    the first does not: what a plain ``np.save`` into the page cache pays."""
    def touch():
        t0 = time.perf_counter()
        a = np.empty(nbytes // 4, np.float32)
        a.fill(1.0)
        took = time.perf_counter() - t0
        del a
        return took

    touch()
    after_free, after_pause = [], []
    for _ in range(tries):
        after_free.append(touch())
        time.sleep(pause)
        after_pause.append(touch())
    return statistics.median(after_free), statistics.median(after_pause)


def peak_gflops(n=4096, tries=5):
    """GFLOP/s of the best of ``tries`` ``n`` × ``n`` float32 products."""
    a = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32)
    out = np.empty_like(a)

    def product():
        np.matmul(a, a, out=out)

    best = min(_timed(product) for _ in range(tries))
    return 2 * n ** 3 / best / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", default=None, help="where the write goes (default: a "
                        "temporary folder, as bench_stores.py's)")
    parser.add_argument("--peak-n", type=int, default=4096,
                        help="the size of the square products that give peak_gflops")
    parser.add_argument("--pause", type=float, default=10.0,
                        help="seconds between a free and the first touch that follows it")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="npy-product-bound-") as work:
        load = os.getloadavg()[0]
        times, parts, batch, d_in, d_out = measure(args.rows, args.repeats, work)
        peak = peak_gflops(args.peak_n)
        touch_free, touch_pause = first_touch(args.rows * d_out * 4, args.pause)
    med = {k: statistics.median(v) for k, v in times.items()}
    flops = 2 * args.rows * d_in * d_out  # of the product of every row
    figures = {"rows": args.rows, "batch_rows": batch, "repeats": args.repeats,
               "cores": os.cpu_count(), "load_1min_start": round(load, 2)}
    for name, values in times.items():
        figures[f"{name}_s"] = round(med[name], 3)
        figures[f"{name}_min_s"], figures[f"{name}_max_s"] = round(min(values), 3), \
            round(max(values), 3)
    figures["matmul_gflops"] = round(flops / med["matmul"] / 1e9, 1)
    figures["torch_matmul_gflops"] = round(flops / med["torch_matmul"] / 1e9, 1)
    figures["peak_gflops"] = round(peak, 1)
    figures["touch_after_free_s"] = round(touch_free, 3)
    figures["touch_after_pause_s"] = round(touch_pause, 3)
    figures["pause_s"] = args.pause
    figures["translate_fn_over_matmul"] = round(med["translate_fn"] / med["matmul"], 2)
    figures["bound"] = round(med["write"] / med["translate_fn"], 2)
    figures["bound_durable"] = round(med["write_durable"] / med["translate_fn"], 2)
    for name, values in parts.items():
        figures[f"{name}_s"] = round(statistics.median(values), 3)
    figures["translate_over_fn"] = round(med["translate"] / med["translate_fn"], 2)
    figures["ratio"] = round(med["write"] / med["translate"], 2)
    figures["ratio_durable"] = round(med["write_durable"] / med["translate"], 2)
    figures["bound_fastest_write"] = round(min(times["write"]) / med["translate_fn"], 2)
    # the product rate a translation needs to reach 0.8 of the fastest write, were the product
    # all it did
    figures["gflops_for_target_fastest_write"] = round(
        flops / (min(times["write"]) / 0.8) / 1e9, 1)
    print(f"{args.rows:,} x {d_in} -> {d_out} float32, batches of {batch:,} rows, "
          f"{args.repeats} alternated repeats (medians; 1-min load {load:.2f} at the start)")
    print(f"{'step':<16}{'median s':>10}   runs")
    for name, values in times.items():
        print(f"{name:<16}{med[name]:10.2f}   {' '.join(f'{v:.3f}' for v in values)}")
    print(f"matmul {figures['matmul_gflops']} GFLOP/s, torch_matmul "
          f"{figures['torch_matmul_gflops']}, peak ({args.peak_n}² product) "
          f"{figures['peak_gflops']}; translate_fn / matmul "
          f"{figures['translate_fn_over_matmul']}; bound (write / translate_fn) "
          f"{figures['bound']}, against the durable write {figures['bound_durable']}, against "
          f"the fastest write {figures['bound_fastest_write']} (which would need "
          f"{figures['gflops_for_target_fastest_write']} GFLOP/s for 0.8)")
    print(f"the command: {med['translate']:.2f} s ({figures['translate_over_fn']} x "
          f"translate_fn), its first write {figures['translate_first_write_s']:.2f} s in, "
          f"{figures['translate_tail_s']:.2f} s after its last; ratio {figures['ratio']}, "
          f"against the durable write {figures['ratio_durable']}")
    print(f"allocating and filling the output's {args.rows * d_out * 4 / 1e9:.1f} GB: "
          f"{touch_free:.2f} s right after a free, {touch_pause:.2f} s after {args.pause:g} s more")
    if args.csv:
        write_figures(args.csv, figures)
        write_rows(Path(args.csv).with_name(Path(args.csv).stem + "_runs.csv"),
                   [{"repeat": r, **{name: round(v[r], 3) for name, v in times.items()}}
                    for r in range(args.repeats)])
    return figures, times


if __name__ == "__main__":
    main()
