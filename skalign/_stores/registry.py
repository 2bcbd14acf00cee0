"""The registry of store backends: an address's kind → its reader and writer classes and what
to install for them (as fsspec's ``known_implementations``). Backends are imported only when an
address of theirs is used; a missing client library raises
:class:`~skalign.exceptions.MissingDependencyError` naming the extra."""

from __future__ import annotations

import importlib

from ..exceptions import AddressError, MissingDependencyError

__all__ = ["BACKENDS", "backend_module", "import_engine", "live_class", "reader_class",
           "recovery_function", "writer_class"]

#: kind -> module of skalign._stores, reader and writer classes, the live store (``MODULE.CLASS``
#: of skalign._stores, :class:`~skalign._stores.live.LiveStore`), the client module it needs,
#: the extra that installs it and, for databases, the function that finishes a publish a killed
#: run left (``MODULE.FUNCTION``; file stores share
#: :func:`skalign._stores.files.shadow.recover_publish`)
BACKENDS = {
    "npy": {"module": "npy", "reader": "NpyReader", "writer": "NpyShadow",
            "live": "npy.NpyLive", "needs": None, "extra": None},
    "parquet": {"module": "parquet.store", "reader": "ParquetReader", "writer": "ParquetFileWriter",
                "live": "parquet.live.ParquetLive", "needs": "pyarrow", "extra": "stores"},
    "parquet-dir": {"module": "parquet.store", "reader": "ParquetReader",
                    "writer": "ParquetFolderWriter", "live": "parquet.live.ParquetLive",
                    "needs": "pyarrow", "extra": "stores"},
    "lance": {"module": "lance", "reader": "LanceReader", "writer": "LanceWriter",
              "live": "lance.LanceLive", "needs": "lancedb", "extra": "stores"},
    "faiss": {"module": "faiss", "reader": "Reader", "writer": "Writer",
              "live": "faiss.FaissLive", "needs": "faiss", "extra": "faiss"},
    "pgvector": {"module": "pgvector.store", "reader": "Reader", "writer": "Writer",
                 "live": "pgvector.live.PgvectorLive", "needs": "psycopg", "extra": "pgvector",
                 "recovery": "pgvector.recovery.recover_publish"},
    "chroma": {"module": "chroma.store", "reader": "Reader", "writer": "Writer",
               "live": "chroma.live.ChromaLive", "needs": "chromadb", "extra": "chroma",
               "recovery": "chroma.recovery.recover_publish"},
    "qdrant": {"module": "qdrant.store", "reader": "Reader", "writer": "Writer",
               "live": "qdrant.live.QdrantLive", "needs": "qdrant_client", "extra": "qdrant",
               "recovery": "qdrant.recovery.recover_publish"},
}


def import_engine(kind, where):
    """Import the client library of ``kind``; a missing one names the extra to install."""
    entry = BACKENDS[kind]
    if entry["needs"] is None:
        return None
    try:
        return importlib.import_module(entry["needs"])
    except ImportError:
        raise MissingDependencyError(
            f"{where}: {kind} stores need the {entry['needs']} package; "
            f"pip install 'skalign[{entry['extra']}]'.") from None


def backend_module(address):
    """The backend module of ``address`` (its client library imported first)."""
    import_engine(address.kind, address)
    return importlib.import_module(f".{BACKENDS[address.kind]['module']}", __package__)


def reader_class(address):
    return getattr(backend_module(address), BACKENDS[address.kind]["reader"])


def writer_class(address):
    return getattr(backend_module(address), BACKENDS[address.kind]["writer"])


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
    module, name = live.rsplit(".", 1)
    return getattr(importlib.import_module(f".{module}", __package__), name)


def recovery_function(address):
    """``recover_publish`` of ``address``'s backend: the file stores' shared one, or the
    database's own (its client library imported first)."""
    entry = BACKENDS[address.kind]
    if "recovery" not in entry:
        from .files.shadow import recover_publish

        return recover_publish
    import_engine(address.kind, address)
    module, _, name = entry["recovery"].rpartition(".")
    return getattr(importlib.import_module(f".{module}", __package__), name)
