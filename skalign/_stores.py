"""Readers and writers of vector stores: ``.npy``, Parquet files or shard folders, LanceDB tables.

Formats are chosen from the path:

* ``*.npy``: a 2-D numpy array, read memory-mapped in windows of ``batch_size`` rows (each
  window is unmapped after use, so the resident set stays bounded); written to a temporary
  ``.npy`` created by :func:`numpy.lib.format.open_memmap` and filled with sequential writes.
* ``*.parquet``: one Parquet file; an existing folder containing ``*.parquet`` files (searched
  recursively) is a sharded dataset. An output path without a suffix is written as a folder of
  shards: one output shard per input shard (same relative names), or ``part-NNNNN.parquet`` of
  about a million rows each for unsharded input.
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

import os
import secrets
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from ._backend import default_batch_size as _default_batch_size
from ._backend import iter_batches
from .exceptions import StoreError

# the internal store API that skalign.io and skalign.parallel share
__all__ = [
    "arrow_vectors", "atomic_file", "open_reader", "output_dim", "output_schema",
    "prepare_translation", "translate_store",
]

#: rows per output shard when an unsharded input is written as a folder of Parquet shards
ROWS_PER_SHARD = 1 << 20
_AUTO_COLUMNS = ("vector", "embedding", "embeddings")


# ------------------------------------------------------------------------------------ helpers
def tmp_sibling(path, suffix=""):
    """A fresh hidden name next to ``path`` (same folder, so the final rename is atomic)."""
    stem = path.name[: -len(suffix)] if suffix and path.name.endswith(suffix) else path.name
    return path.with_name(f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}")


def remove_path(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def replace_path(tmp, path):
    """Move ``tmp`` to ``path``, replacing a file or folder already there."""
    if path.is_dir() and not path.is_symlink():
        old = tmp_sibling(path, ".old")
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)


def check_parent(path):
    if not path.parent.is_dir():
        raise StoreError(f"{path}: folder {path.parent} does not exist; create it first.")


@contextmanager
def atomic_file(path, suffix=""):
    """Yield a temporary path next to ``path``; rename it to ``path`` if the block succeeds.

    On any exception the temporary file (or folder) is removed and the exception re-raised.
    """
    path = Path(path)
    check_parent(path)
    tmp = tmp_sibling(path, suffix)
    try:
        yield tmp
        replace_path(tmp, path)
    except BaseException:
        remove_path(tmp)
        raise


def store_kind(path, *, output=False):
    """``"npy"``, ``"parquet"`` (a file), ``"parquet-dir"`` or ``"lance"`` for ``path``."""
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
        f"{path}: unsupported format; use .npy, .parquet (a file or a folder of shards) or a "
        "LanceDB table DIR/TABLE.lance."
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

    def batches(self, batch_size):
        mm = self._mm
        row_bytes = self.dim * self.dtype.itemsize
        for rows in iter_batches(self.n_rows, batch_size):
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

    def batches(self, batch_size):
        pa = self._pa
        for (p, shard), f in zip(self.shards, self._files):
            idx = f.schema_arrow.get_field_index(self.column)
            for rb in f.iter_batches(batch_size=batch_size):
                yield arrow_vectors(pa, rb.column(idx), self.dim, p, self.column), rb, shard

    def read_all(self):
        parts = [v for v, _, _ in self.batches(65536)]
        if not parts:
            return np.empty((0, self.dim), dtype=self.dtype)
        return np.concatenate(parts)


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

    def batches(self, batch_size):
        pa = self._pa
        reader = self._table.search().limit(None).to_batches(batch_size)
        for rb in reader:
            if rb.num_rows == 0:
                continue
            idx = rb.schema.get_field_index(self.column)
            yield arrow_vectors(pa, rb.column(idx), self.dim, self.path, self.column), rb, None

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


def _write_npy(path, batches, n_rows, dim):
    with atomic_file(path, ".npy") as tmp:
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n_rows, dim))
        offset = mm.offset
        del mm
        written = 0
        # sequential writes after the header: the page cache, not this process, holds the data
        with open(tmp, "r+b") as f:
            f.seek(offset)
            for out, _, _ in batches:
                f.write(np.ascontiguousarray(out, dtype=np.float32).data)
                written += len(out)
        if written != n_rows:
            raise StoreError(f"{path}: the input yielded {written} rows, expected {n_rows}.")


def _write_parquet(path, batches, schema, column, *, folder):
    pa, pq = _import_pyarrow(path)
    with atomic_file(path) as tmp:
        if folder:
            tmp.mkdir()
        writer, current, start, part_rows, part = None, object(), 0, 0, 0
        try:
            for out, rb, shard in batches:
                if folder:
                    if shard is None and (writer is None or part_rows >= ROWS_PER_SHARD):
                        shard, part, part_rows = f"part-{part:05d}.parquet", part + 1, 0
                    elif shard is None:
                        shard = current
                    if shard != current:
                        if writer is not None:
                            writer.close()
                        target = tmp / shard
                        target.parent.mkdir(parents=True, exist_ok=True)
                        writer, current = pq.ParquetWriter(target, schema), shard
                elif writer is None:
                    writer = pq.ParquetWriter(tmp, schema)
                writer.write_batch(_output_batch(pa, schema, column, out, rb, start))
                start += len(out)
                part_rows += len(out)
            if writer is None and not folder:
                writer = pq.ParquetWriter(tmp, schema)  # zero rows: still a valid empty file
        finally:
            if writer is not None:
                writer.close()


def _write_lance(path, batches, schema, column):
    pa, _ = _import_pyarrow(path)
    lancedb = _import_lancedb(path)
    db_dir = path.parent
    created = not db_dir.exists()
    db_dir.mkdir(parents=True, exist_ok=True)
    name = path.name[: -len(".lance")]
    tmp_name = f"{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp = db_dir / f"{tmp_name}.lance"
    failure = []

    def record_batches():
        start = 0
        try:
            for out, rb, _ in batches:
                yield _output_batch(pa, schema, column, out, rb, start)
                start += len(out)
        except BaseException as exc:  # re-raised below: lancedb wraps errors from Python
            failure.append(exc)
            raise

    try:
        lancedb.connect(db_dir).create_table(
            tmp_name, data=pa.RecordBatchReader.from_batches(schema, record_batches()),
            schema=schema,
        )
        replace_path(tmp, path)
    except BaseException as exc:
        remove_path(tmp)
        if created:
            shutil.rmtree(db_dir, ignore_errors=True)
        if failure and failure[0] is not exc:
            raise failure[0] from None
        raise


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

    src: Path
    dst: Path
    reader: object
    out_kind: str
    d_in: int
    d_out: int
    batch_size: int
    out_column: str


def prepare_translation(model, src, dst, *, column=None, batch_size=None):
    """Open ``src`` and check a translation into ``dst`` before anything is written.

    The one place where input format, vector column, output format, "output is the input",
    the output's folder and the vectors' width against ``model.n_features_in_`` are checked; both
    :func:`translate_store` and :func:`skalign.parallel.translate_parquet` start here.

    Returns
    -------
    Translation
    """
    src, dst = Path(src), Path(dst)
    reader = open_reader(src, column=column)
    out_kind = store_kind(dst, output=True)
    if src.resolve() == dst.resolve():
        raise StoreError(f"{dst}: OUTPUT is the same as INPUT; write to a new path.")
    if out_kind != "lance":  # a LanceDB output creates its database folder
        check_parent(dst)
    d_in, d_out = int(model.n_features_in_), int(output_dim(model))
    if reader.n_rows and reader.dim != d_in:
        raise StoreError(
            f"{src}: vectors have {reader.dim} dimensions but the model translates {d_in}-d "
            f"embeddings; pass embeddings made by the encoder the model was fitted on."
        )
    if batch_size is None:
        batch_size = default_batch_size(d_in, d_out)
    return Translation(src, dst, reader, out_kind, d_in, d_out, batch_size,
                       column or reader.column or "vector")


def translate_store(model, src, dst, *, column=None, batch_size=None, progress=False):
    """Stream the store ``src`` through ``model.transform`` into ``dst``; return the row count.

    See :func:`skalign.io.translate` for the formats and guarantees.
    """
    job = prepare_translation(model, src, dst, column=column, batch_size=batch_size)
    src, dst, reader, out_kind = job.src, job.dst, job.reader, job.out_kind
    batch_size, d_out, out_column = job.batch_size, job.d_out, job.out_column
    bar = _progress(reader.n_rows, progress, f"{src.name} -> {dst.name}")

    def translated():
        start = 0
        for vectors, rb, shard in reader.batches(batch_size):
            try:
                out = model.transform(vectors)
            except ValueError as exc:
                msg = " ".join(str(exc).split())
                raise StoreError(
                    f"{src}: rows {start}-{start + len(vectors) - 1}: {msg}"
                ) from None
            start += len(vectors)
            if bar is not None:
                bar.update(len(vectors))
            yield np.asarray(out, dtype=np.float32), rb, shard

    try:
        if out_kind == "npy":
            _write_npy(dst, translated(), reader.n_rows, d_out)
        else:
            pa, _ = _import_pyarrow(dst)
            schema = output_schema(pa, reader, out_column, d_out)
            if out_kind == "lance":
                _write_lance(dst, translated(), schema, out_column)
            else:
                _write_parquet(dst, translated(), schema, out_column,
                               folder=out_kind == "parquet-dir")
    finally:
        if bar is not None:
            bar.close()
    return reader.n_rows
