"""A second vector field of a file store (``--into FIELD`` on a Parquet file or a LanceDB table):
what the two share.

A file store's rows cannot be changed one at a time under its readers, so a field is written as
the other live file stores write their encoded rows: into an overlay beside the store
(:mod:`.overlay`), one per field, the folder ``PATH.skalign-live.FIELD``, whose recorded identity
is the store's rows and ids and the field (not its files: they are rewritten when the field
is folded in). At the end of each step the engine folds the overlay into the store in one
atomic write (:func:`fold`: a Parquet file rewritten once with the column, a LanceDB table
updated in one commit), with each row's mark in the column ``skalign_vector_FIELD``; then the
overlay's segments are removed. A kill before the write leaves the overlay (the next step folds
it), after it the same rows in both (folded again, unchanged).

:class:`FieldLive` reads a field: its values in the store (a row without one, ``NULL``, reads as
a zero vector without provenance and is never a search result), the overlay's rows over them.
The field's stamp is a sidecar beside the store, ``PATH.skalign-field.FIELD.json``; a column
skalign folded in carries the field metadata :data:`OWNED` (what says it is skalign's).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

import numpy as np

from ...exceptions import StoreError
from ..journal import fsync_dir, write_durably
from ..live import LiveRows, similarity
from .live import FileLiveStore, ids_digest
from .overlay import OVERLAY_SUFFIX, Overlay

__all__ = ["OWNED", "FieldLive", "column_state", "field_folder", "fold", "open_column_field",
           "owned", "read_sidecar", "sidecar", "write_sidecar"]

#: the Arrow field metadata of a vector column skalign added (``--into``)
OWNED = {b"skalign_field": b"1"}
#: an expected mark no row holds (a compare-and-set that must fail)
_NEVER = "\x00"
#: the largest sidecar read
_MAX_SIDECAR = 1 << 20


def owned(arrow_field):
    """Whether the Arrow field is a vector field skalign added."""
    meta = arrow_field.metadata or {}
    return meta.get(b"skalign_field") == OWNED[b"skalign_field"]


def field_folder(path, field):
    """The overlay folder of the field ``field`` of the store at ``path``."""
    return path.with_name(f"{path.name}{OVERLAY_SUFFIX}.{field}")


def sidecar(path, field):
    """The field's stamp file beside the store."""
    return path.with_name(f"{path.name}.skalign-field.{field}.json")


def read_sidecar(path, field):
    """The field's stamp as parsed (``None``: none); a link is no stamp."""
    try:
        fd = os.open(sidecar(path, field), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"{sidecar(path, field)}: cannot read the field's stamp "
                         f"({exc.strerror}).") from None
    with os.fdopen(fd, "rb") as f:
        text = f.read(_MAX_SIDECAR + 1)
    try:
        stamp = json.loads(text) if len(text) <= _MAX_SIDECAR else None
    except (ValueError, RecursionError):
        stamp = None
    if not isinstance(stamp, dict):
        raise StoreError(f"{sidecar(path, field)}: not a stamp skalign wrote; remove it.")
    return stamp


def write_sidecar(path, field, stamp):
    """Record the field's stamp beside the store (durably, atomically)."""
    write_durably(sidecar(path, field), json.dumps(stamp, sort_keys=True).encode())


def column_state(address, schema, field, holder):
    """The width of the field ``field`` of a store with the Arrow ``schema`` where skalign
    added it (a column it folded in, or a field whose stamp is written and whose first fold is
    to come), ``None`` where the store has no column ``field``; a column of the user's is
    refused (``holder`` names the store in the message: "file", "table")."""
    import pyarrow as pa

    if field in schema.names:
        f = schema.field(field)
        if not owned(f) or not pa.types.is_fixed_size_list(f.type):
            raise StoreError(f"{address.path}: the {holder} already has a column {field!r} "
                             f"({f.type}) that skalign did not add; --into writes a new "
                             "column: choose another name.")
        return int(f.type.list_size)
    stamp = read_sidecar(address.path, field)
    return None if stamp is None else int(stamp.get("d_out") or 0) or None


def open_column_field(address, field, dim, live, values):
    """The field as a :class:`FieldLive` over ``live(old)``, the store opened on its old
    column (the stamp's ``from_field``); ``values(base)`` reads the field's stored values."""
    if dim is None:
        raise StoreError(f"{address.path}: no field {field!r}.")
    stamp = read_sidecar(address.path, field) or {}
    old = stamp.get("from_field") if isinstance(stamp.get("from_field"), str) else None
    base = live(old)
    return FieldLive(base, field, dim, lambda: values(base))


