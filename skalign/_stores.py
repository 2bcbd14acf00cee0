"""Readers and writers of vector stores: ``.npy``, Parquet files or shard folders, LanceDB tables.

Formats are chosen from the path:

* ``*.npy``: a 2-D numpy array, read memory-mapped in windows of ``batch_size`` rows (each
  window is unmapped after use, so the resident set stays bounded); written to a temporary
  ``.npy`` with a one-block header (:func:`skalign._shadow.create_npy`) filled with
  sequential writes (direct I/O where the file system allows it, :mod:`skalign._direct_io`;
  so are a Parquet file and a folder's unsharded parts).
* ``*.parquet``: one Parquet file; an existing folder containing ``*.parquet`` files (searched
  recursively) is a sharded dataset. An output path without a suffix is written as a folder of
  shards: one output shard per input shard (same relative names), or one
  ``part-NNNNN.parquet`` per batch for unsharded input.
* ``DIR/TABLE.lance``: the table ``TABLE`` of the embedded LanceDB database in folder ``DIR``
  (the path of the table's own folder on disk). No server is involved.

The vector column of a table is a list, large list or fixed-size list of numbers; it is chosen
with ``column`` or found automatically (the only such column, else ``vector``/``embedding``).
Outputs always hold float32 vectors as a fixed-size list (what LanceDB's vector search expects)
and keep every other column. Every output is written under a temporary name in the destination's
folder and renamed at the end; on any error the temporary output is removed. Errors the user can
fix raise :class:`StoreError`, whose one-line message names the file and the fix.
"""

from __future__ import annotations

import math
import os
import struct
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from ._backend import default_batch_size as _default_batch_size
from ._backend import iter_batches
from ._direct_io import BLOCK, SequentialWriter, aligned_empty
from ._journal import read_journal, write_journal
from ._parquet_footer import footer_of
from ._shadow import (
    FileShadow,
    NpyShadow,
    _fsync,
    atomic_file,
    check_parent,
    fsync_dir,
    swap_paths,
)
from .exceptions import StoreError

# the internal store API that skalign.io and skalign.parallel share
__all__ = [
    "arrow_vectors", "atomic_file", "open_reader", "open_writer", "output_dim", "output_schema",
    "prepare_translation", "restore_store", "store_kind", "translate_store",
]

#: rows per output shard when an unsharded input is written as a folder of Parquet shards
ROWS_PER_SHARD = 1 << 20
_AUTO_COLUMNS = ("vector", "embedding", "embeddings")


# ------------------------------------------------------------------------------------ helpers
def store_kind(path, *, output=False):
    """``"npy"``, ``"parquet"`` (a file), ``"parquet-dir"``, ``"lance"``, or a connector's kind
    (``"pgvector"``, ``"chroma"``, ``"qdrant"``, ``"faiss"``) for a path or an address."""
    from ._connectors import parse_address

    address = parse_address(path)
    if address is not None:
        return address.kind
    path = Path(path)
    if path.suffix == ".npy":
        return "npy"
    if path.suffix == ".lance":
        return "lance"
    if path.is_dir():
        return "parquet-dir"
    if path.suffix == ".parquet":
        return "parquet"
    if output and path.suffix == "":
        return "parquet-dir"
    if not output and not path.exists():
        raise StoreError(f"{path}: no such file or folder; check the path.")
    raise StoreError(
        f"{path}: unsupported format; use .npy, .parquet (a file or a folder of shards), a "
        "LanceDB table DIR/TABLE.lance, PATH.faiss, or a postgresql://, chroma:, qdrant: address "
        "(see skalign translate --help)."
    )


def _import_pyarrow(path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the installation
        raise StoreError(
            f"{path}: reading and writing Parquet needs pyarrow; pip install 'skalign[stores]'."
        ) from None
    return pa, pq


def _import_lancedb(path):
    os.environ.setdefault("LANCE_LOG", "error")  # the Rust core logs to stderr otherwise
    try:
        import lancedb
    except ImportError:  # pragma: no cover - depends on the installation
        raise StoreError(
            f"{path}: LanceDB tables need lancedb; pip install 'skalign[stores]'."
        ) from None
    return lancedb


def _is_vector_type(pa, t):
    return (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    ) and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type))


def _pick_column(pa, schema, column, where):
    names = list(schema.names)
    vector_cols = [f.name for f in schema if _is_vector_type(pa, f.type)]
    if column is not None:
        if column not in names:
            raise StoreError(
                f"{where}: no column {column!r} (columns: {', '.join(names)}); pass the vector "
                f"column with --column{' (' + ', '.join(vector_cols) + ')' if vector_cols else ''}."
            )
        t = schema.field(column).type
        if not _is_vector_type(pa, t):
            raise StoreError(
                f"{where}: column {column!r} holds {t}, not vectors of numbers; pass a column of "
                "lists of floats with --column"
                + (f" ({', '.join(vector_cols)})." if vector_cols else ".")
            )
        return column
    if len(vector_cols) == 1:
        return vector_cols[0]
    for name in _AUTO_COLUMNS:
        if name in vector_cols:
            return name
    if not vector_cols:
        raise StoreError(
            f"{where}: no column of numeric vectors (lists of floats) among {', '.join(names)}; "
            "store the embeddings as a list<float> column or pass --column."
        )
    raise StoreError(
        f"{where}: several vector columns ({', '.join(vector_cols)}); choose one with --column."
    )


