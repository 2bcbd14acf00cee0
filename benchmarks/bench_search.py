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

``python benchmarks/bench_search.py --scale [--sizes 100000,1000000] [--formats npy,parquet]
[--dim 384] [--noise 1.0]``

Search at scale, exact scan against skalign's index beside the store (``Searcher(index=...)``,
:mod:`skalign._stores.files.ann`): synthetic stores of 384-d float32 rows with cluster structure
(1,000 centres on a random 32-d subspace, each row a centre plus N(0, I) noise: the clusters
overlap, so that an approximate index has something to find and to miss), an id column and
texts ``t<i>`` (Parquet) or a text file (``.npy``); 100 queries drawn the same way. The "new
encoder" is a stand-in that costs no model time (a seeded vector per text). Each step runs in
its own process, whose peak resident memory (``VmHWM``) is reported:

* ``build``: the index built (``index="build"``), seconds;
* ``exact`` / ``index``: the candidate step (``store.top_k``, ``K`` = 100) per query, in the
  searcher's batches of 32 queries and one query at a time, and a whole ``Searcher.search``
  per query (candidates, rows and texts read, re-scored; no write-back);
* ``recall@100``: the share of the exact scan's 100 candidates that the index's 100 hold, over
  the 100 queries.

``--noise 1.5`` spreads the rows further around their centres (the clusters overlap more):
the index's recall then falls below 1 and shows what its probes miss. 10^7 rows of 384-d are
15 GB: on this 2-core machine, 10^7 rows ran at ``--dim 64`` (2.6 GB).
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


def scale_store(folder, fmt, n, d=384, seed=0, noise=1.0):
    """A synthetic store of ``n`` clustered rows (see the module docstring), written in chunks;
    returns ``(address, text_field, queries)``."""
    rng = np.random.default_rng(seed)
    # centres on a 32-d subspace, rows spread around them as far as the centres lie apart
    # (squared distances within a cluster ~ 768, between centres ~ 768): clusters overlap
    A = rng.standard_normal((32, d)).astype(np.float32) / np.sqrt(32)
    centres = rng.standard_normal((1000, 32)).astype(np.float32) @ A

    def draw(m):
        return centres[rng.integers(0, len(centres), m)] + \
            noise * rng.standard_normal((m, d), dtype=np.float32)

    queries = draw(100)
    step = 65536
    if fmt == "npy":
        from numpy.lib.format import open_memmap

        path = folder / f"s{n}.npy"
        out = open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
        for lo in range(0, n, step):
            out[lo:lo + step] = draw(min(step, n - lo))
        out.flush()
        del out
        texts = folder / f"s{n}.txt"
        with open(texts, "w") as f:
            for lo in range(0, n, step):
                f.write("".join(f"t{i}\n" for i in range(lo, min(n, lo + step))))
        return str(path), str(texts), queries
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / f"s{n}.parquet"
    writer = None
    for lo in range(0, n, step):
        m = min(step, n - lo)
        table = pa.table({"id": np.arange(lo, lo + m), "text": [f"t{i}" for i in range(lo, lo + m)],
                          "vector": pa.FixedSizeListArray.from_arrays(
                              pa.array(draw(m).reshape(-1)), d)})
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="none")
        writer.write_table(table)
    writer.close()
    return str(path), "text", queries


def stand_in(d):
    """The new encoder's stand-in: a seeded ``d``-wide vector per text, no model time."""

    def encode(texts):
        return np.stack([np.random.default_rng(int(t[1:])).standard_normal(d, dtype=np.float32)
                         for t in texts])

    encode.fingerprint = f"bench-stand-in-{d}"
    return encode


