"""Reading the paired sample of ``skalign plan``: two row-aligned stores, or an id column."""

from __future__ import annotations

import numpy as np

__all__ = ["read_pairs"]


def _read(path, column, flag, id_column=None):
    from ._stores.pipeline import open_reader
    from .exceptions import StoreError

    reader = open_reader(path, column=column)
    if reader.n_rows == 0:
        raise StoreError(f"{path}: {flag} has no rows.")
    if id_column is None:
        return reader.read_all(), None
    if reader.kind not in ("parquet", "lance"):
        raise StoreError(f"{path}: --id-column needs a Parquet or LanceDB {flag} (a .npy array "
                         "has no id column); pass row-aligned stores instead.")
    vectors, ids = [], []
    for v, rb, _ in reader.batches(65536):
        if id_column not in rb.schema.names:
            raise StoreError(f"{path}: {flag} has no column {id_column!r}; its columns are "
                             f"{', '.join(rb.schema.names)}.")
        vectors.append(v)
        ids.extend(rb.column(rb.schema.get_field_index(id_column)).to_pylist())
    return np.concatenate(vectors), ids


def read_pairs(source, target, *, id_column=None, source_column=None, target_column=None):
    """The paired sample: ``(X, Y)`` row for row.

    Without ``id_column`` row ``i`` of both stores is the same item and the row counts must
    agree. With it, every row of ``target`` is looked up in ``source`` by that column; an id of
    ``target`` missing from ``source`` (or repeated in ``source``) is an error that names it.

    Parameters
    ----------
    source, target : str or path-like
        Stores readable by :mod:`skalign.io` (old and new encoder).
    id_column : str, default=None
        Column holding the item id in both stores (Parquet or LanceDB).
    source_column, target_column : str, default=None
        Vector columns.

    Returns
    -------
    X, Y : ndarray
    """
    from .exceptions import StoreError

    X, xid = _read(source, source_column, "--source", id_column)
    Y, yid = _read(target, target_column, "--target", id_column)
    if id_column is None:
        if len(X) != len(Y):
            raise StoreError(f"--source {source} has {len(X)} rows but --target {target} has "
                             f"{len(Y)}; row i of both must embed the same item (or pass "
                             "--id-column).")
        return X, Y
    where = {}
    for i, key in enumerate(xid):
        if key in where:
            raise StoreError(f"--source {source}: id {key!r} occurs more than once in column "
                             f"{id_column!r}; ids must be unique.")
        where[key] = i
    missing = [key for key in yid if key not in where]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise StoreError(f"--target {target}: id {missing[0]!r}{more} of column {id_column!r} "
                         f"is missing from --source {source}.")
    return X[[where[key] for key in yid]], Y