def arrow_vectors(pa, arr, dim, where, column):
    """Rows of a list column as an ``(n, dim)`` numpy array; ragged or null vectors raise."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise StoreError(
            f"{where}: column {column!r} has {arr.null_count} missing (null) vectors; drop or "
            "re-embed those rows first."
        )
    t = arr.type
    if not _is_vector_type(pa, t):
        raise StoreError(
            f"{where}: column {column!r} holds {t}, not vectors of numbers; pass a column of "
            "lists of floats with --column."
        )
    if pa.types.is_fixed_size_list(t):
        if t.list_size != dim:
            raise StoreError(
                f"{where}: column {column!r} has {t.list_size}-d vectors in one part and {dim}-d "
                "in another; all vectors must have the same length."
            )
    else:
        lengths = np.diff(np.asarray(arr.offsets))
        bad = np.flatnonzero(lengths != dim)
        if bad.size:
            raise StoreError(
                f"{where}: column {column!r} is ragged (a vector of length {lengths[bad[0]]} "
                f"where {dim} was expected); all vectors must have the same length."
            )
    values = arr.flatten()
    if values.null_count:
        raise StoreError(
            f"{where}: column {column!r} has null numbers inside vectors; fill or drop them."
        )
    return values.to_numpy(zero_copy_only=False).reshape(len(arr), dim)


# ------------------------------------------------------------------------------------ readers
class _NpyReader:
    kind = "npy"
    column = None
    schema = None

    def __init__(self, path):
        self.path = path
        if not path.is_file():
            raise StoreError(f"{path}: no such file; check the path.")
        try:
            mm = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreError(
                f"{path}: not a readable .npy array ({msg}); save embeddings with numpy.save."
            ) from None
        if mm.ndim != 2:
            raise StoreError(
                f"{path}: expected a 2-D array of shape (rows, dim), got shape {mm.shape}; "
                "reshape it before saving."
            )
        if mm.dtype.kind not in "fiu":
            raise StoreError(
                f"{path}: vectors must be numbers, got dtype {mm.dtype}; save them as float32."
            )
        self._mm = mm
        self.n_rows, self.dim = mm.shape
        self.dtype = mm.dtype

    def batches(self, batch_size, start=0):
        mm = self._mm
        row_bytes = self.dim * self.dtype.itemsize
        for rows in iter_batches(self.n_rows, batch_size):
            if rows.stop <= start:
                continue
            if mm.flags.c_contiguous and row_bytes:
                # a fresh mapping per window: unmapped when dropped, so the pages read so far
                # leave the resident set instead of accumulating over the whole file
                window = np.memmap(
                    self.path, dtype=self.dtype, mode="r",
                    offset=mm.offset + rows.start * row_bytes,
                    shape=(rows.stop - rows.start, self.dim),
                )
            else:
                window = np.ascontiguousarray(mm[rows])
            yield window, None, None
            del window

    def take(self, positions, batch_size):
        """Rows at ``positions`` (sorted): their vectors, and no other fields."""
        return np.array(self._mm[positions]), [None] * len(positions)

    def read_all(self):
        return self._mm


class _ParquetReader:
    kind = "parquet"

    def __init__(self, path, column):
        pa, pq = self._pa, self._pq = _import_pyarrow(path)
        self.path = path
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.parquet") if p.is_file())
            if not files:
                raise StoreError(
                    f"{path}: folder holds no .parquet files; pass a Parquet file, a folder of "
                    "Parquet shards, a .npy file or a DIR/TABLE.lance table."
                )
            self.shards = [(p, p.relative_to(path).as_posix()) for p in files]
        elif path.is_file():
            self.shards = [(path, None)]
        else:
            raise StoreError(f"{path}: no such file or folder; check the path.")
        self._files = []
        for p, _ in self.shards:
            try:
                self._files.append(pq.ParquetFile(p))
            except (pa.ArrowException, OSError) as exc:
                raise StoreError(
                    f"{p}: not a readable Parquet file ({str(exc).splitlines()[0]})."
                ) from None
        self.schema = self._files[0].schema_arrow
        self.column = _pick_column(pa, self.schema, column, path)
        for (p, _), f in zip(self.shards, self._files):
            if self.column not in f.schema_arrow.names:
                raise StoreError(
                    f"{p}: shard has no column {self.column!r}; all shards must share one schema."
                )
        self.n_rows = sum(f.metadata.num_rows for f in self._files)
        t = self.schema.field(self.column).type
        self.dim = t.list_size if pa.types.is_fixed_size_list(t) else self._peek_dim()
        self.dtype = np.dtype(t.value_type.to_pandas_dtype())

    def _peek_dim(self):
        for (p, _), f in zip(self.shards, self._files):
            if f.metadata.num_rows:
                batch = next(f.iter_batches(batch_size=1, columns=[self.column]))
                first = batch.column(0)
                if first.null_count:
                    raise StoreError(
                        f"{p}: column {self.column!r} has missing (null) vectors; drop or "
                        "re-embed those rows first."
                    )
                return len(first[0])
        return 0

    def batches(self, batch_size, start=0):
        pa = self._pa
        seen = 0
        for (p, shard), f in zip(self.shards, self._files):
            if seen + f.metadata.num_rows <= start:  # a whole shard already translated
                seen += f.metadata.num_rows
                continue
            idx = f.schema_arrow.get_field_index(self.column)
            for group in range(f.num_row_groups):
                group_rows = f.metadata.row_group(group).num_rows
                if seen + group_rows <= start:  # resuming: skip it unread
                    seen += group_rows
                    continue
                # one row group at a time: over a whole file, pyarrow reads ahead and held
                # 1.5 GB of a million 384-d rows before the first batch was done with
                for rb in f.iter_batches(batch_size=batch_size, row_groups=[group]):
                    seen += rb.num_rows
                    if seen <= start:  # batches restart with each row group: resume on one
                        continue
                    yield arrow_vectors(pa, rb.column(idx), self.dim, p, self.column), rb, shard

    def row(self, rb, k):
        """Row ``k`` of a batch without its vector: the fields the output must keep."""
        out = rb.slice(k, 1).to_pylist()[0]
        out.pop(self.column)
        return out

    def take(self, positions, batch_size):
        """Rows at ``positions``: vectors and fields, read as :func:`_batches_holding` reads, in
        batches of ``TAKE_BATCH_ROWS`` rows whatever ``batch_size``: a row group is decoded
        from its start up to the last row wanted, not on to the end of a translation batch
        (a resumed run's verification reads back the sampled rows the crashed run committed)."""
        vectors, rows = {}, {}
        for i, rb, here in _batches_holding(self._files, positions, TAKE_BATCH_ROWS):
            vecs = arrow_vectors(self._pa, rb.column(rb.schema.get_field_index(self.column)),
                                 self.dim, self.shards[i][0], self.column)
            for pos, k in here.items():
                vectors[pos], rows[pos] = vecs[k], self.row(rb, k)
        return [vectors[pos] for pos in positions], [rows[pos] for pos in positions]

    def read_all(self):
        parts = [v for v, _, _ in self.batches(65536)]
        if not parts:
            return np.empty((0, self.dim), dtype=self.dtype)
        return np.concatenate(parts)


#: Rows of a LanceDB table read at a time (see ``_LanceReader.batches``).
LANCE_WINDOW_ROWS = 8192


class _LanceReader:
    kind = "lance"

    def __init__(self, path, column):
        pa, _ = self._pa, _ = _import_pyarrow(path)
        lancedb = _import_lancedb(path)
        self.path = path
        name = path.name[: -len(".lance")]
        if not path.is_dir():
            raise StoreError(
                f"{path}: no LanceDB table {name!r} in {path.parent}; a table is addressed by "
                "its folder, DIR/TABLE.lance."
            )
        try:
            self._table = lancedb.connect(path.parent).open_table(name)
        except Exception as exc:  # lancedb raises ValueError, OSError or its own errors
            raise StoreError(
                f"{path}: not a readable LanceDB table ({str(exc).splitlines()[0]})."
            ) from None
        self.schema = self._table.schema
        self.column = _pick_column(pa, self.schema, column, path)
        self.n_rows = self._table.count_rows()
        t = self.schema.field(self.column).type
        self.dtype = np.dtype(t.value_type.to_pandas_dtype())
        if pa.types.is_fixed_size_list(t):
            self.dim = t.list_size
        else:
            head = self._table.search().select([self.column]).limit(1).to_arrow()
            self.dim = len(head.column(0)[0]) if head.num_rows else 0

    def batches(self, batch_size, start=0):
        pa = self._pa
        # each batch read as windows of at most LANCE_WINDOW_ROWS rows (offset and limit):
        # lancedb's scan reads ahead (a peak of 0.9 GB over a million 384-d rows, windows of
        # 8,192 rows 0.33 GB, and in less time), and it cannot be told not to without pylance
        for lo in range(start, self.n_rows, batch_size):
            hi = min(lo + batch_size, self.n_rows)
            parts = [self._table.search().offset(at).limit(min(LANCE_WINDOW_ROWS, hi - at))
                     .to_arrow() for at in range(lo, hi, LANCE_WINDOW_ROWS)]
            table = pa.concat_tables(parts).combine_chunks()
            if table.num_rows != hi - lo:  # the table changed under the translation
                raise StoreError(f"{self.path}: rows {lo}-{hi - 1} could not be read; was the "
                                 "table changed during the translation? Run the command again.")
            rb = table.to_batches()[0]
            idx = rb.schema.get_field_index(self.column)
            yield arrow_vectors(pa, rb.column(idx), self.dim, self.path, self.column), rb, None

    def row(self, rb, k):
        """Row ``k`` of a batch without its vector: the fields the output must keep."""
        out = rb.slice(k, 1).to_pylist()[0]
        out.pop(self.column)
        return out

    def take(self, positions, batch_size):
        """Rows at ``positions``: vectors and fields (one at a time: ``take_offsets`` does not
        promise the order of several)."""
        vectors, rows = [], []
        for pos in positions:
            rb = self._table.take_offsets([int(pos)]).to_arrow().to_batches()[0]
            idx = rb.schema.get_field_index(self.column)
            vectors.append(arrow_vectors(self._pa, rb.column(idx), self.dim, self.path,
                                         self.column)[0])
            rows.append(self.row(rb, 0))
        return vectors, rows

    def read_all(self):
        parts = [v for v, _, _ in self.batches(65536)]
        if not parts:
            return np.empty((0, self.dim), dtype=self.dtype)
        return np.concatenate(parts)


def open_reader(path, *, column=None):
    """A reader for the store at ``path`` with ``n_rows``, ``dim``, ``batches`` and ``read_all``.

    ``batches(batch_size)`` yields ``(vectors, record_batch, shard)``: the vectors as an
    ``(n, dim)`` array, the Arrow record batch they came from (``None`` for ``.npy``) and the
    shard's path relative to a sharded input folder (else ``None``).
    """
    from ._connectors import open_connector_reader, parse_address

    address = parse_address(path)
    if address is not None:
        return open_connector_reader(address, column)
    path = Path(path)
    kind = store_kind(path)
    if kind == "npy":
        return _NpyReader(path)
    if kind == "lance":
        return _LanceReader(path, column)
    return _ParquetReader(path, column)


# ------------------------------------------------------------------------------------ writers
def output_schema(pa, reader, column, dim):
    field = pa.field(column, pa.list_(pa.float32(), dim))
    if reader.schema is None:
        return pa.schema([pa.field("id", pa.int64()), field])
    idx = reader.schema.get_field_index(reader.column)
    return reader.schema.set(idx, field)


def _output_batch(pa, schema, column, out, rb, start):
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(out, dtype=np.float32).reshape(-1)), out.shape[1]
    )
    if rb is None:
        ids = pa.array(np.arange(start, start + len(out), dtype=np.int64))
        return pa.record_batch([ids, vectors], schema=schema)
    rb = rb.set_column(rb.schema.get_field_index(column), schema.field(column), vectors)
    return rb.cast(schema) if rb.schema != schema else rb


