"""The registry of store engines: an address's kind → its engine, reader, writer and live store
and what to install for them (as fsspec's ``known_implementations``). Engines are imported only
when an address of theirs is used, their client library only when a store is opened; a missing
one raises :class:`~skalign.exceptions.MissingDependencyError` naming the extra.

What the shared code asks of a kind it asks of its :class:`~skalign._stores.engine.Engine`
(:func:`engine`), never of the kind's name."""

from __future__ import annotations

import importlib
from functools import lru_cache

from ..exceptions import AddressError

__all__ = ["BACKENDS", "backend_module", "engine", "import_engine", "live_class",
           "reader_class", "recovery_function", "writer_class"]

#: kind -> its engine (``MODULE.CLASS`` of skalign._stores, an
#: :class:`~skalign._stores.engine.Engine`), the module of its reader and writer classes, the
#: live store (``MODULE.CLASS``, a :class:`~skalign._stores.live.LiveStore`), the client module it
#: needs and the extra that installs it
BACKENDS = {
    "npy": {"engine": "npy.NpyEngine", "module": "npy", "reader": "NpyReader",
            "writer": "NpyShadow", "live": "npy.NpyLive", "needs": None, "extra": None},
    "parquet": {"engine": "parquet.ParquetFileEngine", "module": "parquet.store",
                "reader": "ParquetReader", "writer": "ParquetFileWriter",
                "live": "parquet.live.ParquetLive", "needs": "pyarrow", "extra": "stores"},
    "parquet-dir": {"engine": "parquet.ParquetFolderEngine", "module": "parquet.store",
                    "reader": "ParquetReader", "writer": "ParquetFolderWriter",
                    "live": "parquet.live.ParquetLive", "needs": "pyarrow", "extra": "stores"},
    "lance": {"engine": "lance.LanceEngine", "module": "lance", "reader": "LanceReader",
              "writer": "LanceWriter", "live": "lance.LanceLive", "needs": "lancedb",
              "extra": "stores"},
    "faiss": {"engine": "faiss.FaissEngine", "module": "faiss", "reader": "Reader",
              "writer": "Writer", "live": "faiss.FaissLive", "needs": "faiss", "extra": "faiss"},
    "pgvector": {"engine": "pgvector.PgvectorEngine", "module": "pgvector.store",
                 "reader": "Reader", "writer": "Writer", "live": "pgvector.live.PgvectorLive",
                 "needs": "psycopg", "extra": "pgvector"},
    "chroma": {"engine": "chroma.ChromaEngine", "module": "chroma.store", "reader": "Reader",
               "writer": "Writer", "live": "chroma.live.ChromaLive", "needs": "chromadb",
               "extra": "chroma"},
    "qdrant": {"engine": "qdrant.QdrantEngine", "module": "qdrant.store", "reader": "Reader",
               "writer": "Writer", "live": "qdrant.live.QdrantLive", "needs": "qdrant_client",
               "extra": "qdrant"},
    "sqlite-vec": {"engine": "sqlite_vec.SqliteVecEngine", "module": "sqlite_vec.store",
                   "reader": "Reader", "writer": "Writer",
                   "live": "sqlite_vec.live.SqliteVecLive", "needs": "apsw",
                   "extra": "sqlite"},
    "milvus": {"engine": "milvus.MilvusEngine", "module": "milvus.store", "reader": "Reader",
               "writer": "Writer", "live": "milvus.live.MilvusLive", "needs": "pymilvus",
               "extra": "milvus"},
    "duckdb": {"engine": "duckdb.DuckDBEngine", "module": "duckdb.store", "reader": "Reader",
               "writer": "Writer", "live": "duckdb.live.DuckDBLive", "needs": "duckdb",
               "extra": "duckdb"},
}


def _attribute(path):
    """``MODULE.NAME`` of skalign._stores, imported."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f".{module}", __package__), name)


@lru_cache(maxsize=None)
def _engine(kind):
    entry = BACKENDS[kind]
    return _attribute(entry["engine"])(kind, entry["needs"], entry["extra"])


def engine(kind):
    """The :class:`~skalign._stores.engine.Engine` of ``kind`` (a kind's name or an address);
    its client library is not imported."""
    return _engine(getattr(kind, "kind", kind))


def import_engine(kind, where):
    """Import the client library of ``kind``; a missing one names the extra to install."""
    return engine(kind).import_client(where)


def backend_module(address):
    """The engine of ``address``, its client library imported first (what
    :func:`~skalign._stores.pipeline.translate.restore_store` asks ``restore`` of)."""
    found = engine(address)
    found.import_client(address)
    return found


def _store_module(address):
    import_engine(address.kind, address)
    return importlib.import_module(f".{BACKENDS[address.kind]['module']}", __package__)


def reader_class(address):
    return getattr(_store_module(address), BACKENDS[address.kind]["reader"])


def writer_class(address):
    return getattr(_store_module(address), BACKENDS[address.kind]["writer"])


def live_class(kind):
    """The :class:`~skalign._stores.live.LiveStore` class of ``kind`` (a kind's name or an
    address), its client library imported first; a backend without one raises
    :class:`~skalign.exceptions.AddressError`."""
    kind = getattr(kind, "kind", kind)
    live = BACKENDS[kind].get("live")
    if live is None:
        raise AddressError(f"{kind} stores cannot be searched live yet; translate the store "
                           "instead (skalign translate).")
    import_engine(kind, kind)
    return _attribute(live)


def recovery_function(address):
    """``recover_publish(address, match)`` of ``address``'s engine: the file stores' shared
    one, or the database's own (its client library imported first)."""
    return engine(address).recover_publish
