"""``skalign info`` of a migrated database store by its size, on each engine that counts its
rows' provenance without reading their vectors (``LiveStore.count_marks``: DuckDB, sqlite-vec,
Qdrant's local mode, Chroma, Milvus Lite), against the row-by-row count (``count_marks``
answering ``None``: what ``info`` did before).

Each store is made with the engine's own client: ``n`` rows of ``--dim``-d vectors, texts
``t<i>``, and the provenance a migration leaves: a fifth of the rows encoded from their text,
a fifth encoded from an older text (stale), two fifths translated, a fifth without a mark
(skalign's write-back marks the rows it writes: the marks are written here with the engine's
client, as a migration's rows would hold them) and a migration stamp, in a process of its own.
``info`` runs in its own process, timed from its start and, inside it, from after the
imports. Prints one table: engine, rows, how, wall from the process' start, ``info`` itself,
and whether both ways printed the same counts.

Run: ``python benchmarks/bench_info.py --rows 100000 --csv benchmarks/results/bench_info.csv``
(``--rows 100000,1000000 --engines duckdb,sqlite-vec`` for the sizes that take minutes to make).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: run in a child process: ``info`` as it is, or row by row, timed after the imports
CHILD = """
import sys, time
t0 = time.perf_counter()
from skalign.cli import main
from skalign._stores.live import LiveStore
if sys.argv[2] == "rows":  # every engine's own count_marks too (sqlite-vec's, DuckDB's...)
    import importlib
    for engine in ("duckdb", "sqlite_vec", "qdrant", "chroma", "milvus"):
        importlib.import_module(f"skalign._stores.{engine}.live")
    todo = [LiveStore]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "count_marks" in vars(cls):
            cls.count_marks = lambda self, mine=None, empty=False: None
t1 = time.perf_counter()
rc = main(["info", sys.argv[1]])
print("INFO_SECONDS", time.perf_counter() - t1, t1 - t0, file=sys.stderr)
sys.exit(rc)
"""
ENGINES = ("duckdb", "sqlite-vec", "qdrant", "chroma", "milvus")
#: rows written per call of an engine's client
CHUNK = 8192


def marks_of(n):
    """Each row's text and provenance value (see the module docstring)."""
    from skalign._stores.live import encoded_mark, translated_mark

    texts = [f"t{i}" for i in range(n)]
    marks = []
    for i, t in enumerate(texts):
        kind = i % 5
        marks.append(encoded_mark("enc", None, t) if kind == 0 else
                     encoded_mark("enc", None, f"old {t}") if kind == 1 else
                     None if kind == 4 else translated_mark("map"))
    return texts, marks


def _chunks(n):
    for lo in range(0, n, CHUNK):
        yield lo, min(n, lo + CHUNK)


def _vectors(rng, lo, hi, dim):
    return rng.normal(size=(hi - lo, dim)).astype(np.float32)


def make_duckdb(root, n, dim, texts, marks):
    import duckdb
    import pyarrow as pa

    from skalign._stores.duckdb.store import PROVENANCE_COMMENT

    path = root / "s.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute(f"CREATE TABLE s (id BIGINT PRIMARY KEY, text VARCHAR, emb FLOAT[{dim}], "
                 "skalign_vector VARCHAR)")
    comment = PROVENANCE_COMMENT.replace("'", "''")
    conn.execute(f"COMMENT ON COLUMN s.skalign_vector IS '{comment}'")
    rng = np.random.default_rng(0)
    for lo, hi in _chunks(n):
        V = _vectors(rng, lo, hi, dim)
        part = pa.table({"id": np.arange(lo, hi), "text": texts[lo:hi],
                         "emb": pa.FixedSizeListArray.from_arrays(pa.array(V.ravel()), dim),
                         "skalign_vector": pa.array(marks[lo:hi], pa.string())})
        conn.register("part", part)
        conn.execute("INSERT INTO s SELECT * FROM part")
        conn.unregister("part")
    conn.close()
    return f"duckdb:{path}?table=s"


