"""Live Parquet stores (a file or a folder of shards): ids from an id column (``id`` by default,
else row numbers), texts from a text column (held whole up to :data:`TEXT_CACHE_BYTES`, else
read a row group at a time, the last :data:`TEXT_GROUPS` kept), exact ranking (the vectors held
in memory up to :data:`CACHE_BYTES`, else read window by window), encoded rows in the overlay
(:mod:`skalign._stores.files.overlay`)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ...exceptions import StoreError
from ..files.arrow import arrow_vectors, import_pyarrow
from ..files.arrow_live import id_index, text_column
from ..files.fields import column_state, open_column_field, owned, read_sidecar
from ..files.live import WINDOW_ROWS, FileLiveStore, check_metric, files_state
from ..live import field_key
from .store import TAKE_BATCH_ROWS, ParquetReader

__all__ = ["CACHE_BYTES", "TEXT_CACHE_BYTES", "TEXT_GROUPS", "ParquetLive", "field_state",
           "open_field", "open_owned"]

#: a store whose vectors take at most this many bytes (float32) is read into memory once
CACHE_BYTES = 256 << 20
#: a text column of at most this many bytes (uncompressed, as the files' metadata gives them)
#: is read whole once; a larger one a row group at a time: its texts held whole would grow
#: with the store (3 GB for 10^7 texts of 300 bytes)
TEXT_CACHE_BYTES = 64 << 20
#: row groups of a larger text column kept decoded (a scan in row order reads each once)
TEXT_GROUPS = 2


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

    def __new__(cls, address, *, column=None, **options):
        # a vector column skalign added (--into FIELD) is read with its own overlay
        if column is not None and cls is ParquetLive:
            store = open_owned(address, column, options)
            if store is not None:
                return store
        return super().__new__(cls)

    def __init__(self, address, *, column=None, text_field=None, id_field=None,
                 metric="cosine"):
        self.address, self.path, self.kind = address, address.path, address.kind
        self._pa, _ = import_pyarrow(self.path)
        self._reader = r = ParquetReader(address, column)
        self.n_rows, self.dim = int(r.n_rows), int(r.dim)
        self.metric = check_metric(metric, self.path)
        self._columns, self._groups, self._bytes = {}, OrderedDict(), {}
        self._groups_lock = threading.Lock()
        starts = [f.metadata.row_group(g).num_rows for f in r._files
                  for g in range(f.num_row_groups)]
        self._starts = np.concatenate([[0], np.cumsum(starts, dtype=np.int64)])
        self._ids, self.id_field = id_index(r.schema, id_field, self.n_rows, self._pieces,
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

    def _pieces(self, name):
        """The column ``name``, a row group at a time (nothing kept)."""
        for f in self._reader._files:
            for g in range(f.num_row_groups):
                yield f.read_row_group(g, columns=[name]).column(0)

    def _column_bytes(self, name):
        """The uncompressed bytes of the column ``name`` in every row group (read once)."""
        if name not in self._bytes:
            total = 0
            for f in self._reader._files:
                md = f.metadata
                leaves = [j for j in range(md.num_columns)
                          if (p := md.schema.column(j).path) == name
                          or p.startswith(name + ".")]
                total += sum(md.row_group(g).column(j).total_uncompressed_size
                             for g in range(md.num_row_groups) for j in leaves)
            self._bytes[name] = total
        return self._bytes[name]

    def _group(self, k, name):
        """Row group ``k`` (numbered across the files) of the column ``name``, decoded; the
        last :data:`TEXT_GROUPS` are kept."""
        key = (k, name)
        with self._groups_lock:
            if key in self._groups:
                self._groups.move_to_end(key)
                return self._groups[key]
        for f in self._reader._files:
            if k < f.num_row_groups:
                break
            k -= f.num_row_groups
        col = f.read_row_group(k, columns=[name]).column(0)
        with self._groups_lock:
            self._groups[key] = col
            while len(self._groups) > TEXT_GROUPS:
                self._groups.popitem(last=False)
        return col

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
            vectors = self._take_vectors(np.asarray(positions, dtype=np.int64))
        return vectors, self._row_texts(positions, text_field)

    def _take_vectors(self, positions):
        """The vectors at ``positions`` (float32), read from the vector column alone, a batch
        at a time: never the rows' other fields, never a Python object per value."""
        r, out = self._reader, np.empty((len(positions), self.dim), np.float32)
        order = np.argsort(positions, kind="stable")
        wanted, seen = positions[order], 0
        for (path, _), f in zip(r.shards, r._files):
            for g in range(f.num_row_groups):
                lo, seen = seen, seen + f.metadata.row_group(g).num_rows
                a, b = np.searchsorted(wanted, [lo, seen])
                at = lo
                for rb in f.iter_batches(batch_size=TAKE_BATCH_ROWS, row_groups=[g],
                                         columns=[r.column]) if b > a else ():
                    c, d = np.searchsorted(wanted, [at, at + rb.num_rows])
                    if d > c:
                        V = arrow_vectors(self._pa, rb.column(0), self.dim, path, r.column)
                        out[order[c:d]] = V[wanted[c:d] - at]
                    at += rb.num_rows
                    if d >= b:
                        break
        return out

    def _row_texts(self, positions, text_field):
        if text_field is None:
            return None
        if text_field != self.text_field:
            text_column(self._pa, self._reader.schema, text_field, self.path)
        positions = np.asarray(positions, dtype=np.int64)
        if text_field in self._columns or self._column_bytes(text_field) <= TEXT_CACHE_BYTES:
            return self._column(text_field).take(self._pa.array(positions)).to_pylist()
        out = np.empty(len(positions), dtype=object)
        group = np.searchsorted(self._starts, positions, side="right") - 1
        order = np.argsort(group, kind="stable")
        bounds = np.flatnonzero(np.diff(group[order])) + 1
        for rows in np.split(order, bounds) if len(order) else ():
            k = int(group[rows[0]])
            got = self._group(k, text_field).take(self._pa.array(positions[rows] - self._starts[k]))
            out[rows] = np.array(got.to_pylist(), dtype=object)
        return out.tolist()