def _parquet_writer(pq, schema, column, target):
    """A Parquet writer of the output's schema into ``target`` (a path or a file object)."""
    # float vectors gain nothing from dictionary encoding or compression (measured: the same
    # size), which only cost time, on writing and on reading back
    others = [n for n in schema.names if n != column]
    return pq.ParquetWriter(
        target, schema, use_dictionary=others,
        compression={n: ("none" if n == column else "snappy") for n in schema.names})


def _encode_unit(writer, out, rb, start):
    """``(bytes, rows)``: a batch of a Parquet writer's output as a complete Parquet file."""
    batch = _output_batch(writer.pa, writer.schema, writer.job.out_column, out, rb, start)
    sink = writer.pa.BufferOutputStream()
    pw = _parquet_writer(writer.pq, writer.schema, writer.job.out_column, sink)
    try:
        pw.write_batch(batch)
    finally:
        pw.close()  # the unit's footer
    return sink.getvalue(), len(out)


class _ParquetWriter(FileShadow):
    """A folder of Parquet shards. The shadow is a hidden folder; every committed unit is a
    complete Parquet file listed in the journal: one file per input shard (sharded input) or per
    batch (``part-NNNNN.parquet``, unsharded input), renamed as a whole at the end."""

    suffix = ""
    pipelined = True
    #: unsharded parts written past the page cache where the system allows
    direct = True

    def begin(self, fp):
        self.pa, self.pq = _import_pyarrow(self.path)
        job = self.job
        self.schema = output_schema(self.pa, job.reader, job.out_column, job.d_out)
        self.work = self.partial
        state = read_journal(self.journal)
        if state is not None and state.get("fingerprint") == fp and self.work.is_dir():
            self.parts = [tuple(p) for p in state["parts"]]
            keep = {name for name, _ in self.parts}
            for p in self.work.rglob("*.parquet"):  # a unit written but not yet committed
                if p.relative_to(self.work).as_posix() not in keep:
                    p.unlink()
        else:
            self.discard()
            self.work.mkdir()
            self.parts = []
            write_journal(self.journal, fingerprint=fp, parts=[])
        self.fp = fp
        self.rows = sum(n for _, n in self.parts)
        self._writer = self._current = None
        self._unit_rows = 0
        self._unsynced = []  # parts closed since the last commit
        return self.rows

    def _parquet_writer(self, target):
        return _parquet_writer(self.pq, self.schema, self.job.out_column, target)

    def _close_unit(self):
        if self._writer is None:
            return
        self._writer.close()
        self._unsynced.append((self._current, self._unit_rows))
        self._writer, self._unit_rows = None, 0
        if self.clock.due():
            self._commit()

    def _commit(self):
        """Make the parts closed since the last commit durable, then list them in the
        journal; a part not listed there is removed and written again by a rerun."""
        folders = set()
        for name, _ in self._unsynced:
            with open(self.work / name, "rb") as f:
                os.fsync(f.fileno())
            folders.add(self.work / Path(name).parent)
        for folder in folders:
            fsync_dir(folder)
        self.parts += self._unsynced
        self._unsynced = []
        write_journal(self.journal, fingerprint=self.fp, parts=self.parts)
        self.clock.reset()

    def encode_unit(self, out, rb, shard, start):
        """Without shards, the batch as its own part, a complete Parquet file in memory (see
        ``_ParquetFileWriter.encode_unit``); the rows of a shard go to :meth:`write_unit` as
        they are (a shard's batches share one file, written in order)."""
        if shard:
            return out
        return _encode_unit(self, out, rb, start)

    def write_unit(self, out, rb, shard, start):
        """Append a batch; a unit ends at a shard change or, without shards, after each batch
        (given encoded by :meth:`encode_unit`: written as it is)."""
        n_parts = len(self.parts) + len(self._unsynced)
        name = shard if shard else f"part-{n_parts:05d}.parquet"
        if isinstance(out, tuple):  # an unsharded part, already a Parquet file's bytes
            unit, n_rows = out
            with open(self.work / name, "wb") as f:  # made durable by the commit
                seq = SequentialWriter(f, 0, direct=self.direct)
                seq.write(unit)
                seq.flush()
                seq.close()
            self._unsynced.append((name, n_rows))
            self.rows += n_rows
            if self.clock.due():
                self._commit()
            return
        batch = _output_batch(self.pa, self.schema, self.job.out_column, out, rb, start)
        if self._writer is not None and name != self._current:
            self._close_unit()
        if self._writer is None:
            target = self.work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            self._writer = self._parquet_writer(target)
            self._current = name
        self._writer.write_batch(batch)
        self._unit_rows += len(out)
        self.rows += len(out)
        if not shard:
            self._close_unit()

    def finish(self):
        self._close_unit()
        self._commit()
        return self.rows

    def fetch(self, positions, rows=None):
        files = [self.work / name for name, _ in self.parts]
        return _parquet_take(self.pa, self.pq, files, positions, self.job.out_column)

    def close(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class _ParquetFileWriter(FileShadow):
    """One Parquet file. The shadow ``.NAME.skalign-partial.parquet`` is a run of complete
    Parquet files, one per batch (a row group each), appended one after the other; the journal
    lists the committed ones (where each starts and ends, its rows). A rerun cuts the shadow back
    to the end of the last committed one and appends after it; the end of the run appends one
    footer listing the row groups of all (:mod:`skalign._parquet_footer`), so no row is read or
    written twice, in a resumed run or an uninterrupted one."""

    suffix = ".parquet"
    pipelined = True
    #: write past the page cache where the system allows (:class:`SequentialWriter`)
    direct = True

    def leftovers(self):
        # the folder of parts an earlier version joined at the end
        parts = self.partial.with_name(self.partial.name + ".parts")
        return super().leftovers() + ([parts] if parts.exists() else [])

    def begin(self, fp):
        self.pa, self.pq = _import_pyarrow(self.path)
        job = self.job
        self.schema = output_schema(self.pa, job.reader, job.out_column, job.d_out)
        self.fp = fp
        state = self._resumable(fp)
        if state is None or "units" not in state or (
                state["units"] and self.partial.stat().st_size < state["units"][-1][1]):
            self.discard()  # not this job's, another version's layout, or cut short
            self.partial.touch()
            write_journal(self.journal, fingerprint=fp, units=[])
            state = {"units": []}
        self.units = [tuple(u) for u in state["units"]]  # (start, end, rows), committed
        self._file = open(self.partial, "r+b")
        end = self.units[-1][1] if self.units else 0
        self._file.truncate(end)  # a unit written but not committed
        self._file.seek(end)
        self._seq = SequentialWriter(self._file, end, direct=self.direct)
        self._footers = [self._footer(e) for _, e, _ in self.units]
        self._unsynced = []
        self.rows = sum(n for _, _, n in self.units)
        return self.rows

    def _footer(self, end):
        """The footer of the unit ending at byte ``end`` of the shadow."""
        fd = self._file.fileno()
        (n,) = struct.unpack("<i", os.pread(fd, 4, end - 8))
        return footer_of(os.pread(fd, n + 8, end - 8 - n))

    def encode_unit(self, out, rb, shard, start):
        """The batch as a complete Parquet file in memory (pyarrow's encoder, without the GIL;
        several batches at once, see ``_WriteBehind``)."""
        return _encode_unit(self, out, rb, start)

    def write_unit(self, encoded, rb, shard, start):
        """Append a batch encoded by :meth:`encode_unit` (``_WriteBehind`` encodes every
        batch before its write)."""
        unit, n_rows = encoded
        at = self._seq.tell()
        self._seq.write(unit)
        end = self._seq.tell()
        self._footers.append(footer_of(memoryview(unit)))
        self._unsynced.append((at, end, n_rows))
        self.rows += n_rows
        if self.clock.due():
            self._commit()

    def _commit(self):
        """Make the units written since the last commit durable, then list them in the
        journal; the bytes after the last unit listed there are cut off by a rerun."""
        self._seq.sync()
        self.units += self._unsynced
        self._unsynced = []
        write_journal(self.journal, fingerprint=self.fp, units=self.units)
        self.clock.reset()

    def finish(self):
        from ._parquet_footer import join_footers

        self._commit()
        if not self.units:  # no rows: a file with the schema only
            self._seq.close()
            _parquet_writer(self.pq, self.schema, self.job.out_column, self._file).close()
            _fsync(self._file)
        else:
            footer = join_footers(self._footers, [s for s, _, _ in self.units])
            self._seq.write(footer + struct.pack("<i", len(footer)) + b"PAR1")
            self._seq.sync()
        self.close()
        return self.rows

    def fetch(self, positions, rows=None):
        return _parquet_take(self.pa, self.pq, [self.partial], positions, self.job.out_column)


def _batches_holding(files, positions, batch_size):
    """The batches of the Parquet ``files`` (``pq.ParquetFile``, rows numbered across them in
    order) that hold rows at ``positions``: ``(index of the file, batch, {position: row in the
    batch})``.

    A row group holding some is read a batch at a time from its start up to its last row
    wanted: Parquet cannot seek inside a row group, and decoding a whole group of 768-d lists
    as one table took about 0.5 s for a few of its rows.
    """
    wanted, seen = sorted(set(positions)), 0
    for i, f in enumerate(files):
        for g in range(f.num_row_groups):
            lo, seen = seen, seen + f.metadata.row_group(g).num_rows
            inside = [pos for pos in wanted if lo <= pos < seen]
            if not inside:
                continue
            at = lo
            for rb in f.iter_batches(batch_size=batch_size, row_groups=[g]):
                here = {pos: pos - at for pos in inside if at <= pos < at + rb.num_rows}
                if here:
                    yield i, rb, here
                at += rb.num_rows
                if at > inside[-1]:
                    break


#: rows decoded at a time while the verification looks for the sampled rows of a row group, in
#: the output (:func:`_parquet_take`) and in a Parquet input (``_ParquetReader.take``)
TAKE_BATCH_ROWS = 1024


def _parquet_take(pa, pq, files, positions, column):
    """Rows at ``positions`` of the concatenation of ``files``: vectors, other columns."""
    got = {}
    for _, rb, here in _batches_holding([pq.ParquetFile(p) for p in files], positions,
                                        TAKE_BATCH_ROWS):
        got.update(zip(here, rb.take(pa.array(list(here.values()))).to_pylist()))
    vecs, rows = [], []
    for pos in positions:
        row = dict(got[pos])
        vecs.append(np.asarray(row.pop(column), dtype=np.float32))
        rows.append(row)
    return np.stack(vecs) if vecs else np.empty((0, 0), np.float32), rows


class _LanceWriter(FileShadow):
    """The shadow is a LanceDB table in the same database; each batch is one ``add`` (a Lance
    commit), so the committed row count is the table's own.

    An ``add`` killed before its commit leaves its data (and transaction) file in the table's
    folder, referenced by no version. The journal lists the table's files after each commit,
    with the version; a rerun that finds the table at that version removes every file not in
    the list (at a later version the crash came after the commit, so nothing is stray).
    """

    suffix = ".lance"
    pipelined = True

    def __init__(self, path, job):
        super().__init__(path, job)
        self.name = self.path.name[: -len(".lance")]
        self.partial = self.path.with_name(f"{self.name}-skalign-partial.lance")

    @contextmanager
    def lock(self):
        created = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with super().lock():
                yield self
        finally:
            if created:
                try:
                    self.path.parent.rmdir()  # a database folder this run made and left empty
                except OSError:
                    pass

    def begin(self, fp):
        self.pa, _ = _import_pyarrow(self.path)
        lancedb = _import_lancedb(self.path)
        job = self.job
        self.schema = output_schema(self.pa, job.reader, job.out_column, job.d_out)
        self.db = lancedb.connect(self.path.parent)
        tmp_name = self.partial.name[: -len(".lance")]
        self.fp = fp
        state = self._resumable(fp)
        if state is not None:
            try:
                self.table = self.db.open_table(tmp_name)
                self.rows = self.table.count_rows()
            except Exception:  # a shadow too broken to open: start afresh
                self.discard()
            else:
                if self.table.version == state.get("version"):
                    keep = set(state.get("files", ()))
                    for name in self._files():
                        if name not in keep:
                            (self.partial / name).unlink()
                self._record()
                return self.rows
        self.table = self.db.create_table(tmp_name, schema=self.schema)
        self._record()
        self.rows = 0
        return 0

    def _files(self):
        """The table's data and transaction files (what an uncommitted ``add`` writes)."""
        return [f"{sub}/{name}" for sub in ("data", "_transactions")
                if (self.partial / sub).is_dir() for name in os.listdir(self.partial / sub)]

    def _record(self):
        write_journal(self.journal, fingerprint=self.fp, version=self.table.version,
                      files=sorted(self._files()))

    def write_unit(self, out, rb, shard, start):
        batch = _output_batch(self.pa, self.schema, self.job.out_column, out, rb, start)
        self.table.add(self.pa.Table.from_batches([batch]))
        self._record()
        self.rows += len(out)

    def finish(self):
        return self.table.count_rows()

    def fetch(self, positions, rows=None):
        # one at a time: take_offsets does not promise the order of several
        got = [self.table.take_offsets([int(p)]).to_arrow().to_pylist()[0] for p in positions]
        vecs = [np.asarray(r.pop(self.job.out_column), dtype=np.float32) for r in got]
        return np.stack(vecs) if vecs else np.empty((0, 0), np.float32), got

    def close(self):
        pass


#: Rows per streamed batch, ``default_batch_size(d_in, d_out)``: float32 input and output near
#: 128 MiB, the budget ``skalign translate --batch-size`` documents.
default_batch_size = partial(_default_batch_size, working_memory=128)


def _progress(total, enabled, desc):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="rows", unit_scale=True, desc=desc, file=sys.stderr)


