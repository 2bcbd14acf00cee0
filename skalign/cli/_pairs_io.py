"""Reading paired embeddings from any two stores: the ``--source``/``--target`` of ``skalign
fit``, ``evaluate`` and ``plan``.

Each side is read whole with its ids:

* a vector database names its rows itself: Chroma's record ids, Qdrant's point ids, the one-column
  primary key of a PostgreSQL table, the ids of a FAISS ``IndexIDMap``;
* a Parquet file or folder, or a LanceDB table, has ids where ``--id-column NAME`` names one of
  its columns;
* anything else (a ``.npy`` array, a FAISS index without ids, a Parquet or LanceDB store without
  ``--id-column``) is in row order.

Two sides with ids are matched by id (an inner join, in the target's order); ids are compared as
text, so the integer ``7`` of one store meets the text ``"7"`` of another. An id that occurs
twice on a side is an error; ids on one side only are left out, with a warning that counts
them. Two sides in row order are paired row for row, and must have as many rows. A side in row
order meets a side with ids only where those ids are exactly its row numbers ``0 … n - 1``
(a Qdrant collection whose point ids are the rows of the ``.npy`` it was loaded from); any other
ids are refused rather than guessed at, since pairing row ``i`` with an unrelated id ``i`` would
fit the map on wrong pairs without a sign.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..exceptions import StoreError

__all__ = ["UnmatchedIdsWarning", "read_pairs"]

#: rows per batch where ids are read with the vectors
_BATCH = 8192


class UnmatchedIdsWarning(UserWarning):
    """Ids of one side of the pairs that the other side does not have: their rows are left
    out (the message counts them on each side and shows one of each)."""


@dataclass
class _Side:
    """One side's vectors, and its ids (``None``: row order) and where they come from."""

    flag: str
    address: object
    vectors: np.ndarray
    ids: list | None
    origin: str