# ---------------------------------------------------------------------------- a second field
# (--into FIELD: .fields writes it; what reads it is here, beside the class it opens)
def _schema(path):
    _, pq = import_pyarrow(path)
    try:
        return pq.ParquetFile(path).schema_arrow
    except OSError as exc:
        raise StoreError(f"{path}: not a readable Parquet file ({exc}).") from None


def field_state(address, field):
    """The field's width where skalign added it (:func:`~skalign._stores.files.fields.
    column_state` on the file's schema)."""
    import_pyarrow(address.path)
    return column_state(address, _schema(address.path), field, "file")


def open_field(address, field, *, text_field=None, **options):
    """The field as a :class:`~skalign._stores.files.fields.FieldLive` over the file opened on
    its old column (the stamp's ``from_field``)."""
    dim = field_state(address, field)
    return open_column_field(
        address, field, dim,
        lambda old: ParquetLive(address, column=old, text_field=text_field, **options),
        lambda base: _values(address.path, field, dim))


def open_owned(address, column, options):
    """The field ``column`` opened as :func:`open_field` does where skalign added it (what a
    live store asked for that column becomes), else ``None``."""
    if column in _schema(address.path).names:
        if not owned(_schema(address.path).field(column)):
            return None
    elif read_sidecar(address.path, column) is None:
        return None
    return open_field(address, column, **options)


def _values(path, field, dim):
    """The field's vectors, whether each row has one, and each row's mark, from the file."""
    pa, pq = import_pyarrow(path)
    f = pq.ParquetFile(path)
    n = f.metadata.num_rows
    V, filled, marks = np.zeros((n, dim), np.float32), np.zeros(n, bool), [None] * n
    if field not in f.schema_arrow.names:
        return V, filled, marks
    key, at = field_key(field), 0
    cols = [field] + ([key] if key in f.schema_arrow.names else [])
    for rb in f.iter_batches(columns=cols):
        arr = rb.column(0)
        valid = np.asarray(arr.is_valid())
        rows = at + np.flatnonzero(valid)
        if len(rows):
            V[rows] = np.asarray(arr.filter(arr.is_valid()).flatten(), np.float32).reshape(-1, dim)
            filled[rows] = True
        if len(cols) > 1:
            marks[at:at + rb.num_rows] = rb.column(1).to_pylist()
        at += rb.num_rows
    return V, filled, marks
