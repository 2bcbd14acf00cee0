"""Does a Chroma output resumed after a SIGKILL search as well as one translated without a
break? (issue 20)

``python benchmarks/chroma_resumed_search.py [--rows 2e5] [--pairs 4] [--queries 1000]
[--seed 0] [--workdir DIR] [--csv PATH]``

Chroma builds a collection's HNSW index as records are added. A translation into a Chroma
shadow that was killed leaves the index as Chroma last persisted it, and Chroma's own log of the
records added since; the rerun loads that index, Chroma applies its log to it, and the rerun
goes on adding. ``bench_stores.py``'s kill study compares the published records (ids, vectors,
documents, metadata) with an uninterrupted run's; this compares the published *index*, by
searching it.

The source is ``bench_stores.py``'s (its rows and its 384 → 768 model, a cosine collection with
a document and a metadata dict per record), made once and copied afresh for every run. First an
uninterrupted ``skalign translate`` (the reference: its time sets the kill moments); then
``--pairs`` times, alternated: a run SIGKILLed at a uniform moment between 10 % and 90 % of the
reference's time followed by the same command (the resumed output), and an uninterrupted run.
Each output is checked in a child process: its records' own vectors are the queries (the same
``--queries`` records in every run), and the result is the share of queries whose record comes
first (``self_top1``), and the share of the exact 10 nearest records (by the collection's
distance) among the 10 returned (``recall10``), and a digest of the ids and vectors (the same
for every run when the records are). Chroma's HNSW build runs in threads of its own, so two
uninterrupted runs do not give the same index either: the uninterrupted runs give the spread.

Writes a row per run (``--csv``) and, beside it (``_summary``), ``key,value`` figures: per kind
of run (``uninterrupted``, ``resumed``; a killed run that had published before its kill, whose
rerun finds the output there, is not counted), the number of runs and the median, lowest and highest
``recall10`` and ``self_top1``, and whether every digest equalled the reference's (1
or 0).
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the check of one output, in a child: the folder's clients close with it, and an index Chroma
# cannot search (a crash in its native code) fails that run only
_CHECK = """
import hashlib, json, sys
import numpy as np, chromadb
folder, name, n_queries, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
col = chromadb.PersistentClient(path=folder).get_collection(name, embedding_function=None)
n = col.count()
ids, parts = [], []
for lo in range(0, n, 5000):
    page = col.get(limit=5000, offset=lo, include=["embeddings"])
    ids += page["ids"]
    parts.append(np.asarray(page["embeddings"], np.float32))
order = np.argsort(ids)
ids, V = np.asarray(ids)[order], np.concatenate(parts)[order]
digest = hashlib.sha256(ids.astype("U").tobytes() + V.tobytes()).hexdigest()[:16]
space = (col.configuration or {}).get("hnsw", {}).get("space") or "l2"
q = np.random.default_rng(seed).choice(n, size=min(n_queries, n), replace=False)
if space == "cosine":
    U = V / np.linalg.norm(V, axis=1, keepdims=True)
    score = U[q] @ U.T
elif space == "ip":
    score = V[q] @ V.T
else:
    score = 2 * (V[q] @ V.T) - (V * V).sum(1)[None, :]
exact = np.argpartition(-score, 10, axis=1)[:, :10]
got = col.query(query_embeddings=V[q], n_results=10, include=[])["ids"]
pos = [np.searchsorted(ids, row) for row in got]
print(json.dumps({"records": int(n), "space": space, "digest": digest,
                  "self_top1": round(float(np.mean([p[0] == k for p, k in zip(pos, q)])), 4),
                  "recall10": round(float(np.mean([len(set(p) & set(e)) / 10
                                                   for p, e in zip(pos, exact)])), 4)}))
"""


def check(folder, name, queries, seed):
    done = subprocess.run([sys.executable, "-c", _CHECK, str(folder), name, str(queries),
                           str(seed)], capture_output=True, text=True)
    if done.returncode != 0:
        return {"check_error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=float, default=2e5)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results"
                                         / "chroma_resumed_search.csv"))
    args = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]
    import bench_stores as bs
    from store_backends import Chroma

    from skalign.io import save

    n = int(args.rows)
    model, X = bs.make_model_and_rows(n)
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="chroma-resumed-search-", dir=args.workdir))
    rng, rows = random.Random(args.seed), []
    try:
        model_path = str(save(model, work / "model.skops"))
        Chroma().make(work / "base", X)
        del X
        from chromadb.api.client import SharedSystemClient

        SharedSystemClient.clear_system_cache()  # the base's client closed before it is copied
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        folder = work / "chroma"
        argv_ = ["translate", model_path, f"chroma:{folder}/src", f"chroma:{folder}/out"]
        ref_s = None
        kinds = ["uninterrupted"] + ["resumed", "uninterrupted"] * args.pairs
        for run, kind in enumerate(kinds):
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(work / "base" / "chroma", folder)
            kill_after = killed = None
            if kind == "resumed":
                kill_after = ref_s * rng.uniform(0.1, 0.9)
                status, *_ = bs.run_cli(argv_, env, kill_after=kill_after)
                killed = status is None
            status, wall, _, text, _ = bs.run_cli(argv_, env)
            row = {"run": run, "kind": kind, "rows": n,
                   "kill_after_s": None if kill_after is None else round(kill_after, 2),
                   "killed": killed, "resumed_at": bs.resumed_row(text) if kind == "resumed"
                   else None, "status": status, "wall_s": round(wall, 2),
                   "said": bs._last_line(text).replace(str(work), "WORK"),
                   # the killed run had published before the kill: no rerun took place
                   "after_publish": kind == "resumed" and "already exists" in text,
                   **check(folder, "out", args.queries, args.seed)}
            if ref_s is None:
                ref_s = wall
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(rows)
    write(args.csv, rows, summary)
    for key, value in summary.items():
        print(f"{key}={value}")
    return rows, summary


def summarize(rows):
    out = {}
    ref = rows[0].get("digest")
    for kind in ("uninterrupted", "resumed"):
        got = [r for r in rows if r["kind"] == kind and "recall10" in r
               and not r.get("after_publish")]
        out[f"{kind}_runs"] = len(got)
        for key in ("recall10", "self_top1"):
            values = [r[key] for r in got]
            if values:
                out[f"{kind}_{key}_median"] = round(statistics.median(values), 4)
                out[f"{kind}_{key}_min"] = round(min(values), 4)
                out[f"{kind}_{key}_max"] = round(max(values), 4)
        out[f"{kind}_same_records"] = int(all(r.get("digest") == ref for r in got))
    out["check_errors"] = sum("check_error" in r for r in rows)
    return out


def write(path, rows, summary):
    from _common import write_figures, write_rows

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_rows(path, rows)
    write_figures(path.with_name(path.stem + "_summary.csv"), summary)


if __name__ == "__main__":
    main()