def output_dim(estimator):
    """Width of ``estimator.transform``'s output (the target or shared space).

    Parameters
    ----------
    estimator : fitted skalign estimator
        Any fitted aligner or transformer of skalign.

    Returns
    -------
    int
        The number of columns ``estimator.transform`` returns.
    """
    try:
        return len(estimator.get_feature_names_out())
    except (AttributeError, TypeError, ValueError):
        return int(estimator.n_features_out_)


@dataclass(frozen=True)
class Translation:
    """A checked translation job: what :func:`prepare_translation` returns."""

    src: object
    dst: object
    reader: object
    out_kind: str
    d_in: int
    d_out: int
    batch_size: int
    out_column: str


FILE_KINDS = ("npy", "parquet", "parquet-dir", "lance")

#: the default batch of a database (PostgreSQL, Chroma, Qdrant) is at most this many rows: the
#: server's write of one batch overlaps the translation of the next, and smaller batches overlap
#: more of the two (measured: 40,000 rows into pgvector took 1.4x its bulk load with 8,192-row
#: batches, 2x with the memory budget's 29,000). Every run, a rerun after a crash too, reads,
#: translates and loads its first batch with nothing to overlap: 200,000 rows into pgvector
#: committed their first batch 0.40 s in with 2,048 rows against 1.18 s with 8,192, in the
#: same time overall (``benchmarks/pg_batch_rows.py``)
DATABASE_BATCH_ROWS = 2048

