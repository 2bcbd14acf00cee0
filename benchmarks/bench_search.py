"""Search a translated store with the new encoder in the loop (``skalign.search``): recall and cost.

``python benchmarks/bench_search.py [NPZ] [--pairs 2000] [--serve 1000] [--quick]``

Data: the development set ``../shared/data/docstrings_en.npz`` (4,000 texts embedded by MiniLM,
MPNet and multilingual-e5-small). A ridge map (``LinearAligner``, its default leave-one-out
penalty) is fitted on ``--pairs`` MiniLM → new-encoder pairs; the other texts' MiniLM vectors,
translated, are the store: an ``.npy`` file with the texts in a ``.jsonl`` beside it. Queries
are the new encoder's vectors of those same texts; a query's true top-10 is its top-10 by cosine
in the re-embedded store (the new encoder's vectors), its own row left out everywhere.

The "new encoder" is a **lookup**: a callable returning the development set's stored
MPNet (or e5) vector of a text. It costs nothing, so the latencies below are skalign's own
(candidate search, reading rows and texts, the encode cache, exact re-scoring, write-back);
the model's own time is estimated from the development set's measured encoding rate on the
same 2-core machine (``encode_seconds`` in its metadata: MPNet 95 ms, e5 34 ms per text, in
batches) times the texts encoded per query.

Figures, per new encoder and number of candidates ``K``:

* ``top-10 kept``: recall@10 of the translated store's own top-10 (no re-scoring), and
  ``searcher``: of the searcher (re-scoring the store index's top-``K``), on a store nothing
  was written to;
* serving, one query per call, ``--serve`` queries in random order on a fresh store with an
  empty encode cache (*cold*): texts encoded per query over the first 10, the first 100 and all
  queries, skalign's milliseconds per query over the first 100, the model's estimated
  milliseconds per query over the first 100, and the share of the store encoded after 100 and
  after all queries;
* *warm*: the first 100 queries again on another fresh store, the encode cache holding their
  texts (a second replica, or a store restored): skalign's milliseconds per query (no model);
* on the store as it is after the first 100 cold queries (partly encoded): recall@10 of every
  query, and the share of queries whose results are identical whether encoded candidates are
  re-encoded (``rescore="all"``) or scored by their stored vectors (the default).

Latencies depend on the machine's load; the run prints the load average it started with.
"""

import argparse
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from skalign import LinearAligner
from skalign.search import Searcher

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"
ENCODERS = {"mpnet_base": "MiniLM -> MPNet", "me5_small_q4": "MiniLM -> e5"}


def unit(M):
    return M / np.linalg.norm(M, axis=1, keepdims=True)


def recall_at_10(found, truth):
    """Mean share of each query's true top-10 among its first 10 results but itself."""
    return float(np.mean([len(set(t) & set([i for i in f if i != q][:10])) / 10
                          for q, (f, t) in enumerate(zip(found, truth))]))


def make_store(folder, T, texts):
    folder.mkdir(parents=True)
    np.save(folder / "store.npy", T)
    (folder / "texts.jsonl").write_text("".join(json.dumps(t) + "\n" for t in texts))
    return str(folder / "store.npy"), str(folder / "texts.jsonl")


def serve(store, texts_path, encoder, K, queries, cache, on_query=None):
    """One query per call: per query, the texts encoded and skalign's seconds."""
    encoded, seconds = [], []
    with Searcher(store, encoder, k_candidates=K, text_field=texts_path, cache=cache) as s:
        for n, q in enumerate(queries):
            before = s.stats.encoded
            t0 = time.perf_counter()
            s.search(q[None, :], k=11)
            seconds.append(time.perf_counter() - t0)
            encoded.append(s.stats.encoded - before)
            if on_query is not None:
                on_query(n + 1, s)
    return np.array(encoded), np.array(seconds)


