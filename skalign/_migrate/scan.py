"""What ``skalign migrate --continue`` reads of every row of its output, kept compact.

A step reads each row's id and provenance once, at its start (the compare-and-set of every
write is against that read), and each row's state against its current text. Nothing here
holds a Python object per row of a store that has none to hold: ids are one numpy array where
the store gives one (:meth:`~skalign._stores.files.live.FileLiveStore.id_array`; a database
store's integer keys, :mod:`skalign._stores.databases.ids`), the
provenance is one ``int32`` code per row into a table of the distinct values (a store of
``n`` rows of which ``m`` are encoded holds ``4 n`` bytes and ``m`` marks), the states are
one ``int8`` per row, and texts are read only for the rows that carry a mark (to check it)
and, later, for the rows a step encodes (:func:`texts_of`). Reads go in batches of
:data:`BATCH` rows, through the store's reader without vectors where it has one
(:meth:`~skalign._stores.files.live.FileLiveStore.fetch_marks`).
"""

from __future__ import annotations

import numpy as np

from .._stores.databases.ids import id_list, ids_at
from ..exceptions import StoreError

__all__ = ["BATCH", "ENCODED", "STALE", "TRANSLATED", "Provenance", "ScanRows", "all_ids",
           "cached_positions", "id_list", "ids_at", "same_ids", "scan_rows", "texts_of",
           "texts_or_refuse"]

#: rows per read
BATCH = 2048
#: a row's state, one ``int8`` per row (:func:`skalign._stores.live.mark_state`)
TRANSLATED, STALE, ENCODED = 0, 1, 2
_STATE = {"translated": TRANSLATED, "stale": STALE, "encoded": ENCODED}


def all_ids(store):
    """Every row's id in the store's order: one ``int64`` numpy array where the store gives
    one (a file store; a database store whose ids are integers, read a page at a time:
    :mod:`skalign._stores.databases.ids`), else the store's list
    (:meth:`~skalign._stores.live.LiveStore.id_array`)."""
    return store.id_array()


def positions_of(ids, wanted):
    """The positions in ``ids`` (as :func:`all_ids` gives them) of the ids ``wanted``, each
    held once by ``ids``: for an ``int64`` array by a sorted search (no Python object per
    row of the store), for a list by a dictionary of its ids. An id ``ids`` does not hold
    raises :class:`KeyError`."""
    if isinstance(ids, np.ndarray) and ids.dtype.kind == "i":
        order = np.argsort(ids, kind="stable")
        q = np.asarray(wanted, dtype=ids.dtype)
        at = np.searchsorted(ids, q, sorter=order).clip(0, max(len(ids) - 1, 0))
        found = order[at] if len(ids) else at
        bad = np.flatnonzero(ids[found] != q) if len(ids) else np.arange(len(q))
        if len(bad):
            raise KeyError(wanted[bad[0]])
        return found.astype(np.int64)
    where = {key: i for i, key in enumerate(id_list(ids))}
    return np.array([where[key] for key in wanted], dtype=np.int64)


def same_ids(a, b):
    """Whether the id sequences ``a`` and ``b`` hold the same ids (in any order)."""
    if len(a) != len(b):
        return False
    try:
        sa, sb = np.sort(np.asarray(a)), np.sort(np.asarray(b))
        if sa.dtype != object and sb.dtype != object:
            return bool(np.array_equal(sa, sb))
    except TypeError:  # ids of mixed types: compared as sets
        pass
    return set(id_list(a)) == set(id_list(b))


class Provenance:
    """Each row's provenance value (``None``: none), as an ``int32`` code per row into the
    table of distinct values; indexing gives the value."""

    def __init__(self, n):
        self.codes = np.full(n, -1, dtype=np.int32)
        self.values, self._code = [], {}

    def set(self, lo, values):
        """Record ``values`` as the provenance of rows ``lo, lo + 1, ...``."""
        for j, v in enumerate(values):
            if v is None:
                continue
            code = self._code.get(v)
            if code is None:
                code = self._code[v] = len(self.values)
                self.values.append(v)
            self.codes[lo + j] = code

    def __len__(self):
        return len(self.codes)

    def __getitem__(self, i):
        code = self.codes[i]
        return None if code < 0 else self.values[code]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class ScanRows:
    """The output's rows as a ``--continue`` step read them.

    Attributes
    ----------
    ids : ndarray or list
        Every row's id, in the output's order.
    provenance : Provenance
        Each row's provenance value when read.
    state : ndarray of int8
        Each row's state against its text when read, for any encoder (:data:`ENCODED`,
        :data:`STALE` or :data:`TRANSLATED`).
    """

    def __init__(self, ids, provenance, state):
        self.ids, self.provenance, self.state = ids, provenance, state

    def states(self, fingerprint):
        """Each row's state for the encoder ``fingerprint``: a row encoded by another encoder
        is :data:`STALE` (its vector is not this encoder's output)."""
        from .._stores.live import parse_mark

        out = self.state.copy()
        for i in np.flatnonzero(out == ENCODED):
            if parse_mark(self.provenance[i]).fingerprint != fingerprint:
                out[i] = STALE
        return out


def _reader(store):
    """``store``'s read of rows by id without their vectors where it has one."""
    return getattr(store, "fetch_marks", store.fetch)


def scan_rows(store, ids, text_field, field):
    """Read every row's provenance from ``store`` (rows ``ids``, texts from ``text_field``,
    which marks name ``field``) and its state: a :class:`ScanRows`."""
    from .._stores.live import mark_state

    n = len(ids)
    prov, state, read = Provenance(n), np.zeros(n, dtype=np.int8), _reader(store)
    for lo in range(0, n, BATCH):
        rows = read(id_list(ids[lo:lo + BATCH]), text_field=text_field)
        prov.set(lo, rows.provenance)
        for j, (p, t) in enumerate(zip(rows.provenance, rows.texts)):
            if p is not None:
                state[lo + j] = _STATE[mark_state(p, None, field, t)]
    return ScanRows(ids, prov, state)


def texts_of(store, ids, text_field):
    """The texts of the rows ``ids`` of ``store`` (read in batches, without vectors)."""
    out, read = [], getattr(store, "fetch_marks", None)
    for lo in range(0, len(ids), BATCH):
        part = id_list(ids[lo:lo + BATCH])
        rows = store.fetch(part, text_field=text_field) if read is None else \
            read(part, text_field=text_field, all_texts=True)
        out.extend(rows.texts)
    return out


def texts_or_refuse(ids, texts, store, text_field):
    """``texts`` as a list, refused with one line where a row has none (the text field named,
    or the default one)."""
    missing = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if missing:
        where = f"field {text_field!r}" if text_field else "the default text field"
        raise StoreError(
            f"{len(missing)} of the {len(ids)} rows chosen in {store} have no text in "
            f"{where} (first: id {ids[missing[0]]!r}); name the field that holds the "
            "texts with --text-field")
    return list(texts)


def cached_positions(encoder, store, ids, text_field, exclude):
    """Positions of the rows whose current text the encode cache holds a vector of for
    ``encoder``, less ``exclude`` (:func:`~skalign._migrate.calibration.cached_rows`, read a
    batch at a time)."""
    from .calibration import cached_rows

    exclude = np.asarray(exclude, dtype=np.int64)
    found = []
    for lo in range(0, len(ids), BATCH):
        texts = texts_of(store, ids[lo:lo + BATCH], text_field)
        skip = exclude[(exclude >= lo) & (exclude < lo + len(texts))] - lo
        found.append(cached_rows(encoder, texts, skip) + lo)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

