"""Live Parquet stores (a file or a folder of shards): ids from an id column (``id`` by default,
else row numbers), texts from a text column, exact ranking (the vectors held in memory up to
:data:`CACHE_BYTES`, else read window by window), encoded rows in the overlay
(:mod:`skalign._stores.files.overlay`)."""

from __future__ import annotations

import numpy as np

from ..files.arrow import import_pyarrow
from ..files.arrow_live import id_index, text_column
from ..files.live import WINDOW_ROWS, FileLiveStore, check_metric, files_state
from .store import ParquetReader

__all__ = ["CACHE_BYTES", "ParquetLive"]

#: a store whose vectors take at most this many bytes (float32) is read into memory once
CACHE_BYTES = 256 << 20


class ParquetLive(FileLiveStore):
    """A Parquet file or folder of shards searched live.

    Parameters
    ----------
    address : Address
    column : str, default=None
        The vector column (default: the only list-of-floats column, or vector/embedding).
    text_field : str, default=None
        The column holding each row's text.
    id_field : str, default=None
        The id column (default ``"id"`` where there is one, else row numbers).
    metric : {"cosine", "ip", "l2"}, default="cosine"
        The similarity the search ranks by.
    """

    kind = "parquet"

    def __init__(self, address, *, column=None, text_field=None, id_field=None,
                 metric="cosine"):
        self.address, self.path, self.kind = address, address.path, address.kind
        self._pa, _ = import_pyarrow(self.path)
        self._reader = r = ParquetReader(address, column)
        self.n_rows, self.dim = int(r.n_rows), int(r.dim)
        self.metric = check_metric(metric, self.path)
        self._columns = {}
        self._ids, self.id_field = id_index(r.schema, id_field, self.n_rows, self._column,
                                            self.path)
        self.text_field = text_field
        if text_field is not None:
            text_column(self._pa, r.schema, text_field, self.path)
        self._vectors = None
        if 4 * self.n_rows * self.dim <= CACHE_BYTES:
            self._vectors = np.ascontiguousarray(r.read_all(), dtype=np.float32)
        self._open_overlay({"rows": self.n_rows, "dim": self.dim,
                            "files": files_state(self.path)})

    def _column(self, name):
        """A whole column (but the vectors), read once."""
        if name not in self._columns:
            parts = [f.read(columns=[name]).column(0) for f in self._reader._files]
            self._columns[name] = self._pa.chunked_array(
                [c for p in parts for c in p.chunks], type=self._reader.schema.field(name).type)
        return self._columns[name]

    def _windows(self):
        if self._vectors is not None:
            for lo in range(0, self.n_rows, WINDOW_ROWS):
                yield lo, self._vectors[lo:lo + WINDOW_ROWS]
            return
        start = 0
        for vectors, _, _ in self._reader.batches(WINDOW_ROWS):
            yield start, vectors
            start += len(vectors)

    def _rows(self, positions, text_field):
        if self._vectors is not None:
            vectors = self._vectors[positions]
        else:
            order = np.argsort(positions)
            vectors = np.empty((len(positions), self.dim), np.float32)
            vectors[order] = np.asarray(self._reader.take(positions[order], len(positions))[0])
        return vectors, self._row_texts(positions, text_field)

    def _row_texts(self, positions, text_field):
        if text_field is None:
            return None
        if text_field != self.text_field:
            text_column(self._pa, self._reader.schema, text_field, self.path)
        return self._column(text_field).take(self._pa.array(positions)).to_pylist()