def make_sqlite(root, n, dim, texts, marks):
    import apsw
    import sqlite_vec

    from skalign._stores.sqlite_vec.tables import MARKS

    path = root / "vec.db"
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.execute(f"CREATE VIRTUAL TABLE s USING vec0(emb float[{dim}] distance_metric=cosine, "
                 "text text)")
    rng = np.random.default_rng(0)
    with conn:
        for lo, hi in _chunks(n):
            V = _vectors(rng, lo, hi, dim)
            conn.executemany("INSERT INTO s (rowid, emb, text) VALUES (?, ?, ?)",
                             ((i + 1, V[i - lo].tobytes(), texts[i]) for i in range(lo, hi)))
    conn.close()
    # the marks where skalign's write-back keeps them: its table beside the vec0 table
    from skalign._stores.address import parse_address
    from skalign._stores.sqlite_vec.tables import connect, token, writing

    address = f"sqlite:{path}?table=s"
    conn = connect(parse_address(address), own=True)
    with writing(conn):
        tid = token(conn, "s", create=True)
        conn.execute(f"CREATE TABLE IF NOT EXISTS {MARKS} (tid TEXT NOT NULL, key TEXT NOT "
                     "NULL, id NOT NULL, mark TEXT, PRIMARY KEY (tid, key, id)) WITHOUT ROWID")
        conn.executemany(f"INSERT INTO {MARKS} (tid, key, id, mark) VALUES (?, ?, ?, ?)",
                         ((tid, "skalign_vector", i + 1, m) for i, m in enumerate(marks)
                          if m is not None))
    conn.close()
    return address


def make_qdrant(root, n, dim, texts, marks):
    from qdrant_client import QdrantClient, models

    folder = root / "qdrant"
    # the local mode commits each point on its own (tens of ms where each commit reaches the
    # disk): made in memory-backed /dev/shm where there is one, then copied
    shm = Path("/dev/shm")
    made = Path(tempfile.mkdtemp(prefix="bench_info-", dir=shm if shm.is_dir() else root))
    c = QdrantClient(path=str(made / "qdrant"))
    c.create_collection("s", vectors_config=models.VectorParams(
        size=dim, distance=models.Distance.COSINE))
    rng = np.random.default_rng(0)
    for lo, hi in _chunks(n):
        V = _vectors(rng, lo, hi, dim)
        c.upsert("s", points=models.Batch(
            ids=list(range(lo, hi)), vectors=V.tolist(),
            payloads=[{"text": texts[i], **({"skalign_vector": marks[i]} if marks[i] else {})}
                      for i in range(lo, hi)]), wait=True)
    c.close()
    shutil.copytree(made / "qdrant", folder, ignore=shutil.ignore_patterns(".lock"))
    shutil.rmtree(made, ignore_errors=True)
    return f"qdrant:{folder}/s"


def make_chroma(root, n, dim, texts, marks):
    import chromadb

    c = chromadb.PersistentClient(path=str(root / "chroma"))
    col = c.create_collection("src", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    rng = np.random.default_rng(0)
    step = min(CHUNK, c.get_max_batch_size())
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        col.add(ids=[f"id{i:08d}" for i in range(lo, hi)], embeddings=_vectors(rng, lo, hi, dim),
                documents=texts[lo:hi],
                metadatas=[{"k": i, **({"skalign_vector": marks[i]} if marks[i] else {})}
                           for i in range(lo, hi)])
    return f"chroma:{root / 'chroma'}/src"


def make_milvus(root, n, dim, texts, marks):
    from pymilvus import DataType, MilvusClient

    path = root / "milvus.db"
    c = MilvusClient(str(path))
    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("text", DataType.VARCHAR, max_length=64)
    s.add_field("emb", DataType.FLOAT_VECTOR, dim=dim)
    index = c.prepare_index_params()
    index.add_index("emb", index_type="FLAT", metric_type="COSINE")
    c.create_collection("s", schema=s, index_params=index)
    rng = np.random.default_rng(0)
    for lo, hi in _chunks(n):
        V = _vectors(rng, lo, hi, dim)
        c.insert("s", [{"id": i, "text": texts[i], "emb": V[i - lo].tolist(),
                        **({"skalign_vector": marks[i]} if marks[i] else {})}
                       for i in range(lo, hi)])
    # the rows sealed in a segment, as a store's are once Milvus Lite has flushed them: left in
    # its write-ahead log, they are replayed into the memtable by the next open, and the first
    # reader's queries ran 6x slower (59 s against 9.6 s at 10^5)
    c.flush("s")
    c.close()
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(path))  # its files written before the pool ends
    return f"milvus:{path}/s"