def _shown(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _column_ids(reader, address, id_column, flag):
    vectors, ids = [], []
    for v, rb, _ in reader.batches(65536):
        if id_column not in rb.schema.names:
            raise StoreError(f"{address}: {flag} has no column {id_column!r}; its columns are "
                             f"{', '.join(rb.schema.names)}.")
        vectors.append(v)
        ids.extend(rb.column(rb.schema.get_field_index(id_column)).to_pylist())
    return np.concatenate(vectors), ids


def _read_side(address, column, id_column, flag):
    from .._stores.pipeline.translate import open_reader
    from .._stores.registry import engine

    reader = open_reader(address, column=column)
    if reader.n_rows == 0:
        raise StoreError(f"{address}: {flag} has no rows.")
    if engine(address).ids_in_column and id_column is not None:
        vectors, ids = _column_ids(reader, address, id_column, flag)
        return _Side(flag, address, vectors, ids, f"column {id_column!r}")
    # the store's own ids where it has them (a vector database's, an IndexIDMap's)
    vectors, ids = reader.read_with_ids(_BATCH)
    return _Side(flag, address, vectors, ids,
                 reader.ids_origin if ids is not None else "row order")


def _key(value):
    """An id as the join compares it: as text (a numpy scalar as its Python value)."""
    if isinstance(value, np.generic):
        value = value.item()
    return value if isinstance(value, str) else str(value)


def _positions(side):
    """``{id as text: row}`` of a side; an id twice is an error."""
    where = {}
    for row, ident in enumerate(side.ids):
        key = _key(ident)
        if key in where:
            raise StoreError(f"{side.flag} {side.address}: id {_shown(ident)} ({side.origin}) "
                             f"occurs more than once among its {len(side.ids)} rows; ids must "
                             "be unique.")
        where[key] = row
    return where


def _row_numbers(row_side, id_side):
    """The rows of ``id_side`` in the order of ``row_side``'s rows, where its ids are exactly
    ``row_side``'s row numbers; else an error saying why they are not."""
    n = len(row_side.vectors)
    order = np.full(n, -1, dtype=np.int64)
    for row, ident in enumerate(id_side.ids):
        value = ident.item() if isinstance(ident, np.generic) else ident
        if isinstance(value, str) and value.isdecimal():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n \
                or order[value] >= 0:
            why = f"id {_shown(ident)} is not one of the row numbers 0 to {n - 1}"
            break
        order[value] = row
    else:
        if len(id_side.ids) == n:
            return order
        why = f"it has {len(id_side.ids)} ids for {n} rows"
    raise StoreError(
        f"{row_side.flag} {row_side.address} is in row order but {id_side.flag} "
        f"{id_side.address} is matched by its {id_side.origin}, and they do not align ({why}); "
        f"give {row_side.flag} ids too (a Parquet/LanceDB store with --id-column, or a vector "
        "database).")


def _join(src, tgt, min_pairs, need):
    """Rows of ``src`` and ``tgt`` with the same id, in ``tgt``'s order."""
    where = _positions(src)
    tgt_where = _positions(tgt)
    rows_src, rows_tgt = [], []
    for row, ident in enumerate(tgt.ids):
        at = where.get(_key(ident))
        if at is not None:
            rows_src.append(at)
            rows_tgt.append(row)
    common = len(rows_tgt)
    only_tgt, only_src = len(tgt.ids) - common, len(src.ids) - common
    if common < min_pairs:
        example = ""
        if common == 0:
            example = (f" (e.g. {src.flag} id {_shown(src.ids[0])} and {tgt.flag} id "
                       f"{_shown(tgt.ids[0])}; check --id-column)")
        raise StoreError(f"{src.flag} {src.address} and {tgt.flag} {tgt.address} share {common} "
                         f"id{'s' if common != 1 else ''} ({len(src.ids)} in {src.flag} by its "
                         f"{src.origin}, {len(tgt.ids)} in {tgt.flag} by its {tgt.origin})"
                         f"{example}; {need} needs at least {min_pairs} pairs.")
    if only_tgt or only_src:
        missing_src = next((_shown(i) for i in tgt.ids if _key(i) not in where), None)
        missing_tgt = next((_shown(i) for i in src.ids if _key(i) not in tgt_where), None)
        parts = []
        if only_tgt:
            parts.append(f"{only_tgt} id{'s' if only_tgt != 1 else ''} of {tgt.flag} "
                         f"(e.g. {missing_src}) {'are' if only_tgt != 1 else 'is'} not in "
                         f"{src.flag}")
        if only_src:
            parts.append(f"{only_src} id{'s' if only_src != 1 else ''} of {src.flag} "
                         f"(e.g. {missing_tgt}) {'are' if only_src != 1 else 'is'} not in "
                         f"{tgt.flag}")
        warnings.warn(f"{' and '.join(parts)}; using the {common} pairs whose id is in both "
                      f"({src.flag} {src.address}, {tgt.flag} {tgt.address}).",
                      UnmatchedIdsWarning, stacklevel=3)
    return src.vectors[rows_src], tgt.vectors[rows_tgt]


def read_pairs(source, target, *, id_column=None, source_column=None, target_column=None,
               min_pairs=1, need="the command"):
    """The paired sample of two stores: ``(X, Y)``, row ``i`` of both the same item.

    Parameters
    ----------
    source, target : str, path-like or Address
        Any store address (old and new encoder's embeddings).
    id_column : str, default=None
        The id column of a Parquet/LanceDB side; vector databases and FAISS ``IndexIDMap``
        indexes use their own ids whatever it is.
    source_column, target_column : str, default=None
        The vector column of each side (tables), or the named vector (Qdrant).
    min_pairs : int, default=1
        Fewer matched pairs than this is an error that names the counts.
    need : str, default="the command"
        What needs the pairs, in that error.

    Returns
    -------
    X, Y : ndarray of shape (n_pairs, d_source), (n_pairs, d_target)
        In the order of ``target`` where ids match the sides, else in row order.

    Raises
    ------
    StoreError
        A side without rows, a duplicate id, too few pairs, sides in row order with different
        row counts, a side in row order against ids that are not its row numbers, or an
        ``id_column`` that neither side can use.
    """
    from .._stores.address import parse_address
    from .._stores.registry import engine

    source, target = parse_address(source), parse_address(target)
    if id_column is not None and not engine(source).ids_in_column \
            and not engine(target).ids_in_column:
        raise StoreError(f"--id-column {id_column!r} needs a Parquet or LanceDB --source or "
                         f"--target (a .npy array has no id column, and vector databases use "
                         f"their own ids); {source} and {target} are neither.")
    src = _read_side(source, source_column, id_column, "--source")
    tgt = _read_side(target, target_column, id_column, "--target")
    if src.ids is None and tgt.ids is None:
        if len(src.vectors) != len(tgt.vectors):
            raise StoreError(f"--source {source} has {len(src.vectors)} rows but --target "
                             f"{target} has {len(tgt.vectors)}; row i of both must embed the "
                             "same item (or give ids: --id-column, or vector databases).")
        X, Y = src.vectors, tgt.vectors
    elif src.ids is None:
        X, Y = src.vectors, tgt.vectors[_row_numbers(src, tgt)]
    elif tgt.ids is None:
        X, Y = src.vectors[_row_numbers(tgt, src)], tgt.vectors
    else:
        return _join(src, tgt, min_pairs, need)
    if len(X) < min_pairs:
        raise StoreError(f"--source {source} and --target {target} hold {len(X)} pairs; {need} "
                         f"needs at least {min_pairs}.")
    return X, Y