def peak_gb(field="VmHWM"):
    """This process's peak resident memory (``VmHWM``: Linux keeps ``ru_maxrss`` across
    ``exec``, so a child would report its parent's peak), or another field of its status
    (``RssAnon``: its own memory now, without the pages of files it maps)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 2 ** 20
    return float("nan")


def scale_worker(spec):
    """One step in this process (``spec``: JSON), printing its figures as one JSON line."""
    from skalign._stores import open_live
    from skalign._stores.files.ann import use_index

    spec = json.loads(spec)
    Q = np.load(spec["queries"])
    out = {"base_gb": peak_gb()}
    t0 = time.perf_counter()
    with open_live(spec["store"], text_field=spec["texts"]) as store:
        mode = "exact" if spec["step"] == "exact" else "build" if spec["step"] == "build" \
            else "existing"
        out["how"] = use_index(store, mode)
        out["open_s"] = time.perf_counter() - t0
        if spec["step"] != "build":
            t0 = time.perf_counter()
            ids = []
            batches = Q if spec["step"] == "index" else Q[:64]
            for lo in range(0, len(batches), 32):
                ids += store.top_k(batches[lo:lo + 32], 100)[0]
            out["batched_ms"] = 1000 * (time.perf_counter() - t0) / len(batches)
            singles = Q[:20] if spec["step"] == "index" else Q[:3]
            t0 = time.perf_counter()
            for q in singles:
                store.top_k(q[None, :], 100)
            out["single_ms"] = 1000 * (time.perf_counter() - t0) / len(singles)
            out["ids"] = [[int(i) for i in row] for row in ids]
    if spec["step"] != "build":
        searched = Q[:64] if spec["step"] == "exact" else Q
        with Searcher(spec["store"], stand_in(Q.shape[1]), k_candidates=100,
                      text_field=spec["texts"], write_back=False, index=mode) as s:
            t0 = time.perf_counter()
            s.search(searched, k=10)
            out["searcher_ms"] = 1000 * (time.perf_counter() - t0) / len(searched)
    out["seconds"] = time.perf_counter() - t0 if spec["step"] == "build" else None
    out["peak_gb"] = peak_gb()
    out["anon_gb"] = peak_gb("RssAnon")
    print(json.dumps(out))


def scale_main(args):
    import subprocess
    import sys

    sizes = [int(x) for x in args.sizes.split(",")]
    formats = args.formats.split(",")
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench_search_scale_"))
    rows = []
    try:
        for fmt in formats:
            for n in sizes:
                t0 = time.perf_counter()
                store, texts, Q = scale_store(work, fmt, n, d=args.dim, noise=args.noise)
                made = time.perf_counter() - t0
                np.save(work / "q.npy", Q)
                res = {}
                for step in ("exact", "build", "index"):
                    spec = json.dumps({"store": store, "texts": texts, "step": step,
                                       "queries": str(work / "q.npy")})
                    t0 = time.perf_counter()
                    run = subprocess.run([sys.executable, __file__, "--scale-worker", spec],
                                         capture_output=True, text=True, check=True)
                    res[step] = json.loads(run.stdout.strip().splitlines()[-1])
                    res[step]["wall"] = time.perf_counter() - t0
                exact, index = res["exact"]["ids"], res["index"]["ids"]
                recall = float(np.mean([len(set(a) & set(b)) / 100
                                        for a, b in zip(exact, index)]))
                rows.append((fmt, n, made, res, recall))
                print(f"{fmt} {n}: made in {made:.0f} s; " + "; ".join(
                    f"{k}: " + ", ".join(f"{a}={b:.3g}" for a, b in v.items()
                                         if isinstance(b, float)) for k, v in res.items()) +
                    f"; recall@100 {recall:.3f}", flush=True)
                for p in work.iterdir():
                    if p.name != "q.npy":
                        shutil.rmtree(p) if p.is_dir() else p.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.dim}-d clustered rows, noise {args.noise}, K = 100; load average at start "
          f"{load:.1f} on {os.cpu_count()} cores")
    print("format | rows | exact ms/q (batch 32, single, searcher) | exact peak GB | "
          "build s | build peak GB | index ms/q (batch 32, single, searcher) | "
          "index peak GB | recall@100 (peak GB: the process's, after imports "
          f"{rows[0][3]['exact']['base_gb']:.2f} GB)" if rows else "")
    for fmt, n, _, r, recall in rows:
        e, b, i = r["exact"], r["build"], r["index"]
        print(f"{fmt} | {n:,} | {e['batched_ms']:.1f}, {e['single_ms']:.0f}, "
              f"{e['searcher_ms']:.1f} | {e['peak_gb']:.2f} | {b['seconds']:.1f} | "
              f"{b['peak_gb']:.2f} | {i['batched_ms']:.1f}, {i['single_ms']:.1f}, "
              f"{i['searcher_ms']:.1f} | {i['peak_gb']:.2f} | {recall:.3f}")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--serve", type=int, default=1000, help="queries served one at a time")
    p.add_argument("--candidates", default="50,100,200")
    p.add_argument("--quick", action="store_true", help="200 queries served, K = 50 only")
    p.add_argument("--scale", action="store_true", help="exact scan against the index on "
                   "synthetic stores of --sizes rows")
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--formats", default="parquet,npy")
    p.add_argument("--dim", type=int, default=384, help="width of the synthetic rows")
    p.add_argument("--noise", type=float, default=1.0, help="the rows' spread around their "
                   "centres (1.5: clusters that overlap more, a harder recall)")
    p.add_argument("--scale-worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.scale_worker:
        return scale_worker(args.scale_worker)
    if args.scale:
        return scale_main(args)
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
