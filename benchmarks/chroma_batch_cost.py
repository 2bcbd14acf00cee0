"""CPU seconds of Chroma's ``get`` and ``add`` by batch size: whether the 1,024-row batches
``skalign translate`` uses for Chroma (for memory) cost throughput against larger ones.

``python benchmarks/chroma_batch_cost.py [ROWS] [--reads-only]`` (default 10,000) makes a
collection of ROWS 384-d clustered vectors in a temporary folder, reads it with ``get``
(vectors, documents, metadata) in pages of 1,024 and 8,192 rows by ``offset``, then as
``skalign translate`` reads it (the ids once, in pages of its ``ID_PAGE``, then pages of
1,024 by id; the read of the ids included), then one page of each size at the first, middle and last
offset, three times (a ``get`` with an ``offset`` skips the rows before it one by one, so
small pages over a large collection cost more), and ``add``s ROWS 768-d
vectors to new collections in batches of 1,024 and 5,461 (Chroma's largest batch here; not with
``--reads-only``), printing the CPU seconds (``time.process_time``, all threads) of each.
"""

import shutil
import sys
import tempfile
import time

import numpy as np


def main():
    import chromadb

    from skalign._stores.chroma import ID_PAGE

    args = [a for a in sys.argv[1:] if a != "--reads-only"]
    n = int(float(args[0])) if args else 10_000
    folder = tempfile.mkdtemp(prefix="chroma-batch-cost-")
    try:
        client = chromadb.PersistentClient(path=folder)
        rng = np.random.default_rng(0)
        X = (0.05 * rng.standard_normal((n, 384)) + rng.standard_normal((1, 384))).astype(
            np.float32)
        src = client.create_collection("src", metadata={"hnsw:space": "cosine"},
                                       embedding_function=None)
        for lo in range(0, n, 4096):
            src.add(ids=[f"id{i:07d}" for i in range(lo, min(n, lo + 4096))],
                    embeddings=X[lo:lo + 4096])
        for batch in (1024, 8192):
            t0 = time.process_time()
            for lo in range(0, n, batch):
                src.get(limit=batch, offset=lo, include=["embeddings", "documents", "metadatas"])
            print(f"get {n} rows in pages of {batch}: {time.process_time() - t0:.2f} s CPU",
                  flush=True)
        t0 = time.process_time()  # as skalign's reader: the ids once, then each page by id
        ids = [i for lo in range(0, n, ID_PAGE)
               for i in src.get(limit=ID_PAGE, offset=lo, include=[])["ids"]]
        for lo in range(0, n, 1024):
            src.get(ids=ids[lo:lo + 1024], include=["embeddings", "documents", "metadatas"])
        print(f"get {n} rows by id in pages of 1024: {time.process_time() - t0:.2f} s CPU",
              flush=True)
        for batch in (1024, 8192):
            for lo in (0, n // 2, max(0, n - batch)):
                t0 = time.process_time()
                for _ in range(3):
                    src.get(limit=batch, offset=lo, include=["embeddings", "documents",
                                                             "metadatas"])
                print(f"get a page of {batch} at offset {lo}: "
                      f"{(time.process_time() - t0) / 3 * 1000:.0f} ms CPU", flush=True)
        if "--reads-only" in sys.argv:
            return
        Y = np.concatenate([X, X], axis=1)
        for batch in (1024, 5461):
            col = client.create_collection(f"out{batch}", metadata={"hnsw:space": "cosine"},
                                           embedding_function=None)
            t0 = time.process_time()
            for lo in range(0, n, batch):
                col.add(ids=[f"id{i:07d}" for i in range(lo, min(n, lo + batch))],
                        embeddings=Y[lo:lo + batch])
            print(f"add {n} rows in batches of {batch}: {time.process_time() - t0:.2f} s CPU",
                  flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
