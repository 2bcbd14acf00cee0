"""What the writers that share rows cost: ``migrate``, ``migrate --continue`` and ``search`` with
write-back, timed side by side on two source trees (this one and another commit's), to check
that provenance bound to each row's text and compare-and-set writes keep their throughput.

A Parquet store of ``--rows`` rows (64-d old vectors, texts ``text i``) and a stand-in new
encoder that costs nothing (a fixed random vector per text, from its digest), so the time is
skalign's own: choosing, reading and encoding the budget, planning and fitting, translating,
writing marks (``migrate``, ``--budget``); encoding ``--step`` more rows and writing the store
again (``--continue``); ``--queries`` searches of ``K = 100`` candidates, one query a call, each
encoding its candidates' texts and writing them back (``search``).

Usage::

    git worktree add /tmp/before <commit>
    python benchmarks/bench_writers.py --other /tmp/before [--rows 20000] [--repeats 3]

Each tree runs in a process of its own (its folder first on ``PYTHONPATH``), the trees
alternating, ``--repeats`` times; the table gives the median and the range of each.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]


def _one(rows, budget, step, queries):
    """One run in this process (the tree on ``sys.path``): seconds per command."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from skalign.encoders import CachedEncoder, CallableEncoder
    from skalign.io import migrate
    from skalign.search import Searcher

    def embed(texts):
        out = np.empty((len(texts), 64), np.float32)
        for i, t in enumerate(texts):
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            out[i] = np.random.default_rng(seed).normal(size=64)
        return out

    folder = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    texts = [f"text {i}" for i in range(rows)]
    W = rng.normal(size=(64, 64))
    old = (embed(texts) @ W + 0.5 * rng.normal(size=(rows, 64))).astype(np.float32)
    pq.write_table(pa.table({"id": np.arange(rows), "text": texts,
                             "emb": pa.FixedSizeListArray.from_arrays(
                                 pa.array(old.reshape(-1)), 64)}), folder / "src.parquet")
    enc = CachedEncoder(CallableEncoder(embed, fingerprint="bench-writers"))
    src, out = str(folder / "src.parquet"), str(folder / "out.parquet")
    times = {}
    t = time.perf_counter()
    migrate(src, out, enc, budget, text_field="text", anyway=True)
    times["migrate"] = time.perf_counter() - t
    t = time.perf_counter()
    migrate(src, out, enc, step, text_field="text", anyway=True, continue_=True)
    times["continue"] = time.perf_counter() - t
    Q = embed([f"text {i}" for i in rng.choice(rows, queries, replace=False)])
    fresh = CallableEncoder(embed, fingerprint="bench-writers")
    with Searcher(out, fresh, k_candidates=100, text_field="text") as s:
        t = time.perf_counter()
        for q in Q:
            s.search(q[None, :], k=10)
        s.flush()
        times["search"] = time.perf_counter() - t
    import shutil

    shutil.rmtree(folder)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--other", help="another source tree (a git worktree) to time beside")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--budget", type=int, default=500)
    p.add_argument("--step", type=int, default=2000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(_one(a.rows, a.budget, a.step, a.queries)))
        return
    trees = {"this tree": HERE}
    if a.other:
        trees["other tree"] = Path(a.other).resolve()
    got = {name: [] for name in trees}
    for _ in range(a.repeats):
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
            run = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child", "--rows",
                 str(a.rows), "--budget", str(a.budget), "--step", str(a.step),
                 "--queries", str(a.queries)], env=env, capture_output=True, text=True,
                cwd=tree, check=True)
            got[name].append(json.loads(run.stdout.strip().splitlines()[-1]))
    print(f"{a.rows} rows, migrate --budget {a.budget}, --continue --budget {a.step}, "
          f"{a.queries} searches (K = 100, write-back); seconds, median [min, max] of "
          f"{a.repeats}")
    print(f"{'command':<10}" + "".join(f"{name:>26}" for name in trees))
    for cmd in ("migrate", "continue", "search"):
        cells = []
        for name in trees:
            v = np.array([r[cmd] for r in got[name]])
            cells.append(f"{np.median(v):8.2f} [{v.min():.2f}, {v.max():.2f}]")
        print(f"{cmd:<10}" + "".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
