"""A second vector column of a Parquet file (``--into FIELD``; :mod:`skalign._stores.fields`,
:mod:`skalign._stores.files.fields`).

The field's rows are written into its overlay beside the file while a step runs; at the step's
end the file is rewritten once (:func:`finish_field`): row group by row group, every column as
it was (the same values, the same row groups, the file's metadata), the field's column added or
replaced (``fixed_size_list<float32>[d]``, ``NULL`` where a row has no value yet, the field
metadata :data:`~skalign._stores.files.fields.OWNED`) and its marks column
``skalign_vector_FIELD``, into a hidden file beside it, fsynced and renamed over it (with the
file's permission bits): a reader sees the old file or the new one. A folder of shards is
refused (:attr:`~skalign._stores.parquet.ParquetFolderEngine.into_refusal`).
"""

from __future__ import annotations

import os

import numpy as np

from ..files.arrow import _is_vector_type, import_pyarrow
from ..files.fields import OWNED, fold, read_sidecar, write_sidecar
from ..journal import fsync_dir
from ..live import field_key
from .live import ParquetLive, _schema, field_state, open_field

__all__ = ["add_field", "drop_field_command", "field_state", "finish_field", "open_field",
           "read_field_stamp", "vector_fields", "write_field_stamp"]


def vector_fields(address):
    """``{column: width}`` of the file's vector columns (``None``: a ragged list type)."""
    pa, _ = import_pyarrow(address.path)
    return {f.name: (f.type.list_size if pa.types.is_fixed_size_list(f.type) else None)
            for f in _schema(address.path) if _is_vector_type(pa, f.type)}


def add_field(address, field, dim, like):
    """Nothing on disk: the column comes with the step's fold; the field's stamp, written
    next, says it is to come."""


def read_field_stamp(address, field):
    return read_sidecar(address.path, field)


def write_field_stamp(address, field, stamp):
    write_sidecar(address.path, field, stamp)


def finish_field(address, field):
    """Fold the field's overlay into the file (one rewrite; see the module docstring), then
    bind the old field's own overlay, where it has one, to the rewritten file."""
    live = open_field(address, field)
    try:
        old = live._base.vector_column()
        fold(live, lambda P, V, M: _rewrite(address.path, field, live.dim, P, V, M))
    finally:
        live.close()
    _rebind_old(address, old)


def _rewrite(path, field, dim, positions, vectors, marks):
    pa, pq = import_pyarrow(path)
    src = pq.ParquetFile(path)
    key = field_key(field)
    old = src.schema_arrow
    names = [n for n in old.names if n not in (field, key)]
    vtype = pa.list_(pa.float32(), dim)
    schema = pa.schema([old.field(n) for n in names]
                       + [pa.field(field, vtype, metadata=OWNED), pa.field(key, pa.string())],
                       metadata=old.metadata)
    order = np.argsort(positions, kind="stable")
    P, V, M = np.asarray(positions)[order], np.asarray(vectors, np.float32)[order], \
        [marks[j] for j in order]
    tmp = path.with_name(f".{path.name}.skalign-field-{field}.tmp")
    tmp.unlink(missing_ok=True)
    at = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression=_compression(src)) as out:
            for g in range(src.num_row_groups):
                t = src.read_row_group(g)
                n = t.num_rows
                if field in t.column_names:
                    have = t.column(field).combine_chunks()
                    valid = np.asarray(have.is_valid())
                    cur = np.zeros((n, dim), np.float32)
                    cur[valid] = np.asarray(have.filter(have.is_valid()).flatten(),
                                            np.float32).reshape(-1, dim)
                    mk = t.column(key).to_pylist() if key in t.column_names else [None] * n
                else:
                    valid, cur, mk = np.zeros(n, bool), np.zeros((n, dim), np.float32), [None] * n
                lo, hi = np.searchsorted(P, [at, at + n])
                cur[P[lo:hi] - at] = V[lo:hi]
                valid = valid.copy()
                valid[P[lo:hi] - at] = True
                for j, m in zip(P[lo:hi] - at, M[lo:hi]):
                    mk[j] = m
                col = pa.FixedSizeListArray.from_arrays(pa.array(cur.reshape(-1)), dim,
                                                        mask=pa.array(~valid))
                t = t.select(names).append_column(schema.field(field), col) \
                    .append_column(schema.field(key), pa.array(mk, pa.string()))
                out.write_table(t.cast(schema), row_group_size=max(n, 1))
                at += n
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _compression(pf):
    """The file's codec (its first column chunk's), so the rewrite stores values alike."""
    try:
        codec = pf.metadata.row_group(0).column(0).compression
    except (IndexError, AttributeError):
        return "snappy"
    return "none" if codec == "UNCOMPRESSED" else codec.lower()


def _rebind_old(address, old):
    """The old field's overlay (a searcher's encoded rows), bound to the rewritten file: the
    rows, their ids and the old column are the same."""
    from ..files.overlay import OVERLAY_SUFFIX, rebinding

    if not address.path.with_name(address.path.name + OVERLAY_SUFFIX).is_dir():
        return
    with rebinding():
        ParquetLive(address, column=old).close()


def drop_field_command(address, field):
    """A pyarrow one-liner writing the file without the column (then moved over it)."""
    path = str(address.path)
    return (f"python -c \"import pyarrow.parquet as pq; t = pq.read_table({path!r}); "
            f"pq.write_table(t.drop_columns([c for c in [{field!r}, "
            f"{field_key(field)!r}] if c in t.column_names]), {path + '.new'!r})\" && mv "
            f"{path + '.new'!r} {path!r}")
