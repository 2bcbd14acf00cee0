"""What reading costs a resumed translation from a Parquet file, phase by phase (issue 20).

``python benchmarks/profile_resume_reads.py [ROWS]`` (default 1e6) makes the Parquet source of
``bench_stores.py`` (384-d rows, row groups of 65,536 rows) and times, five times each, medians
printed, in this process:

* the reader's first batch from a resume row (``_ParquetReader.batches(batch, start)``): from a
  row group's start, and from one or two batches into a group, where the rows before the resume
  row are decoded and dropped;
* the verification's read-back of the sampled rows a crashed run committed
  (``_ParquetReader.take``) when the crash came after the first one to four of its windows, in
  batches of ``TAKE_BATCH_ROWS`` (what it does) and, alternated with it, in batches of the
  translation's size (what it did before).
"""

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import store_backends as sb  # noqa: E402
from bench_stores import make_model_and_rows  # noqa: E402

import skalign._stores as stores  # noqa: E402

REPEATS = 5


def _median(fn):
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 1_000_000
    _, X = make_model_and_rows(n)
    root = Path(tempfile.mkdtemp(prefix="profile-resume-reads-"))
    try:
        src = sb.Parquet().make(root, X)
        del X
        reader = stores.open_reader(Path(src))
        batch = stores.default_batch_size(384, 768)
        group = reader._files[0].metadata.row_group(0).num_rows
        print(f"{n} rows, row groups of {group}, batches of {batch}, "
              f"load {os.getloadavg()[0]:.2f}")

        def first(start):
            it = reader.batches(batch, start)
            next(it)
            it.close()

        last = (n // group - 1) * group  # the last whole row group
        for start in (0, group, group + batch, group + 2 * batch, last, last + batch):
            if start < n:
                print(f"  first batch from row {start:9,d}: {_median(lambda: first(start)):.3f} s")
        sample = stores.verification_positions(reader, batch)
        windows = sample[::stores.SAMPLE_ROWS]
        for k, end in enumerate(windows[1:] + [n], 1):
            earlier = [p for p in sample if p < end]
            took = {rows: [] for rows in (stores.TAKE_BATCH_ROWS, batch)}  # alternated
            now = stores.TAKE_BATCH_ROWS
            try:
                for _ in range(REPEATS):
                    for rows in took:
                        stores.TAKE_BATCH_ROWS = rows
                        t0 = time.perf_counter()
                        reader.take(earlier, batch)
                        took[rows].append(time.perf_counter() - t0)
            finally:
                stores.TAKE_BATCH_ROWS = now
            spent = ", ".join(f"{statistics.median(v):.3f} s in batches of {rows:,}"
                              for rows, v in took.items())
            print(f"  verification read-back of {len(earlier)} rows (the first {k} windows, "
                  f"from row {windows[0]:,}): {spent}")
        print(f"  load {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
