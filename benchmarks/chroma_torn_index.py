"""What a SIGKILL leaves of a Chroma collection's HNSW files, and what skalign's check of them
says beside what Chroma does with them (issue 20).

``python benchmarks/chroma_torn_index.py [--trials 60] [--seed 0] [--dim 768] [--cap 60000]
[--keep DIR] [--workdir DIR] [--csv PATH]``

A rerun of ``skalign translate`` into Chroma resumes the shadow a killed run left. Chroma writes
a collection's HNSW index as four files, one after the other, and loads them without a check:
a kill between two of the writes can leave files that Chroma refuses, or on which it dies of a
segmentation fault (once in the kill studies at 200,000 records). skalign checks the files
first (``skalign._stores.hnsw_files.hnsw_fault``) and drops a shadow whose files disagree.
This study measures the check against Chroma itself, on states that real kills leave:

1. A process opens a persistent folder and adds records to one cosine collection, ``add``s of
   2,048 random ``--dim``-d records, until it is SIGKILLed at a seeded uniform moment of 2.5 to
   9 s after its start (the import and the open take about 2 s).
2. The check reads the collection's HNSW files (``fault``, with its time); the folder is kept
   with ``--keep`` where Chroma fails on it.
3. Another process opens a copy of the folder with Chroma and does what a rerun does first:
   ``count``, then an ``add`` of 64 records and a ``query`` (a search through the graph). Its
   exit status (a negative one is the signal that killed it) and last line are Chroma's
   verdict; the copy is then removed.
4. The next trial's adder goes on from the state the kill left (Chroma opening it as a rerun
   does), and the folder grows until a probe fails or the collection holds ``--cap`` records;
   the folder is then made afresh. ``adder_status`` is -9 where the adder was killed, another
   value where it had died by itself.

Writes a row per trial (``--csv``) and ``key,value`` figures beside it (``_summary``): how
many kills left files the check flags, how many Chroma refused or died on, and the four
combinations (``flagged_failed``: the check spares the rerun Chroma's failure;
``flagged_opened``: the check drops a shadow Chroma would have opened, a restart it costs;
``missed``: Chroma failed where the check saw nothing, e.g. a torn ``index_metadata.pickle``,
which Chroma refuses with an error that skalign catches).
"""

import argparse
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import write_figures, write_rows  # noqa: E402

from skalign._stores.chroma import torn_index  # noqa: E402

NAME = "col"

ADDER = r"""
import sys, numpy as np, chromadb
client = chromadb.PersistentClient(path=sys.argv[1])
col = client.get_or_create_collection(sys.argv[2], metadata={"hnsw:space": "cosine"},
                                      embedding_function=None)
n, dim = col.count(), int(sys.argv[3])
rng = np.random.default_rng(n)
while True:
    ids = [f"id{i:08d}" for i in range(n, n + 2048)]
    col.add(ids=ids, embeddings=rng.standard_normal((2048, dim)).astype(np.float32),
            documents=[f"document {i}" for i in range(n, n + 2048)],
            metadatas=[{"k": i} for i in range(n, n + 2048)])
    n += 2048
"""

PROBE = r"""
import sys, numpy as np, chromadb
client = chromadb.PersistentClient(path=sys.argv[1])
col = client.get_collection(sys.argv[2], embedding_function=None)
n = col.count()
X = np.random.default_rng(0).standard_normal((64, int(sys.argv[3]))).astype(np.float32)
col.add(ids=[f"probe{i}" for i in range(64)], embeddings=X)
col.query(query_embeddings=X[:2], n_results=5)
print("opened", n)
"""


def trial(folder, rng, dim, keep, t):
    """One kill of the adder, the check and Chroma's verdict on what it left: a row."""
    adder = subprocess.Popen([sys.executable, "-c", ADDER, str(folder), NAME, str(dim)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = rng.uniform(2.5, 9.0)
    try:
        time.sleep(after)
    finally:  # the adder adds until killed: never left running, even if this one is stopped
        adder.send_signal(signal.SIGKILL)
        status = adder.wait()
    t0 = time.perf_counter()
    fault = torn_index(folder, NAME)
    check_s = time.perf_counter() - t0
    probe_on = folder.with_name("probed")  # a copy: the next adder goes on from the kill's state
    shutil.rmtree(probe_on, ignore_errors=True)
    shutil.copytree(folder, probe_on)
    probe = subprocess.run([sys.executable, "-c", PROBE, str(probe_on), NAME, str(dim)],
                           capture_output=True, text=True)
    shutil.rmtree(probe_on, ignore_errors=True)
    said = ((probe.stdout + probe.stderr).strip().splitlines() or [""])[-1]
    if probe.returncode != 0 and keep:
        shutil.copytree(folder, Path(keep) / f"trial{t}_status{probe.returncode}")
    return {"trial": t, "kill_after_s": round(after, 2),
            "adder_status": status,  # -9: killed; another value: it had ended by itself
            "fault": fault or "",
            "flagged": int(bool(fault)), "check_s": round(check_s, 4),
            "probe_status": probe.returncode, "chroma_failed": int(probe.returncode != 0),
            "segfault": int(probe.returncode == -signal.SIGSEGV),
            "records": int(said.split()[1]) if said.startswith("opened ") else "",
            "chroma_said": said[-200:]}


def summarize(rows):
    """``key,value`` figures over the trials."""
    def both(flagged, failed):
        return sum(r["flagged"] == flagged and r["chroma_failed"] == failed for r in rows)

    checks = [r["check_s"] for r in rows]
    return {"trials": len(rows), "flagged": sum(r["flagged"] for r in rows),
            "adder_died": sum(r["adder_status"] != -signal.SIGKILL for r in rows),
            "chroma_failed": sum(r["chroma_failed"] for r in rows),
            "segfaults": sum(r["segfault"] for r in rows),
            "flagged_failed": both(1, 1), "flagged_opened": both(1, 0), "missed": both(0, 1),
            "agreed_opened": both(0, 0),
            "check_s_median": round(statistics.median(checks), 4) if checks else None,
            "check_s_max": round(max(checks), 4) if checks else None}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--cap", type=int, default=60000,
                    help="records after which the folder is made afresh")
    ap.add_argument("--keep", default=None, help="copy the folders Chroma failed on here")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results"
                                         / "chroma_torn_index.csv"))
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="chroma-torn-", dir=args.workdir))
    csv_path = Path(args.csv)
    rows, summary = [], summarize([])
    try:
        folder = work / "db"
        for t in range(args.trials):
            row = trial(folder, rng, args.dim, args.keep, t)
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            summary = summarize(rows)
            # after each trial: a study stopped part-way keeps what it measured
            write_rows(csv_path, rows)
            write_figures(csv_path.with_name(csv_path.stem + "_summary.csv"), summary)
            if row["chroma_failed"] or (row["records"] or 0) >= args.cap:
                shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return rows, summary


if __name__ == "__main__":
    main()