#: Chroma and Qdrant's local mode pass every row through Python as lists of floats (a read
#: of Chroma builds the whole page at once; Qdrant's upsert copies the lists twice), so their
#: default batch is smaller (peak memory at the issue's sizes: ``benchmarks/store_memory.py``)
ENGINE_BATCH_ROWS = {"chroma": 1024, "qdrant": 1024}


def _same_store(src, dst):
    from ._connectors import parse_address

    a, b = parse_address(src), parse_address(dst)
    if a is None and b is None:
        return Path(src).resolve() == Path(dst).resolve()
    return a is not None and b is not None and a.identity == b.identity


def display(address):
    """The address as shown in messages (a password masked)."""
    from ._connectors import parse_address

    parsed = parse_address(address)
    return parsed.display if parsed is not None else str(address)


def open_writer(job):
    """The shadow writer for ``job.dst`` (no side effect until its ``begin``)."""
    if job.out_kind == "npy":
        return NpyShadow(job.dst, job)
    if job.out_kind == "lance":
        return _LanceWriter(job.dst, job)
    if job.out_kind == "parquet":
        return _ParquetFileWriter(job.dst, job)
    if job.out_kind == "parquet-dir":
        return _ParquetWriter(job.dst, job)
    from ._connectors import open_connector_writer, parse_address

    return open_connector_writer(parse_address(job.dst), job)