@contextlib.contextmanager
def _overlay_lock(folder):
    """The overlay's own writers' lock (an exclusive ``flock`` on ``.lock``, waited for)."""
    os.makedirs(folder, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def fold(live, write):
    """Fold the overlay of the field ``live`` (a :class:`FieldLive`) into the store:
    ``write(positions, vectors, marks)`` (the overlay's rows; the engine keeps every other
    row's value) makes them the store's own in one atomic write; then the overlay's segments
    are removed. Under the overlay's lock: no write-back falls between."""
    folder = live.overlay.folder
    if not folder.is_dir():
        return 0
    with _overlay_lock(folder):
        state = live.overlay.refresh()
        if len(state.positions):
            write(state.positions, state.vectors, [str(m) for m in state.marks])
        for name in os.listdir(folder):
            if name.startswith("seg-") or name == "base.json":
                (folder / name).unlink()
        fsync_dir(folder)
    return len(state.positions)


class FieldLive(FileLiveStore):
    """The field ``field`` of a file store as a live store (see the module docstring).

    Parameters
    ----------
    base : FileLiveStore
        The store opened on its old field: its ids, texts and metric (closed with this one).
    field : str
        The field.
    dim : int
        Its width.
    values : callable
        ``values()`` -> ``(vectors, filled, marks)``: the field's values in the store, in row
        order (``vectors`` float32 ``(n, dim)``, zeros where ``filled`` is false; ``marks`` each
        row's provenance in the store or ``None``), read once.
    search : callable, default=None
        ``search(queries, k, exclude)`` -> ``(positions, scores)`` per query from the engine's
        own index of the field, rows ``exclude`` (overlay rows) left out; ``None``: an exact
        scan of the values.
    """

    exact = False

    def __init__(self, base, field, dim, values, search=None):
        self._base = base
        self.address, self.path, self.kind = base.address, base.path, base.kind
        self.n_rows, self.dim, self.metric = base.n_rows, int(dim), base.metric
        self._ids, self.text_field, self.column = base._ids, base.text_field, field
        self.id_field = getattr(base, "id_field", None)
        self._values_of, self._search, self._values = values, search, None
        self.overlay = Overlay(self.path, self.dim, {
            "rows": self.n_rows, "dim": self.dim, "ids": ids_digest(self._ids),
            "field": field})
        self.overlay.folder = field_folder(self.path, field)
        self.overlay.refresh()

    def values(self):
        """The field's values in the store (see the class docstring), read once."""
        if self._values is None:
            self._values = self._values_of()
        return self._values

    def text_source(self, text_field=None):
        return self._base.text_source(text_field)

    def _rows(self, positions, text_field):
        V = self.values()[0][positions]
        texts = self._base._row_texts(positions, text_field) if text_field is not None \
            else None
        return V, texts

    def _row_texts(self, positions, text_field):
        return self._base._row_texts(positions, text_field)

    def _index_top_k(self, queries, k):
        """The best rows by the field's values in the store (rows without one left out)."""
        if self._search is not None:
            return self._search(queries, k)
        V, filled, _ = self.values()
        rows = np.flatnonzero(filled)
        S = similarity(queries, V[rows], self.metric)
        out_p, out_s = [], []
        for s in S:
            top = np.argsort(-s, kind="stable")[:k]
            out_p.append(rows[top].astype(np.int64))
            out_s.append(s[top].astype(np.float32))
        return out_p, out_s

    def fetch(self, ids, text_field=None):
        ids = [i.item() if isinstance(i, np.generic) else i for i in ids]
        pos = self._ids.positions(ids, self.address)
        text_field = text_field if text_field is not None else self.text_field
        state = self.overlay.refresh()
        V, _, marks = self.values()
        vectors = np.array(V[pos], dtype=np.float32).reshape(len(pos), self.dim)
        texts = self._base._row_texts(pos, text_field) if len(pos) and text_field is not None \
            else None
        slot = state.lookup(pos)
        hit = slot >= 0
        vectors[hit] = state.vectors[slot[hit]]
        provenance = [str(state.marks[s]) if s >= 0 else marks[p] for s, p in zip(slot, pos)]
        return LiveRows(ids=ids, vectors=vectors, texts=list(texts or [None] * len(pos)),
                        provenance=provenance)

    def _write_back(self, ids, V, marks, expected):
        """Into the field's overlay; compare-and-set against each row's mark as read: the
        overlay's where it holds the row, else the store's (which changes only when a step,
        holding the field's lock, folds the overlay in)."""
        pos = self._ids.positions(ids, self.address)
        if expected is not None:
            slot = self.overlay.refresh().lookup(pos)
            stored = self.values()[2]
            # a row the overlay does not hold: written where its stored mark is the one
            # expected (the overlay then compares its "no mark" with None)
            expected = [e if s >= 0 else (None if e == stored[p] else _NEVER)
                        for e, s, p in zip(expected, slot, pos)]
        return self.overlay.write(pos, V, marks, expected)

    def fetch_marks(self, ids, text_field=None, all_texts=False):
        """:meth:`fetch` without the vectors (width 0), the texts of the rows that carry a
        mark (of every row with ``all_texts``): what reading every row's provenance needs."""
        rows = self.fetch(ids, text_field=None)
        pos = self._ids.positions(rows.ids, self.address)
        field = text_field if text_field is not None else self.text_field
        read = np.arange(len(pos)) if all_texts else np.flatnonzero(
            [p is not None for p in rows.provenance])
        texts = [None] * len(pos)
        if len(read) and field is not None:
            for j, t in zip(read, self._base._row_texts(pos[read], field) or ()):
                texts[j] = t
        return LiveRows(ids=rows.ids, vectors=np.empty((len(pos), 0), np.float32),
                        texts=texts, provenance=rows.provenance)

    def close(self):
        self._base.close()
