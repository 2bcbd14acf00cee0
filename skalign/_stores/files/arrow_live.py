"""What the live Arrow stores (Parquet, LanceDB) share: the id and text columns."""

from __future__ import annotations

import numpy as np

from ...exceptions import StoreError
from .live import IdIndex, RowNumbers

__all__ = ["id_index", "text_column"]


def id_index(schema, id_field, n_rows, read_column, where):
    """The store's ids: the column ``id_field`` (default ``"id"`` where there is one, else row
    numbers); ``read_column(name)`` reads a whole column as a pyarrow array, or gives it as an
    iterable of arrays (a row group at a time: integer ids are then copied into one array as
    they come, never held twice)."""
    if id_field is None:
        if "id" not in schema.names:
            return RowNumbers(n_rows), None
        id_field = "id"
    if id_field not in schema.names:
        raise StoreError(f"{where}: no id column {id_field!r} (columns: "
                         f"{', '.join(schema.names)}); pass one with --id-field.")
    pieces = read_column(id_field)
    if hasattr(pieces, "null_count"):
        pieces = [pieces]
    out, parts, at = None, [], 0
    for piece in pieces:
        if piece.null_count:
            raise StoreError(f"{where}: id column {id_field!r} has missing (null) ids.")
        values = piece.to_numpy(zero_copy_only=False)
        if out is None and not parts and values.dtype.kind in "iu":
            out = np.empty(n_rows, dtype=values.dtype)
        if out is not None and values.dtype == out.dtype and at + len(values) <= n_rows:
            out[at:at + len(values)] = values
        else:
            if out is not None:  # another dtype after the first piece: joined as numpy joins
                parts, out = [out[:at]], None
            parts.append(values)
        at += len(values)
    if out is not None:
        ids = out[:at]
    else:
        ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    return IdIndex(ids, where, id_field), id_field


def _is_text(pa, t):
    """Whether values of the Arrow type ``t`` are strings (dictionary-encoded ones too)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    view = getattr(pa.types, "is_string_view", None)  # pyarrow 16 and later
    return pa.types.is_string(t) or pa.types.is_large_string(t) or bool(view and view(t))


def text_column(pa, schema, text_field, where):
    """Check that ``text_field`` is a string column of ``schema``: a column of another type
    (numbers, vectors, structs) is refused by its name and type."""
    if text_field not in schema.names:
        raise StoreError(f"{where}: no text column {text_field!r} (columns: "
                         f"{', '.join(schema.names)}); pass it with --text-field.")
    t = schema.field(text_field).type
    if not _is_text(pa, t):
        raise StoreError(f"{where}: column {text_field!r} holds {t}, not text; a row's text "
                         "must be a string column: name one with --text-field.")
    return text_field
