"""The store protocol: what every backend's reader and shadow writer provide.

A backend module (``npy``, ``parquet``, ``lance``, ``faiss``, ``pgvector``, ``chroma``,
``qdrant``) defines a reader and a writer subclassing these two classes; the pipeline
(:mod:`skalign._stores.pipeline.translate`) only ever calls the methods below and reads the
capabilities as class attributes, never probes with ``getattr``. No backend imports the pipeline.

A translation's life on the writer: :meth:`StoreWriter.lock` (one writer per output),
:meth:`~StoreWriter.begin` (resume a leftover shadow of the same job, or remove it and start
afresh; returns the rows already committed), :meth:`~StoreWriter.write_unit` per batch (given
what :meth:`~StoreWriter.encode_unit` made of the batch where ``encodes`` is true),
:meth:`~StoreWriter.finish` (the row count), :meth:`~StoreWriter.fetch` (rows read back for the
verification), :meth:`~StoreWriter.publish` (the shadow renamed into place with its stamp, an
existing output kept as the backup) and :meth:`~StoreWriter.end_publish` (the publish's record
removed) — or :meth:`~StoreWriter.discard` (the shadow removed) — and
:meth:`~StoreWriter.close`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

__all__ = ["ENCODE_DEPTH", "StoreReader", "StoreWriter"]

#: Batches a writer with an ``encode_unit`` (Parquet: the single file's units, the folder's
#: unsharded parts) encodes at once, each in a thread of its own, while the next batch is
#: translated: pyarrow's encoder is single-threaded and was the translation's critical path
#: (24.5 of 29.7 s at 10⁶ rows, one batch at a time)
ENCODE_DEPTH = 2


class StoreReader(ABC):
    """Reads the vectors of a store, batch by batch, with every other field of each row.

    Attributes
    ----------
    kind : str
        The registry's name of the backend.
    n_rows, dim : int
        The store's size.
    dtype : numpy.dtype
        The stored vectors' type.
    column : str or None
        The vector column (tables) or named vector (Qdrant); ``None`` where there is one.
    schema : pyarrow.Schema or None
        The Arrow schema of an Arrow table; ``None`` elsewhere.
    has_rows : bool
        Whether a batch carries other fields of each row (:meth:`row` gives them) that the
        verification compares with the output's.
    ids_origin : str or None
        What names the rows where the store has ids of its own (``"chroma ids"``, ``"IDMap
        ids"``: messages show it); ``None``: its rows are in row order.
    """

    kind = None
    column = None
    schema = None
    has_rows = False
    ids_origin = None

    @abstractmethod
    def batches(self, batch_size, start=0):
        """Yield ``(vectors, rows, shard)`` from row ``start`` on: the vectors as an ``(n, dim)``
        array, the engine's rows they came from (``None`` where there are none) and the shard's
        path relative to a sharded input folder (else ``None``)."""

    def row(self, rows, k):
        """The fields (but the vector) of the ``k``-th row of a batch's ``rows``."""
        return None

    @abstractmethod
    def take(self, positions, batch_size):
        """``(vectors, rows)`` at the sorted row ``positions``: for the verification."""

    @abstractmethod
    def read_all(self):
        """All vectors as one array."""

    def batch_ids(self, rows, n):
        """The store's own ids of a batch's ``n`` rows (``rows``: as :meth:`batches` gave
        them), where it has ids (:attr:`ids_origin`)."""
        raise NotImplementedError

    def read_with_ids(self, batch_size=8192):
        """``(vectors, ids)``: all vectors, and the store's own ids of their rows (``None``
        where it has none: :attr:`ids_origin`), read together batch by batch."""
        if self.ids_origin is None:
            return self.read_all(), None
        vectors, ids = [], []
        for v, rows, _ in self.batches(batch_size):
            vectors.append(v)
            ids.extend(self.batch_ids(rows, len(v)))
        return np.concatenate(vectors), ids


class StoreWriter(ABC):
    """Writes a translation in the shadow and publishes it; see the module's docstring.

    Capabilities (class attributes)
    -------------------------------
    pipelined : bool
        Writes release the GIL, so a batch is written in a thread while the next one is
        translated; ``False``: written inline.
    encodes : bool
        :meth:`encode_unit` turns a batch into bytes with no side effect, in threads of their
        own, ``encode_depth`` batches at once.
    encode_depth : int
        See ``encodes``.
    busy_threads : int or None
        Threads that keep a core busy beside the translation while a batch is written
        (``None``: one where batches are written behind, none where they are written inline).
    normalizes : bool
        The engine stores unit vectors (cosine engines): the verification compares directions.
    """

    pipelined = False
    encodes = False
    encode_depth = ENCODE_DEPTH
    busy_threads = None
    normalizes = False
    #: why a crashed run's shadow of this same job was not resumed (``None``: it was, or there
    #: was none)
    restarted = None
    #: set by :meth:`publish` once its record is written: from then on an error leaves the
    #: shadow to the rerun that finishes the publish, never discards it
    publishing = False

    @abstractmethod
    def lock(self):
        """A context manager: the exclusive right to write this output."""

    @abstractmethod
    def exists(self):
        """Whether the output already exists."""

    @abstractmethod
    def begin(self, fp):
        """Open the shadow of the job with fingerprint ``fp``; return the rows committed."""

    def encode_unit(self, out, rows, shard, start):
        """Bytes of one batch (where ``encodes``), made with no side effect."""
        raise NotImplementedError

    @abstractmethod
    def write_unit(self, out, rows, shard, start):
        """Write one batch of translated vectors ``out`` (or its encoding)."""

    @abstractmethod
    def finish(self):
        """Close the shadow; return its row count."""

    @abstractmethod
    def fetch(self, positions, rows=None):
        """``(vectors, rows)`` of the shadow at ``positions`` (``rows``: the source's)."""

    @abstractmethod
    def publish(self, replace, stamp=None):
        """Rename the shadow into place with ``stamp`` as its provenance, recorded first (with
        the shadow where the engine allows: the rename carries it) and marked as a publish
        under way (:data:`~skalign._stores.journal.PUBLISHING`, or the journal's phase) until
        :meth:`end_publish`; return the backup's address (``None``: none)."""

    def end_publish(self, stamp):
        """The publish's last step: the record that it is under way removed (``stamp``, as
        given to :meth:`publish`: what the output's stamp becomes)."""

    @abstractmethod
    def discard(self):
        """Remove the shadow and its journal."""

    def close(self):
        """Close what the writer holds open (files, connections)."""

    def release(self):
        """Let go of a client held for :meth:`exists` alone."""
