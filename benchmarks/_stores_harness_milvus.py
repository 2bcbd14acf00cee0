"""Milvus Lite for ``bench_stores.py``: made, read and bulk loaded with pymilvus (no skalign
code), as the other engines in ``_stores_harness.py`` (a module of its own: that one is long).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


class Milvus:
    """A Milvus Lite database ``root/milvus.db`` (one per process: released by
    :func:`close_clients`): keys ``3i + 1`` (odd rows in the partition ``odd``), ``doc``, the
    dynamic ``k``, the vector ``emb`` (HNSW, cosine) and a second vector ``title``. Its own bulk
    load: a new collection of the same schema, index and partitions, ``insert`` in batches of
    8,192 (pymilvus's ``bulk_insert`` needs a server and object storage)."""

    name = "milvus"

    def digest(self, address):
        from _stores_harness import _read_digest

        return _read_digest(self, address)

    @staticmethod
    def _client(root):
        from pymilvus import MilvusClient

        return MilvusClient(str(Path(root) / "milvus.db"))

    @staticmethod
    def _parts(address):
        folder, name = address[len("milvus:"):].split("?")[0].rsplit("/", 1)
        return Path(folder).parent, name

    def _load(self, root, name, ids, V, step=4096):
        from pymilvus import DataType, MilvusClient

        c = self._client(root)
        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        for field, kind, kw in (("id", DataType.INT64, {"is_primary": True}),
                                ("doc", DataType.VARCHAR, {"max_length": 256}),
                                ("emb", DataType.FLOAT_VECTOR, {"dim": V.shape[1]}),
                                ("title", DataType.FLOAT_VECTOR, {"dim": 2})):
            s.add_field(field, kind, **kw)
        index = c.prepare_index_params()
        index.add_index("emb", index_type="HNSW", metric_type="COSINE")
        index.add_index("title", index_type="FLAT", metric_type="L2")
        c.create_collection(name, schema=s, index_params=index)
        c.create_partition(name, "odd")
        # row i odd (its key 3i + 1 even) in the partition "odd"
        for part, rows in (("_default", ids % 2 == 1), ("odd", ids % 2 == 0)):
            for lo in range(0, int(rows.sum()), step):
                sel = np.flatnonzero(rows)[lo:lo + step]
                c.insert(name, [{"id": int(i), "doc": f"document {i}", "emb": v.tolist(),
                                 "title": [1.0, float(i)], "k": int(i)}
                                for i, v in zip(ids[sel], V[sel])], partition_name=part)

    def make(self, root, X):
        self._load(root, "src", np.arange(len(X)) * 3 + 1, X)
        return self.output(root, "src")

    def output(self, root, name="out"):
        return f"milvus:{Path(root) / 'milvus.db'}/{name}?vector=emb"

    def read(self, address):
        root, name = self._parts(address)
        c, rows = self._client(root), []
        c.load_collection(name)
        for part in c.list_partitions(name):
            last = -1
            while page := c.query(name, filter=f"id > {last}", output_fields=["*"],
                                  limit=16384, partition_names=[part]):
                rows += [(part, e) for e in page]
                last = max(e["id"] for e in page)
        rows.sort(key=lambda r: r[1]["id"])
        return (np.array([e["id"] for _, e in rows]),
                np.asarray([e["emb"] for _, e in rows], np.float32),
                [(p, e["doc"], e.get("k"), e["title"]) for p, e in rows])

    def inventory(self, root):
        c = self._client(root)
        return sorted(c.list_collections()) + sorted(
            f"alias {a}" for a in c.list_aliases().get("aliases", []))

    def drop(self, root, address):
        """Drop an output's alias and the collection it points to."""
        c = self._client(root)
        name = self._parts(address)[1]
        if name in c.list_aliases().get("aliases", []):
            target = c.describe_alias(name)["collection_name"]
            c.drop_alias(name)
            c.drop_collection(target)

    def bulk_load(self, root, ids, V):
        self._load(root, "bulk", np.asarray(ids), V, step=8192)

    def drop_bulk(self, root):
        self._client(root).drop_collection("bulk")

    @staticmethod
    def release():
        """Stop this process's Milvus Lite servers (their databases' locks released)."""
        manager = sys.modules.get("milvus_lite.server_manager")
        if manager is not None:
            manager.server_manager_instance.release_all()