def prepare_translation(model, src, dst, *, column=None, batch_size=None, replace=False):
    """Open ``src`` and check a translation into ``dst`` before anything is written.

    The one place where input format, vector column, output format, "output is the input",
    an existing output, the output's folder and the vectors' width against
    ``model.n_features_in_`` are checked; :func:`translate_store` and
    :func:`skalign.parallel.translate_parquet` both start here.

    Returns
    -------
    Translation
    """
    from ._connectors import parse_address

    if parse_address(src) is None:
        src = Path(src)
    if parse_address(dst) is None:
        dst = Path(dst)
    out_kind = store_kind(dst, output=True)
    in_kind = store_kind(src)
    if (in_kind in FILE_KINDS) != (out_kind in FILE_KINDS) or (
        in_kind not in FILE_KINDS and in_kind != out_kind
    ):
        raise StoreError(
            f"{display(dst)}: a {in_kind} store translates into a {in_kind} store"
            + ("" if in_kind not in FILE_KINDS else " or another file store")
            + f"; give an OUTPUT of the same kind as INPUT ({display(src)})."
        )
    same = _same_store(src, dst)
    if same and not replace:
        raise StoreError(f"{display(dst)}: OUTPUT is the same as INPUT; write to a new name, or "
                         "pass --replace to swap the translation in (the input kept as a backup).")
    if isinstance(dst, Path) and out_kind != "lance":  # a LanceDB output creates its folder
        check_parent(dst)
    reader = open_reader(src, column=column)
    d_in, d_out = int(model.n_features_in_), int(output_dim(model))
    if reader.n_rows and reader.dim != d_in:
        raise StoreError(
            f"{display(src)}: vectors have {reader.dim} dimensions but the model translates "
            f"{d_in}-d embeddings; pass embeddings made by the encoder the model was fitted on."
        )
    if batch_size is None:
        batch_size = default_batch_size(d_in, d_out)
        if out_kind in ("parquet", "parquet-dir"):  # ENCODE_DEPTH batches in flight: the
            # memory of one at a time
            batch_size = max(1, batch_size // ENCODE_DEPTH)
        if out_kind not in FILE_KINDS and out_kind != "faiss":
            batch_size = min(batch_size, ENGINE_BATCH_ROWS.get(out_kind, DATABASE_BATCH_ROWS))
        if out_kind == "npy":  # whole blocks per batch: written from the buffers uncopied
            rows = BLOCK // math.gcd(BLOCK, 4 * d_out)
            batch_size = max(rows, batch_size - batch_size % rows)
    job = Translation(src, dst, reader, out_kind, d_in, d_out, batch_size,
                      column or reader.column or "vector")
    if not replace and not same and _output_exists(job):
        raise StoreError(
            f"{display(dst)}: OUTPUT already exists; choose a new name, or pass --replace to swap "
            "the translation in (the current one kept as a backup, `skalign restore` undoes it)."
        )
    return job


def _output_exists(job):
    """Whether the job's output exists, asked of a writer opened for that alone; a writer that
    holds a client (Chroma's) closes it, so that it does not keep the folder's indexes loaded
    for the rest of the run."""
    probe = open_writer(job)
    try:
        return probe.exists()
    finally:
        release = getattr(probe, "release", None)
        if release is not None:
            release()


#: The verification sample: rows translated again from the source and compared with the output
#: before it is published, ``SAMPLE_ROWS`` consecutive rows in each of ``N_VERIFY //
#: SAMPLE_ROWS`` windows, one in each quarter of the store. Drawn from the whole output: rows a
#: crashed run committed are read back from the source (``reader.take``), the rows this run
#: translates are kept as they stream by. The same rows on every run over the same store.
N_VERIFY = 32
SAMPLE_ROWS = 8


def verification_positions(reader, batch_size):
    """The sorted row positions the verification samples: ``SAMPLE_ROWS`` consecutive rows at
    a seeded place in each quarter of the store (all rows of a store of at most ``N_VERIFY``)."""
    n = reader.n_rows
    windows = N_VERIFY // SAMPLE_ROWS
    rng = np.random.default_rng(n)  # fixed per store: the same rows on every run
    picked = []
    for w in range(windows):
        a, b = w * n // windows, (w + 1) * n // windows
        if b > a:
            s = a + int(rng.integers(0, max(1, b - a - SAMPLE_ROWS + 1)))
            picked.extend(range(s, min(s + SAMPLE_ROWS, b)))
    return picked


def _keep_sample(reader, rb, vectors, start, sample, kept):
    """Keep the sampled rows of a batch this run translates: source vector and fields."""
    lo, hi = np.searchsorted(sample, [start, start + len(vectors)])
    for pos in sample[lo:hi]:
        k = pos - start
        row = reader.row(rb, k) if hasattr(reader, "row") and rb is not None else None
        kept[pos] = (np.array(vectors[k]), row)


def _verify(job, writer, model, n, sample, kept):
    where = display(job.dst)
    if n != job.reader.n_rows:
        raise StoreError(f"{where}: verification failed: {n} rows written, the input has "
                         f"{job.reader.n_rows}; run the same command again.")
    if not sample:
        return
    earlier = [p for p in sample if p not in kept]  # committed by a crashed run: read back
    if earlier:
        vectors, rows = job.reader.take(earlier, job.batch_size)
        kept.update((p, (v, r)) for p, v, r in zip(earlier, vectors, rows))
    sources = np.stack([kept[p][0] for p in sample])
    rows = [kept[p][1] for p in sample]
    got, got_rows = writer.fetch(sample, rows)
    want = np.asarray(model.transform(sources), dtype=np.float32)
    if getattr(writer, "normalizes", False):  # cosine engines keep directions: compare those
        want = want / np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-30)
        got = got / np.maximum(np.linalg.norm(got, axis=1, keepdims=True), 1e-30)
    scale = np.maximum(1.0, np.abs(want).max(axis=1, keepdims=True))
    close = np.abs(got - want) <= 1e-5 * scale + 1e-6 if got.shape == want.shape else None
    if close is None or not close.all():
        bad = sample[int(np.flatnonzero(~close.all(axis=1))[0])] if close is not None else None
        at = f" (row {bad} among them)" if bad is not None else ""
        raise StoreError(f"{where}: verification failed: sampled rows differ from the model's "
                         f"translation{at}; the output was not published and its shadow was "
                         "removed. Run the command again.")
    if got_rows is not None:
        for pos, a, b in zip(sample, rows, got_rows):
            if a is not None and {k: v for k, v in b.items() if k != job.out_column} != a:
                raise StoreError(f"{where}: verification failed: row {pos} lost its id or "
                                 "fields; the output was not published.")


