"""The registry of store backends: an address's kind → its reader and writer classes and what
to install for them (as fsspec's ``known_implementations``). Backends are imported only when an
address of theirs is used; a missing client library raises
:class:`~skalign.exceptions.MissingDependencyError` naming the extra."""

from __future__ import annotations

import importlib

from ..exceptions import MissingDependencyError

__all__ = ["BACKENDS", "backend_module", "import_engine", "reader_class", "writer_class"]

#: kind -> module of skalign._stores, reader and writer classes, the client module it needs and
#: the extra that installs it
BACKENDS = {
    "npy": {"module": "npy", "reader": "NpyReader", "writer": "NpyShadow",
            "needs": None, "extra": None},
    "parquet": {"module": "parquet", "reader": "ParquetReader", "writer": "ParquetFileWriter",
                "needs": "pyarrow", "extra": "stores"},
    "parquet-dir": {"module": "parquet", "reader": "ParquetReader",
                    "writer": "ParquetFolderWriter", "needs": "pyarrow", "extra": "stores"},
    "lance": {"module": "lance", "reader": "LanceReader", "writer": "LanceWriter",
              "needs": "lancedb", "extra": "stores"},
    "faiss": {"module": "faiss", "reader": "Reader", "writer": "Writer",
              "needs": "faiss", "extra": "faiss"},
    "pgvector": {"module": "pgvector", "reader": "Reader", "writer": "Writer",
                 "needs": "psycopg", "extra": "pgvector"},
    "chroma": {"module": "chroma", "reader": "Reader", "writer": "Writer",
               "needs": "chromadb", "extra": "chroma"},
    "qdrant": {"module": "qdrant", "reader": "Reader", "writer": "Writer",
               "needs": "qdrant_client", "extra": "qdrant"},
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
