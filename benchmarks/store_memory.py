"""Peak memory of ``skalign translate`` into Chroma and Qdrant's local mode, against what the
engine itself takes for the same work (issue 20: peak RSS < 1.5 GB; 200,000 rows for Chroma,
50,000 points for Qdrant's local mode).

``python benchmarks/store_memory.py chroma 2e5 [--workdir DIR] [--csv PATH]`` (also ``qdrant``)

Makes the source as ``bench_stores.py`` does (384-d MiniLM-like rows with ids, documents and
payloads; the 384 → 768 Procrustes model), then runs each step in a fresh process and reports
its peak resident set (``VmHWM``, MiB; the translation's is polled every 20 ms, as
``bench_stores.py`` does):

* ``open``: the engine's client opens the folder and counts the source; what any process that
  opens the folder pays (Qdrant's local mode loads every collection of the folder into memory).
* ``read``: ``open``, then every source row read with the engine's own client in the pages
  ``skalign translate`` reads (Chroma ``get``, Qdrant ``scroll``, vectors included).
* ``translate``: ``python -m skalign translate MODEL SRC OUT``.
* ``bulk``: the engine's own bulk load of the same output vectors (the translation's output,
  saved to ``.npy`` and memory-mapped), with the same ids and fields, in batches of 4,096
  (Chroma ``add``) or 1,024 (Qdrant ``upsert``) into a new collection of the same folder (beside
  the source, where the translation writes); no skalign code.
* ``bulk_alone``: the same into a new, empty folder.

The resident set does not depend on the folder's file system (the engines do not map their
files), so ``--workdir /dev/shm`` gives the same figures faster (Qdrant's local mode commits
every point with an fsync).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import store_backends as sb  # noqa: E402
from _common import write_rows  # noqa: E402
from bench_stores import make_model_and_rows, run_cli  # noqa: E402

_HWM = """
def _hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""

_CHILD = {
    ("chroma", "open"): """
import chromadb
col = chromadb.PersistentClient(path=FOLDER).get_collection("src")
col.count()
""",
    ("chroma", "read"): """
import chromadb
col = chromadb.PersistentClient(path=FOLDER).get_collection("src")
for lo in range(0, col.count(), BATCH):
    col.get(limit=BATCH, offset=lo, include=["embeddings", "documents", "metadatas"])
""",
    ("chroma", "bulk"): """
import chromadb, numpy as np
V = np.load(VECTORS, mmap_mode="r")
client = chromadb.PersistentClient(path=FOLDER)
col = client.create_collection("bulk", metadata={"hnsw:space": "cosine"},
                               embedding_function=None)
for lo in range(0, len(V), 4096):
    hi = min(len(V), lo + 4096)
    col.add(ids=[f"id{i:07d}" for i in range(lo, hi)], embeddings=np.array(V[lo:hi]),
            documents=[f"document {i}" for i in range(lo, hi)],
            metadatas=[{"k": i} for i in range(lo, hi)])
""",
    ("qdrant", "open"): """
from qdrant_client import QdrantClient
QdrantClient(path=FOLDER).count("src")
""",
    ("qdrant", "read"): """
from qdrant_client import QdrantClient
client, offset = QdrantClient(path=FOLDER), None
while True:
    points, offset = client.scroll("src", limit=BATCH, offset=offset, with_payload=True,
                                   with_vectors=True)
    if offset is None:
        break
""",
    ("qdrant", "bulk"): """
from qdrant_client import QdrantClient, models
import numpy as np
V = np.load(VECTORS, mmap_mode="r")
client = QdrantClient(path=FOLDER)
client.create_collection("bulk", vectors_config={
    "text": models.VectorParams(size=V.shape[1], distance=models.Distance.COSINE),
    "title": models.VectorParams(size=2, distance=models.Distance.DOT)})
for lo in range(0, len(V), 1024):
    hi = min(len(V), lo + 1024)
    client.upsert("bulk", points=models.Batch(
        ids=list(range(lo, hi)),
        vectors={"text": V[lo:hi].tolist(), "title": [[1.0, float(i)] for i in range(lo, hi)]},
        payloads=[{"doc": f"document {i}", "k": i} for i in range(lo, hi)]))
client.close()
""",
}


def child_peak(kind, step, folder, vectors=None, batch=1024):
    code = (f"import warnings; warnings.simplefilter('ignore')\nFOLDER = {str(folder)!r}\n"
            f"VECTORS = {str(vectors)!r}\nBATCH = {batch}\n{_HWM}"
            + _CHILD[(kind, "bulk" if step == "bulk_alone" else step)]
            + "\nprint('PEAK', _hwm())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return float(out.split("PEAK")[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["chroma", "qdrant"])
    ap.add_argument("rows", type=float)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    from skalign._stores.pipeline import ENGINE_BATCH_ROWS
    from skalign.io import save

    n = int(args.rows)
    model, X = make_model_and_rows(n)
    work = Path(tempfile.mkdtemp(prefix="store-memory-", dir=args.workdir))
    backend = {"chroma": sb.Chroma(), "qdrant": sb.Qdrant()}[args.kind]
    folder = work / args.kind
    rows = []

    def report(step, peak, note=""):
        rows.append({"backend": args.kind, "rows": n, "step": step,
                     "peak_rss_mib": round(peak), "note": note})
        print(f"{args.kind} {n} {step:11s} {peak:7.0f} MiB {note}", flush=True)

    try:
        model_path = str(save(model, work / "model.skops"))
        src = backend.make(work, X)
        _close()
        batch = ENGINE_BATCH_ROWS[args.kind]
        report("open", child_peak(args.kind, "open", folder))
        report("read", child_peak(args.kind, "read", folder, batch=batch), f"pages of {batch}")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        out = backend.output(work)
        status, wall, peak, text, _ = run_cli(["translate", model_path, src, out], env)
        assert status == 0, text
        report("translate", peak, text.strip().splitlines()[-1])
        ids, V, _ = backend.read(out)
        _close()
        if not np.array_equal(ids, np.arange(n)):  # the bulk loads number rows 0..n-1
            raise AssertionError("unexpected ids")
        np.save(work / "out.npy", V)
        del V
        _drop_output(args.kind, folder)  # the folder as it was: the source only
        report("bulk", child_peak(args.kind, "bulk", folder, work / "out.npy"),
               "beside the source")
        alone = work / "alone"
        alone.mkdir()
        report("bulk_alone", child_peak(args.kind, "bulk_alone", alone, work / "out.npy"),
               "empty folder")
    finally:
        _close()
        shutil.rmtree(work, ignore_errors=True)
    if args.csv:
        write_rows(args.csv, rows)
        print(f"wrote {args.csv}")
    print(json.dumps({r["step"]: r["peak_rss_mib"] for r in rows}))


def _close():
    from skalign._stores import qdrant as _qdrant

    _qdrant._close_all()


def _drop_output(kind, folder):
    if kind == "chroma":
        import chromadb

        client = chromadb.PersistentClient(path=str(folder))
        for c in client.list_collections():
            if c.name != "src":
                client.delete_collection(c.name)
        return
    from qdrant_client import QdrantClient
    from qdrant_client import models as m

    client = QdrantClient(path=str(folder))
    ops = [m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=a.alias_name))
           for a in client.get_aliases().aliases]
    if ops:
        client.update_collection_aliases(change_aliases_operations=ops)
    for c in client.get_collections().collections:
        if c.name != "src":
            client.delete_collection(c.name)
    client.close()


if __name__ == "__main__":
    main()
