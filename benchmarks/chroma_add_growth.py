"""Does a Chroma ``add`` cost more as the collection grows? (issue 20: why reruns resumed late
in a large Chroma output take more than their share of rows)

``python benchmarks/chroma_add_growth.py [ROWS] [--workdir DIR] [--csv PATH]``

Adds ``ROWS`` (default 100,000) records of ``bench_stores.py``'s own output (its source rows
translated by its 384 → 768 model, ``make_model_and_rows``; a document and a metadata dict
each) to a new cosine collection of a persistent client, in adds of
2,048 records (``skalign._stores.chroma.ADD_ROWS``), and times each add's CPU seconds
(all threads: Chroma's HNSW index is built by threads of its own) and wall seconds. Printed
and written as ``key,value`` (``--csv``): the mean CPU and wall seconds of an add in each
quarter of the collection's final size, and each quarter's mean over the mean of all adds.
The row-share rule of ``bench_stores.py``'s kill study assumes every row costs the same.
"""

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import write_figures

ADD = 2048
ROOT = Path(__file__).resolve().parents[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="?", type=float, default=1e5)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    import sys

    import chromadb

    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]
    from bench_stores import make_model_and_rows

    n = int(args.rows)
    model, X = make_model_and_rows(n)
    V = np.asarray(model.transform(X[:n]), dtype=np.float32)
    folder = Path(tempfile.mkdtemp(prefix="chroma-add-growth-", dir=args.workdir))
    try:
        col = chromadb.PersistentClient(path=str(folder)).create_collection(
            "growth", metadata={"hnsw:space": "cosine"}, embedding_function=None)
        cpu, wall = [], []
        for lo in range(0, n, ADD):
            hi = min(n, lo + ADD)
            E = V[lo:hi]
            c0, t0 = time.process_time(), time.perf_counter()
            col.add(ids=[f"id{i:07d}" for i in range(lo, hi)], embeddings=E,
                    documents=[f"document {i}" for i in range(lo, hi)],
                    metadatas=[{"k": i} for i in range(lo, hi)])
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    figures = {"rows": n, "adds": len(cpu), "cpu_s_total": round(sum(cpu), 2),
               "wall_s_total": round(sum(wall), 2)}
    for name, values in (("cpu", np.array(cpu)), ("wall", np.array(wall))):
        for q, part in enumerate(np.array_split(values, 4), 1):
            figures[f"{name}_s_per_add_q{q}"] = round(float(part.mean()), 3)
            figures[f"{name}_q{q}_over_mean"] = round(float(part.mean() / values.mean()), 2)
    for key, value in figures.items():
        print(f"{key},{value}")
    if args.csv:
        write_figures(args.csv, figures)
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