#: Batches a writer with an ``encode_unit`` (Parquet: the single file's units, the folder's
#: unsharded parts) encodes at once, each in a thread of its own, while the next batch is
#: translated: pyarrow's encoder is single-threaded and was the translation's critical path
#: (24.5 of 29.7 s at 10⁶ rows, one batch at a time)
ENCODE_DEPTH = 2


class _WriteBehind:
    """Write each batch in a background thread while the next one is read and translated.

    The engines' writes — a file write or fsync, a Parquet or Lance encoder, a PostgreSQL
    ``COPY`` waiting on the server, Chroma's store — release the GIL, so on two cores the
    translation and the write overlap instead of adding up. Writes run one at a time and in
    order, so the commits (made inside the writes) are exactly those of a plain loop; one extra
    batch is held in memory (``ENCODE_DEPTH`` where batches are encoded ahead). A writer with an
    ``encode_unit`` (bytes from a batch, no side effect) has up to ``ENCODE_DEPTH`` batches
    encoded in parallel ahead of their writes, which still run in order; once a write fails
    none after it runs. Writers whose writes hold the GIL (Qdrant's local mode: Python all the
    way to SQLite), which a thread would not overlap, say ``pipelined = False`` and are called
    inline (encoded first where they encode).
    """

    def __init__(self, write, enabled, encode=None, depth=ENCODE_DEPTH):
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.write, self.encode, self.pending, self.broken = write, encode, deque(), False
        self.depth = depth if enabled and encode is not None else 1
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="skalign-write") if enabled \
            else None
        self.encoders = ThreadPoolExecutor(self.depth, thread_name_prefix="skalign-encode") \
            if enabled and encode is not None else None

    def submit(self, out, *rest):
        if self.pool is None:
            self.write(out if self.encode is None else self.encode(out, *rest), *rest)
            return
        while len(self.pending) >= self.depth:
            self.pending.popleft().result()
        if self.encoders is None:
            self.pending.append(self.pool.submit(self._write, None, out, *rest))
        else:
            encoded = self.encoders.submit(self.encode, out, *rest)
            self.pending.append(self.pool.submit(self._write, encoded, out, *rest))

    def _write(self, encoded, out, *rest):
        if self.broken:  # an earlier batch was not written: a later one must not be either
            raise StoreError("internal error: a batch after a failed write")
        try:
            return self.write(out if encoded is None else encoded.result(), *rest)
        except BaseException:
            self.broken = True
            raise

    def busy_threads(self, writer):
        """The threads that keep a core busy beside the translation: the encoders, or the
        writer's own count (``busy_threads``; by default one where it writes behind, since its
        engine works while it writes, and none where the writes are inline)."""
        if self.pool is None:
            return getattr(writer, "busy_threads", 0)
        if self.encoders is not None:
            return self.depth
        return getattr(writer, "busy_threads", 1)

    def wait(self):
        """Wait for the writes in flight; the first one's exception, if any, is raised here."""
        while self.pending:
            self.pending.popleft().result()

    def close(self):
        """Let the writes in flight end (their errors are moot: another one is on its way
        up)."""
        while self.pending:
            self.pending.popleft().exception()
        for pool in (self.pool, self.encoders):
            if pool is not None:
                pool.shutdown(wait=True)
        self.pool = self.encoders = None


@contextmanager
def _blas_threads_beside(busy):
    """Cap the BLAS threads of the products at the cores the ``busy`` write threads leave.

    An OpenBLAS thread that has done its share of a product spins for its next one, taking a
    core from the encoders: on two cores a million rows into a single Parquet file took 27.6
    CPU seconds with two BLAS threads and 21.2 with one (``profile_stores.py parquet 1e6``
    under ``OPENBLAS_NUM_THREADS``), 14.9 s of wall time against 11.9 s. Where the writes
    leave the cores free (direct I/O) the product keeps them all.
    """
    if busy <= 0:
        yield
        return
    from threadpoolctl import threadpool_info, threadpool_limits

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    now = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"),
              default=1)
    if now <= max(1, cores - busy):
        yield
        return
    with threadpool_limits(limits=max(1, cores - busy), user_api="blas"):
        yield


