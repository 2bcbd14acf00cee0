"""Arrow tables' vector columns (Parquet and LanceDB): finding the column, reading it as a numpy
array, and the output's schema and record batches (float32 fixed-size lists, every other column
kept)."""

from __future__ import annotations

import os

import numpy as np

from ...exceptions import StoreError

__all__ = ["arrow_vectors", "import_lancedb", "import_pyarrow", "output_batch", "output_schema",
           "pick_column"]

#: rows per output shard when an unsharded input is written as a folder of Parquet shards
ROWS_PER_SHARD = 1 << 20
_AUTO_COLUMNS = ("vector", "embedding", "embeddings")


def import_pyarrow(path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the installation
        raise StoreError(
            f"{path}: reading and writing Parquet needs pyarrow; pip install 'skalign[stores]'."
        ) from None
    return pa, pq


def import_lancedb(path):
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


def pick_column(pa, schema, column, where):
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




def output_schema(pa, reader, column, dim):
    field = pa.field(column, pa.list_(pa.float32(), dim))
    if reader.schema is None:
        return pa.schema([pa.field("id", pa.int64()), field])
    idx = reader.schema.get_field_index(reader.column)
    return reader.schema.set(idx, field)


def output_batch(pa, schema, column, out, rb, start):
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(out, dtype=np.float32).reshape(-1)), out.shape[1]
    )
    if rb is None:
        ids = pa.array(np.arange(start, start + len(out), dtype=np.int64))
        return pa.record_batch([ids, vectors], schema=schema)
    rb = rb.set_column(rb.schema.get_field_index(column), schema.field(column), vectors)
    return rb.cast(schema) if rb.schema != schema else rb


