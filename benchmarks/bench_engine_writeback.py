"""Write-back throughput of the Qdrant (local folder) and Chroma live stores by the rows each
engine call carries: what each store's ``WRITE_PAGE`` (rows per ``batch_update_points`` /
``collection.update``) should be.

A store of ``--rows`` rows of 384-d is made (``benchmarks/_stores_harness.py``), then for each
page size a write-back of ``--step`` random rows (new random vectors) in one
:meth:`~skalign._stores.live.LiveStore.write_back` call, compare-and-set against the marks
read before: once with one mark for every row (a retranslation, ``translated:<map>``) and once
with a mark per row (encoded rows). Prints rows per second per engine, page size and kind of
marks.

Run: ``python benchmarks/bench_engine_writeback.py [--rows 10000] [--step 4096]
[--pages 128,512,2048,4096] [--engines qdrant,chroma]``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DIM = 384


def measure(engine, rows, step, pages):
    """``{(page, marks): rows per second}`` of ``engine`` ("qdrant" or "chroma")."""
    from _stores_harness import BACKENDS

    from skalign._stores import open_live

    live = importlib.import_module(f"skalign._stores.{engine}.live")
    root = Path(tempfile.mkdtemp(prefix=f"bench-ewb-{engine}-"))
    rng = np.random.default_rng(0)
    out = {}
    try:
        address = BACKENDS[engine].make(root, rng.normal(size=(rows, DIM)).astype(np.float32))
        if engine == "qdrant":  # the harness's client holds the folder: released for skalign
            from _stores_harness import close_clients

            close_clients()
        with open_live(address) as store:
            all_ids = store.ids()
            default = live.WRITE_PAGE
            try:
                for page in pages:
                    live.WRITE_PAGE = page
                    for kind in ("one mark", "a mark each"):
                        at = rng.choice(rows, step, replace=False)
                        ids = [all_ids[i] for i in at]
                        now = store.fetch(ids).provenance
                        V = rng.normal(size=(step, DIM)).astype(np.float32)
                        marks = ["translated:bench"] * step if kind == "one mark" else \
                            [f"encoded:bench::{i:016x}" for i in range(step)]
                        t = time.perf_counter()
                        done = store.write_back(ids, V, marks, now)
                        out[page, kind] = int(done.sum()) / (time.perf_counter() - t)
                        print(f"{engine} page {page} {kind}: {out[page, kind]:.0f} rows/s",
                              flush=True)
            finally:
                live.WRITE_PAGE = default
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--step", type=int, default=4096)
    parser.add_argument("--pages", default="128,512,2048,4096")
    parser.add_argument("--engines", default="qdrant,chroma")
    args = parser.parse_args(argv)
    pages = [int(p) for p in args.pages.split(",")]
    got = {e: measure(e, args.rows, args.step, pages) for e in args.engines.split(",")}
    print(f"\n{args.rows} rows of {DIM}-d, write-back of {args.step} rows in one call; rows "
          f"per second; load {os.getloadavg()[0]:.1f}")
    print(f"{'engine':<8}{'marks':<13}" + "".join(f"{p:>9}" for p in pages))
    for engine, out in got.items():
        for kind in ("one mark", "a mark each"):
            print(f"{engine:<8}{kind:<13}" + "".join(f"{out[p, kind]:>9.0f}" for p in pages))


if __name__ == "__main__":
    main()
