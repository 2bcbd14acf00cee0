"""DuckDB (with the vss extension) for ``bench_stores.py``: made, read and bulk loaded with
duckdb itself (no skalign code), as the other engines in ``_stores_harness.py`` (a module of its
own: that one is long).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _vss_file():
    """The vss extension's file in its wheel, for the installed DuckDB (nothing downloaded)."""
    import duckdb
    import duckdb_extension_vss

    for folder in duckdb_extension_vss.__path__:
        path = Path(folder) / "extensions" / f"v{duckdb.__version__}" / "vss.duckdb_extension"
        if path.is_file():
            return path
    raise RuntimeError(f"no vss extension for DuckDB {duckdb.__version__} in "
                       "duckdb-extension-vss; install matching versions")


def _literal(text):
    return "'" + str(text).replace("'", "''") + "'"


class DuckDB:
    """A table of the DuckDB file ``root/duck.duckdb``: ids ``3i + 1`` (the primary key),
    ``doc``, a JSON ``meta`` and ``emb FLOAT[d]`` under an HNSW index (cosine). Its own bulk
    load: the rows as one Arrow table in one ``INSERT`` into a new file, then the HNSW index
    built and the file checkpointed (what the translation does before it publishes)."""

    name = "duckdb"

    @staticmethod
    def _conn(path):
        """A connection with vss loaded before the file is attached (DuckDB's advice for HNSW
        indexes in a file) and its experimental persistence on."""
        import duckdb

        conn = duckdb.connect(":memory:", config={"autoload_known_extensions": False})
        conn.execute(f"LOAD {_literal(_vss_file())}")
        conn.execute("SET GLOBAL hnsw_enable_experimental_persistence = true")
        conn.execute(f"ATTACH {_literal(path)} AS d")
        conn.execute("USE d")
        return conn

    @staticmethod
    def _parts(address):
        from urllib.parse import parse_qs

        path, _, query = address[len("duckdb:"):].partition("?")
        return path, parse_qs(query)["table"][0]

    @staticmethod
    def _quoted(name):
        return '"' + name.replace('"', '""') + '"'

    def _load(self, path, table, ids, V):
        import pyarrow as pa

        conn = self._conn(path)
        t = self._quoted(table)
        conn.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, doc VARCHAR, meta JSON, "
                     f"emb FLOAT[{V.shape[1]}])")
        rows = pa.table({"id": np.asarray(ids, np.int64),
                         "doc": [f"document {i}" for i in ids],
                         "meta": [f'{{"k": {int(i)}}}' for i in ids],
                         "emb": pa.FixedSizeListArray.from_arrays(
                             pa.array(np.asarray(V, np.float32).reshape(-1)), V.shape[1])})
        conn.register("rows", rows)
        conn.execute(f"INSERT INTO {t} SELECT * FROM rows")
        conn.unregister("rows")
        conn.execute(f"CREATE INDEX {self._quoted(table + '_hnsw')} ON {t} USING HNSW (emb) "
                     "WITH (metric = 'cosine')")
        conn.execute("CHECKPOINT")
        conn.close()

    def make(self, root, X):
        self._load(Path(root) / "duck.duckdb", "src", np.arange(len(X)) * 3 + 1, X)
        return self.output(root, "src")

    def output(self, root, name="out"):
        return f"duckdb:{Path(root) / 'duck.duckdb'}?table={name}"

    def _batches(self, address, size=65536):
        path, table = self._parts(address)
        conn = self._conn(path)
        try:
            reader = conn.execute(f"SELECT id, doc, meta, emb FROM {self._quoted(table)} "
                                  "ORDER BY id").to_arrow_reader(size)
            for rb in reader:
                V = np.asarray(rb.column(3).flatten()).reshape(rb.num_rows, -1)
                yield (np.asarray(rb.column(0)), V,
                       list(zip(rb.column(1).to_pylist(), rb.column(2).to_pylist())))
        finally:
            conn.close()

    def read(self, address):
        parts = list(self._batches(address))
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                [f for p in parts for f in p[2]])

    def digest(self, address):
        from _stores_harness import Digest

        d = Digest()
        for ids, V, fields in self._batches(address):
            d.update(ids, V, [fields])
        return d.hexdigest()

    def inventory(self, root):
        """The file's tables, and files beside it (a write-ahead log a crash left)."""
        path = Path(root) / "duck.duckdb"
        files = sorted(p.name for p in Path(root).glob("duck.duckdb?*"))
        if not path.exists():
            return files
        conn = self._conn(path)
        names = sorted(r[0] for r in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'd'").fetchall())
        conn.close()
        return names + files

    def bulk_load(self, root, ids, V):
        self._load(Path(root) / "bulk.duckdb", "bulk", ids, V)

    def drop(self, root, address):
        path, table = self._parts(address)
        conn = self._conn(path)
        conn.execute(f"DROP TABLE IF EXISTS {self._quoted(table)}")
        conn.close()

    def drop_bulk(self, root):
        for p in Path(root).glob("bulk.duckdb*"):
            os.unlink(p)
