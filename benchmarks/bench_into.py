"""A new vector field in the same store (``--into FIELD``) against a second store: time and bytes.

``python benchmarks/bench_into.py [--rows 20000] [--engines parquet,lance,pgvector]
[--workdir DIR]``

For each engine, a store of ``rows`` rows (an ``id``, a 600-character ``text``, a 384-d float32
``vector``) is translated by a 384 → 768 Procrustes map twice, each in its own copy of the
store: by ``skalign.io.translate`` into a second store (the shadow, verified and published), and
by ``skalign.io.translate(..., into="new")`` into a new field of the store itself. The table
gives each one's wall time, rows per second, and the bytes it added: the second store's whole
size, or what the store grew by (Parquet: the file and what lies beside it; LanceDB: the
table's current version, its earlier versions kept until ``optimize``; PostgreSQL: the table
and its indexes after ``VACUUM FULL``), beside the bytes of the new vectors themselves
(``rows × 768 × 4``). Nothing it prints is committed; the machine's load changes the times.
"""

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def _table(rows, rng):
    import pyarrow as pa

    texts = [rng.bytes(300).hex() for _ in range(rows)]  # a payload no codec shrinks
    V = rng.normal(size=(rows, 384)).astype(np.float32)
    return pa.table({"id": pa.array(np.arange(rows), pa.int64()), "text": texts,
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)), 384)})


def _disk(path):
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Parquet:
    name = "parquet"

    def make(self, root, table):
        import pyarrow.parquet as pq

        pq.write_table(table, root / "docs.parquet")
        return str(root / "docs.parquet")

    def output(self, root):
        return str(root / "out.parquet")

    def size(self, root, address):
        return sum(_disk(p) for p in root.glob(Path(address).name + "*"))


class Lance:
    name = "lance"

    def make(self, root, table):
        import lancedb

        lancedb.connect(root / "db").create_table("docs", table)
        return str(root / "db" / "docs.lance")

    def output(self, root):
        return str(root / "db" / "out.lance")

    def size(self, root, address):
        import lancedb

        name = Path(address).name[:-len(".lance")]
        t = lancedb.connect(root / "db").open_table(name)
        beside = sum(_disk(p) for p in (root / "db").glob(f"{name}.lance?*"))
        return t.stats()["total_bytes"] + beside


class PgVector:
    name = "pgvector"

    def __init__(self, base):
        self.base = base

    def make(self, root, table):
        import psycopg
        from pgvector.psycopg import register_vector

        name = f"docs_{root.name.replace('-', '_')}"
        with psycopg.connect(self.base, autocommit=True) as conn:
            register_vector(conn)
            conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, text text, "
                         "vector vector(384))")
            ids, texts = table.column("id").to_pylist(), table.column("text").to_pylist()
            V = np.asarray(table.column("vector").combine_chunks().flatten(),
                           np.float32).reshape(-1, 384)
            with conn.cursor() as cur, cur.copy(f"COPY {name} FROM STDIN") as copy:
                for row in zip(ids, texts, V):
                    copy.write_row(row)
            conn.execute(f"VACUUM FULL {name}")
        return f"{self.base}&table={name}&column=vector"

    def output(self, root):
        return f"{self.base}&table=out_{root.name.replace('-', '_')}"

    def size(self, root, address):
        import psycopg

        name = address.split("table=")[1].split("&")[0]
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f"VACUUM FULL {name}")
            return conn.execute(f"SELECT pg_total_relation_size('{name}')").fetchone()[0]


def run(engine, workdir, table, model):
    from skalign.io import translate

    out = {}
    for how in ("second store", "--into new"):
        root = Path(tempfile.mkdtemp(prefix=f"{engine.name}-", dir=workdir))
        address = engine.make(root, table)
        before = engine.size(root, address)
        t0 = time.perf_counter()
        if how == "second store":
            n = translate(model, address, engine.output(root))
            added = engine.size(root, engine.output(root))
        else:
            n = translate(model, address, into="new")
            added = engine.size(root, address) - before
        out[how] = (time.perf_counter() - t0, int(n), added)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--engines", default="parquet,lance,pgvector")
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    from skalign import ProcrustesAligner

    rng = np.random.default_rng(0)
    model = ProcrustesAligner().fit(rng.normal(size=(2000, 384)).astype(np.float32),
                                    rng.normal(size=(2000, 768)).astype(np.float32))
    table = _table(args.rows, rng)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_into-"))
    server, engines = None, []
    for name in args.engines.split(","):
        if name == "pgvector":
            import pgserver

            server = pgserver.get_server(workdir / "pg", cleanup_mode="stop")
            server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
            engines.append(PgVector(f"postgresql://postgres@/postgres?host={workdir / 'pg'}"))
        else:
            engines.append({"parquet": Parquet, "lance": Lance}[name]())
    vectors = args.rows * 768 * 4
    print(f"{args.rows:,} rows, 384-d -> 768-d; the new vectors are {vectors / 1e6:.1f} MB")
    print(f"{'engine':10} {'how':14} {'s':>7} {'rows/s':>9} {'MB added':>9} {'x vectors':>9}")
    rows = []
    try:
        for engine in engines:
            for how, (secs, n, added) in run(engine, workdir, table, model).items():
                rows.append((engine.name, how, secs, n / secs, added / 1e6, added / vectors))
                print(f"{engine.name:10} {how:14} {secs:7.2f} {n / secs:9,.0f} "
                      f"{added / 1e6:9.1f} {added / vectors:9.2f}")
    finally:
        if server is not None:
            server.cleanup()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
