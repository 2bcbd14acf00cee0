"""What Chroma's ``upsert`` over records already there costs against an ``add`` (issue 20: a
resumed ``skalign translate`` used to write the interrupted batch again with ``upsert``).

``python benchmarks/chroma_upsert_cost.py``: 8,192 random 768-d records with ids, documents and
metadata into a persistent client's cosine collection, in pieces of Chroma's largest batch:
``add`` into an empty collection, ``upsert`` into an empty one, and ``upsert`` into one that
already holds the first 3,000 of them (what a crashed run leaves); wall and CPU seconds of this
process (Chroma's Rust threads included). The guide and ``skalign/_connectors/_chroma.py`` quote
one run: 11.0 s, 10.8 s and 52.6 s of CPU (16.2, 16.3 and 44.4 s wall), one BLAS thread, 2 busy
cores.
"""

import tempfile
import time

import numpy as np


def main():
    import chromadb

    client = chromadb.PersistentClient(path=tempfile.mkdtemp(prefix="chroma-upsert-"))
    rng = np.random.default_rng(0)
    n = 8192
    V = rng.standard_normal((n, 768)).astype(np.float32)
    ids = [f"id{i:07d}" for i in range(n)]
    docs = [f"document {i}" for i in range(n)]
    meta = [{"k": i} for i in range(n)]
    step = client.get_max_batch_size()

    def write(method, lo=0):
        for s in range(lo, n, step):
            method(ids=ids[s:s + step], embeddings=V[s:s + step], documents=docs[s:s + step],
                   metadatas=meta[s:s + step])

    def timed(label, fn):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        print(f"{label:28s} {time.perf_counter() - t0:7.2f} s wall "
              f"{time.process_time() - c0:7.2f} s CPU", flush=True)

    def collection(name):
        return client.create_collection(name, metadata={"hnsw:space": "cosine"},
                                        embedding_function=None)

    timed("add, empty", lambda: write(collection("aaa").add))
    timed("upsert, empty", lambda: write(collection("bbb").upsert))
    c = collection("ccc")
    c.add(ids=ids[:3000], embeddings=V[:3000], documents=docs[:3000], metadatas=meta[:3000])
    timed("upsert, 3,000 present", lambda: write(c.upsert))


if __name__ == "__main__":
    main()