class _BatchTranslator:
    """``model.transform`` of each streamed batch as float32, after checking it holds numbers
    only.

    A CPU affine map (``ProcrustesAligner``, ``LinearAligner``) applied to float32 batches
    writes into ``n_buffers`` output buffers used in turn (the batches still being written
    behind keep theirs while the next batch is translated into another) instead of fresh
    arrays, which would be new pages for the kernel to zero first, batch after batch. The
    buffers start at a block boundary, so that direct writes take them as they are
    (:meth:`skalign._direct_io.SequentialWriter.write`). A writer
    must therefore be done with a batch when its ``write_unit`` returns (every writer copies or
    encodes it). The product is the same as ``model.transform``'s, so are the results.
    """

    def __init__(self, model, where, n_buffers=2):
        from .base import BaseAligner

        self.model, self.where, self.fn, self.buffers = model, where, None, []
        self.n_buffers = n_buffers
        direct = (type(model).transform is BaseAligner.transform
                  and hasattr(model, "_transform_numpy_fn")
                  and not model._needs_nonzero_rows()
                  and str(getattr(model, "device_", "cpu")).startswith("cpu"))
        if direct:
            self.fn = model._transform_numpy_fn(dtype=np.float32)

    def _check_finite(self, vectors, start, exact=False):
        """Raise the store's error at the first row with a NaN or infinity. The sum is finite
        when every number is (one pass, no boolean array); an overflowing sum of finite
        numbers only costs the exact check."""
        if (exact or not np.isfinite(np.add.reduce(vectors, axis=None))) \
                and not np.isfinite(vectors).all():
            bad = start + int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise StoreError(f"{self.where}: row {bad} has NaN or infinite numbers; drop or "
                             "re-embed those rows first.")

    def _buffer(self, n, d_out):
        if len(self.buffers) < self.n_buffers or self.buffers[0].shape[0] < n:
            self.buffers = [aligned_empty((n, d_out), np.float32) for _ in range(self.n_buffers)]
        self.buffers.append(self.buffers.pop(0))
        return self.buffers[-1][:n]

    def __call__(self, vectors, start):
        if self.fn is not None and vectors.dtype == np.float32 and vectors.ndim == 2:
            # the affine map sums the batch chunk by chunk as it centres it: no pass of its own
            # for the check. A NaN or infinity raises below: numpy's warnings are not wanted.
            out = self._buffer(len(vectors), self.model.n_features_out_)
            with np.errstate(over="ignore", invalid="ignore"):
                out, finite = self.fn.checked(vectors, out=out)
            if not finite:
                self._check_finite(vectors, start, exact=True)
                out = self.fn(vectors, out=out)  # finite numbers whose sum overflowed
            return out
        self._check_finite(vectors, start)
        try:
            res = self.model.transform(vectors)
        except ValueError as exc:
            msg = " ".join(str(exc).split())
            raise StoreError(f"{self.where}: rows {start}-{start + len(vectors) - 1}: {msg}") \
                from None
        return np.asarray(res, dtype=np.float32)


def translate_store(model, src, dst, *, column=None, batch_size=None, progress=False,
                    replace=False):
    """Stream the store ``src`` through ``model.transform`` into ``dst``; return the row count.

    The output is written in the shadow (a temporary file, table or collection), committed batch
    by batch, verified (row count; the rows of :func:`verification_positions`, rows a crashed
    run committed included, translated again from the input and compared together with their
    ids and other fields) and only then published under its name. The same call after a
    crash resumes from the last committed batch; a second concurrent call on the same output
    fails at once. See :func:`skalign.io.translate` for the formats and guarantees.
    """
    from ._journal import fingerprint

    job = prepare_translation(model, src, dst, column=column, batch_size=batch_size,
                              replace=replace)
    reader, batch_size = job.reader, job.batch_size
    writer = open_writer(job)
    name = lambda a: Path(a).name if isinstance(a, Path) else display(a)  # noqa: E731
    with writer.lock():
        fp = fingerprint(model, display(job.src), display(job.dst), batch_size, job.out_column)
        start = resumed_from = writer.begin(fp)
        bar = _progress(reader.n_rows, progress, f"{name(job.src)} -> {name(job.dst)}")
        if bar is not None and start:
            bar.update(start)
        sample, kept = verification_positions(reader, batch_size), {}
        behind = _WriteBehind(writer.write_unit, getattr(writer, "pipelined", False),
                              getattr(writer, "encode_unit", None),
                              getattr(writer, "encode_depth", ENCODE_DEPTH))
        translate = _BatchTranslator(model, display(job.src), n_buffers=behind.depth + 1)
        batches = reader.batches(batch_size, start)
        try:
            with _blas_threads_beside(behind.busy_threads(writer)):
                for vectors, rb, shard in batches:
                    out = translate(vectors, start)
                    _keep_sample(reader, rb, vectors, start, sample, kept)
                    behind.submit(out, rb, shard, start)
                    start += len(vectors)
                    if bar is not None:
                        bar.update(len(vectors))
            behind.wait()
            n = writer.finish()
            _verify(job, writer, model, n, sample, kept)
            backup = writer.publish(replace)
        except StoreError:
            batches.close()  # a reader may hold a file, a server-side read, a read-ahead thread
            behind.close()
            writer.close()
            writer.discard()  # bad data or a failed verification: nothing is resumable
            raise
        finally:
            batches.close()
            behind.close()
            writer.close()
            if bar is not None:
                bar.close()
    return TranslationResult(reader.n_rows, display(backup) if backup is not None else None,
                             resumed_from, getattr(writer, "restarted", None))


class TranslationResult(int):
    """The number of rows translated (an ``int``), with ``backup``: where ``--replace`` kept the
    previous output (``None`` if there was none), ``resumed_from``: the rows a crashed run
    had committed, which this one did not translate again (0 for a fresh start), and
    ``restarted``: why a crashed run's shadow of this same job could not be resumed and was
    translated afresh (``None`` where that did not happen)."""

    def __new__(cls, n, backup=None, resumed_from=0, restarted=None):
        self = super().__new__(cls, n)
        self.backup = backup
        self.resumed_from = int(resumed_from)
        self.restarted = restarted
        return self


def restore_store(output):
    """Swap ``output`` and the backup ``--replace`` kept of it; return the backup's address."""
    from ._connectors import parse_address, restore_connector

    address = parse_address(output)
    if address is not None:
        return restore_connector(address)
    path = Path(output)
    kind = store_kind(path, output=True)
    job = Translation(path, path, None, kind, 0, 0, 1, "vector")
    writer = open_writer(job)
    if not writer.backup.exists():
        raise StoreError(f"{path}: no backup {writer.backup.name} to restore; a backup is kept "
                         "only by `skalign translate --replace`.")
    with writer.lock():
        swap_paths(path, writer.backup)
    return writer.backup