MAKERS = {"duckdb": make_duckdb, "sqlite-vec": make_sqlite, "qdrant": make_qdrant,
          "chroma": make_chroma, "milvus": make_milvus}


def make(engine, root, n, dim):
    """The store of ``n`` rows of ``engine`` in ``root``, with a migration stamp: its
    address."""
    from skalign._stores.address import parse_address
    from skalign._stores.provenance import write_stamp

    texts, marks = marks_of(n)
    address = MAKERS[engine](root, n, dim, texts, marks)
    write_stamp(parse_address(address), {
        "skalign": "bench", "model": "m", "source": "s", "source_identity": "s",
        "written": "now", "rows": n, "d_in": dim, "d_out": dim,
        "migration": {"encoder": "enc", "map": "map", "method": "procrustes",
                      "estimate": None, "encoded_rows": n // 5, "rows": n}})
    return address


def run(address, how, env):
    """Wall seconds of ``info`` in a child process: from its start, and after its imports;
    its output."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, address, how], capture_output=True,
                          text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode or not done.stdout:
        raise SystemExit(f"info {how} of {address} failed:\n{done.stderr[-3000:]}")
    line = [x for x in done.stderr.splitlines() if x.startswith("INFO_SECONDS")][-1].split()
    return wall, float(line[1]), float(line[2]), done.stdout


def _counts_lines(out):
    return [x for x in out.splitlines() if "mean vector length" not in x]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--skip-rows-at", type=int, default=10**6,
                        help="no row-by-row run from this size on")
    parser.add_argument("--csv", help="write the figures (key,value) to this file")
    args = parser.parse_args(argv)
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    figures = [("load_avg_1min_start", round(os.getloadavg()[0], 1)), ("dim", args.dim)]
    workdir = Path(tempfile.mkdtemp(prefix="bench_info-"))
    env = {**os.environ, "TMPDIR": str(workdir)}
    print(f"{'engine':10} {'rows':>9} {'how':7} {'wall s':>7} {'info s':>7} {'start s':>7} "
          f"{'made s':>7} same")
    try:
        for n in map(int, args.rows.split(",")):
            for engine in args.engines.split(","):
                root = workdir / f"{engine}-{n}"
                root.mkdir()
                t0 = time.perf_counter()
                with ctx.Pool(1) as pool:  # each engine's client gone with the process
                    address = pool.apply(make, (engine, root, n, args.dim))
                made = time.perf_counter() - t0
                outs = {}
                for how in ("counted", "rows") if n < args.skip_rows_at else ("counted",):
                    wall, info, start, outs[how] = run(address, how, env)
                    same = "" if how == "counted" else \
                        _counts_lines(outs["rows"]) == _counts_lines(outs["counted"])
                    key = f"{engine.replace('-', '_')}_{how}_{n}"
                    figures += [(f"{key}_{k}", round(v, 2)) for k, v in
                                (("wall_s", wall), ("info_s", info), ("start_s", start))]
                    print(f"{engine:10} {n:9,} {how:7} {wall:7.2f} {info:7.2f} {start:7.2f} "
                          f"{made:7.0f} {same}", flush=True)
                    if how == "rows" and (not same or n <= 5000):
                        print(json.dumps({"counted": outs["counted"], "rows": outs["rows"]}))
                shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    figures.append(("load_avg_1min_end", round(os.getloadavg()[0], 1)))
    if args.csv:
        from _common import write_figures

        write_figures(args.csv, figures)


if __name__ == "__main__":
    main()
