"""A PostgreSQL translation's time and its pipeline's fill by batch size (issue 20):
``python benchmarks/pg_batch_rows.py [--rows 2e5] [--sizes 2048,4096,8192] [--repeats 3]
[--csv PATH]``.

Every run of ``skalign translate`` into PostgreSQL reads, translates and loads its first batch
with nothing before it to overlap, and commits it 0.6 to 0.9 s in at 8,192 rows a batch,
against about 0.2 s a batch afterwards. A rerun after a crash pays that fill again, and the
issue's rule (the work left + 10 %) grants it only its share of rows. Smaller batches shorten
the fill; whether they cost the whole run more (a commit, a ``COPY`` and a read-ahead hand-off
per batch) is what this measures.

Starts PostgreSQL with pgvector (``tests/store_backends.start_postgres``), makes the source of
``bench_stores.py`` (``ROWS`` 384-d rows, 384 → 768 Procrustes) and warms the cluster up with
one bulk load. Then ``--repeats`` rounds; in each, one uninterrupted ``python -m skalign
translate --batch-size B`` per size, in an order that turns round by round, and the engine's
own bulk load (``COPY``) of the same output vectors, each after the settle of ``bench_stores.py``
(a vacuum and a checkpoint). Per size: the command's own time (its "in X s"), the moment of its
first commit (``first_write_s``) and the ratio of the bulk load's time to the command's, each
the median over the rounds. Writes a row per size (``--csv``), one per run (``_runs``) and
the medians as ``key,value`` figures (``_figures``).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

import bench_stores as bs  # noqa: E402
import store_backends as sb  # noqa: E402
from _common import write_rows  # noqa: E402


def _median(values):
    return round(float(statistics.median(values)), 3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=float, default=2e5)
    ap.add_argument("--sizes", default="2048,4096,8192")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "pg_batch_rows.csv"))
    args = ap.parse_args(argv)
    n, sizes = int(args.rows), [int(s) for s in args.sizes.split(",")]
    model, X = bs.make_model_and_rows(n)
    from skalign.io import save

    runs = []
    with tempfile.TemporaryDirectory(prefix="pg-batch-rows-") as folder:
        server, base = sb.start_postgres(Path(folder) / "pg")
        try:
            backend = sb.PgVector(base)
            src = backend.make(None, X)
            model_path = str(save(model, Path(folder) / "m.skops"))
            V = np.asarray(model.transform(X), np.float32)
            ids = np.arange(n) * 3 + 1  # PgVector.make's ids
            backend.warm_up(None, ids, V)
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            for r in range(args.repeats):
                order = sizes[r % len(sizes):] + sizes[:r % len(sizes)]
                for size in order + ["bulk"]:
                    os.sync()
                    backend.settle()
                    if size == "bulk":
                        t0 = time.perf_counter()
                        backend.bulk_load(None, ids, V)
                        secs = time.perf_counter() - t0
                        backend.drop_bulk(None)
                        runs.append({"round": r, "batch_rows": "bulk", "seconds": round(secs, 3)})
                    else:
                        out = backend.output(None, f"out_{size}_{r}")
                        status, _, _, text, _ = bs.run_cli(
                            ["translate", model_path, src, out, "--batch-size", str(size)], env)
                        assert status == 0, text
                        runs.append({"round": r, "batch_rows": size,
                                     "seconds": bs.command_seconds(text),
                                     "first_write_s": bs.first_write(text),
                                     "began_s": bs.began_at(text)})
                        backend.drop(None, f"out_{size}_{r}")
                    print(" ".join(f"{k}={v}" for k, v in runs[-1].items()), flush=True)
        finally:
            server.cleanup()
    bulk = {x["round"]: x["seconds"] for x in runs if x["batch_rows"] == "bulk"}
    rows = []
    for size in sizes:
        mine = [x for x in runs if x["batch_rows"] == size]
        rows.append({"batch_rows": size, "rows": n, "runs": len(mine),
                     "seconds_median": _median([x["seconds"] for x in mine]),
                     "first_write_median_s": _median([x["first_write_s"] for x in mine]),
                     "ratio_median": _median([bulk[x["round"]] / x["seconds"] for x in mine]),
                     "bulk_median_s": _median(list(bulk.values()))})
        print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    csv_path = Path(args.csv)
    write_rows(csv_path, rows)
    write_rows(csv_path.with_name(csv_path.stem + "_runs.csv"), runs)
    write_rows(csv_path.with_name(csv_path.stem + "_figures.csv"), figures(rows))
    return rows, runs


def figures(rows):
    """``key,value`` rows for the guide's prose: each size's medians, keyed by the size."""
    out = [{"key": "bulk_median_s", "value": rows[0]["bulk_median_s"]}]
    for r in rows:
        out += [{"key": f"{k}_{r['batch_rows']}", "value": r[k]}
                for k in ("seconds_median", "first_write_median_s", "ratio_median")]
    return out


if __name__ == "__main__":
    main()