def mixed_check(store, texts_path, encoder, K, R, truth):
    """Recall@10 on the store as it is, and the share of identical results with encoded
    candidates encoded again."""
    found = {}
    for mode in ("translated", "all"):
        with Searcher(store, encoder, k_candidates=K, text_field=texts_path, rescore=mode,
                      write_back=False) as s:
            found[mode] = s.search(R, k=11).ids
    same = float(np.mean([a == b for a, b in zip(found["translated"], found["all"])]))
    return recall_at_10(found["translated"], truth), same


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--serve", type=int, default=1000, help="queries served one at a time")
    p.add_argument("--candidates", default="50,100,200")
    p.add_argument("--quick", action="store_true", help="200 queries served, K = 50 only")
    args = p.parse_args(argv)
    if args.quick:
        args.serve, args.candidates = 200, "50"
    Ks = [int(k) for k in args.candidates.split(",")]
    Z = np.load(args.npz)
    meta = json.load(gzip.open(Path(args.npz).with_name("docstrings_en.texts.json.gz"), "rt"))
    texts = meta["texts"]
    A = Z["minilm_l6"].astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(A))
    pairs, held = perm[:args.pairs], perm[args.pairs:]
    held_texts = [texts[i] for i in held]
    order = np.random.default_rng(1).permutation(len(held))[:args.serve]
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench_search_"))
    rows = []
    try:
        for key, label in ENCODERS.items():
            B = Z[key].astype(np.float32)
            per_text = meta["meta"]["arrays"][key]["encode_seconds"] / len(B)
            T = LinearAligner().fit(A[pairs], B[pairs]).transform(A[held]).astype(np.float32)
            R = B[held]
            S = unit(R) @ unit(R).T
            np.fill_diagonal(S, -np.inf)
            truth = np.argsort(-S, axis=1)[:, :10]
            St = unit(R) @ unit(T).T
            plain = recall_at_10(np.argsort(-St, axis=1)[:, :11], truth)
            table = dict(zip(held_texts, R))

            def lookup(batch, table=table):
                return np.stack([table[t] for t in batch])

            lookup.fingerprint = f"lookup:{key}"
            for K in Ks:
                store, tx = make_store(work / f"{key}-{K}", T, held_texts)
                with Searcher(store, lookup, k_candidates=K, text_field=tx,
                              write_back=False) as s:
                    rescored = recall_at_10(s.search(R, k=11).ids, truth)
                cache = work / f"{key}-{K}.sqlite"
                at_100 = {}

                def after(n, searcher, store=store, tx=tx, K=K, at_100=at_100):
                    if n == min(100, len(order)):
                        searcher.flush()  # the store as a reader sees it now
                        at_100["share"] = searcher.stats.written / len(held)
                        at_100["mixed"] = mixed_check(store, tx, lookup, K, R, truth)

                enc, sec = serve(store, tx, lookup, K, R[order], cache, after)
                share = enc.sum() / len(held)
                warm_store, _ = make_store(work / f"{key}-{K}-warm", T, held_texts)
                _, warm = serve(warm_store, tx, lookup, K, R[order[:100]], cache)
                first = min(100, len(order))
                rows.append((label, K, plain, rescored, enc[:10].mean(), enc[:first].mean(),
                             enc.mean(), 1000 * sec[:first].mean(),
                             1000 * per_text * enc[:first].mean(), 1000 * warm.mean(),
                             at_100["share"], share, *at_100["mixed"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = ("pair", "K", "top-10 kept", "searcher", "enc/q first 10", "enc/q first 100",
            f"enc/q all {len(order)}", "cold ms/q", "+model ms/q", "warm ms/q",
            "encoded after 100", f"after {len(order)}", "mixed recall", "same results")
    print(f"{len(held)}-row store, ridge map on {args.pairs} pairs; {len(order)} queries served "
          f"one at a time; load average at start {load:.1f} on {os.cpu_count()} cores")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([r[0], str(r[1]), f"{r[2]:.3f}", f"{r[3]:.3f}", f"{r[4]:.1f}",
                          f"{r[5]:.1f}", f"{r[6]:.1f}", f"{r[7]:.1f}", f"{r[8]:.0f}",
                          f"{r[9]:.1f}", f"{r[10]:.1%}", f"{r[11]:.1%}", f"{r[12]:.3f}",
                          f"{r[13]:.1%}"]))
    return rows

if __name__ == "__main__":
    main()
