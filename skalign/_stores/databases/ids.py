"""Every row id of a database store as one ``int64`` array, read a page at a time.

A database engine's :meth:`~skalign._stores.live.LiveStore.ids` is a list: one Python object
per row, about 36 bytes an integer id with its pointer against 8 in an ``int64`` array (3.6 GB
against 0.8 GB at :math:`10^8` rows). The engines' ``id_array`` read the same statement or
scroll as their ``ids`` a page at a time into :func:`id_array`, which keeps integer ids as one
array and falls back to the list where an id is not an integer that fits ``int64`` (text, a
UUID, an integer beyond :math:`2^{63} - 1`): then the list ``ids`` would have returned, of the
same Python values.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["first_at", "id_array", "id_list", "ids_at"]


def _int_page(page):
    """``page`` (a list of ids as the engine's client gave them: ``int`` or ``str``) as an
    ``int64`` array, or ``None`` where an id is not an integer that fits ``int64`` (numpy
    infers a text, unsigned, float or object dtype for such a list: the page is refused as
    a whole)."""
    try:
        a = np.array(page)
    except (OverflowError, TypeError, ValueError):
        return None
    return a.astype(np.int64, copy=False) if a.dtype.kind == "i" else None


def id_array(pages, rows=0):
    """The ids of ``pages`` (an iterable of lists of ids, read once, in the store's order),
    as one ``int64`` array where every id is an integer that fits it, else as one list.

    Parameters
    ----------
    pages : iterable of list
        The ids, a page at a time, as the engine's client returns them.
    rows : int, default=0
        The rows expected (the store's count when opened): the array is made that long at
        once and grown (doubled) only where more come, so that it is not copied from pages
        at the end (twice its size at once).

    Returns
    -------
    ndarray of int64 or list
        A list (of the pages' own values, the integers read before the first other id given
        back as ``int``) as soon as one id is not an ``int64`` integer.
    """
    out, n, listed = np.empty(max(int(rows), 0), np.int64), 0, None
    for page in pages:
        if not len(page):  # numpy reads no value as float64
            continue
        if listed is None:
            a = _int_page(page)
            if a is not None:
                if n + len(a) > len(out):
                    grown = np.empty(max(2 * len(out), n + len(a)), np.int64)
                    grown[:n] = out[:n]
                    out = grown
                out[n:n + len(a)] = a
                n += len(a)
                continue
            listed, out = out[:n].tolist(), None
        listed.extend(page)
    if listed is not None:
        return listed
    return out[:n] if n == len(out) or 2 * n > len(out) else out[:n].copy()


def id_list(ids):
    """Ids as the engines' clients take them, a list of Python values: an ``int64`` array's
    (:func:`id_array`, a file store's) as ``int``, a list as it is."""
    return ids.tolist() if isinstance(ids, np.ndarray) else ids


def ids_at(ids, positions):
    """The ids at ``positions`` of ``ids`` (an array or a list, as :func:`id_array` gives
    them) as a list of Python values (:func:`id_list`)."""
    if isinstance(ids, np.ndarray):
        return ids[np.asarray(positions, dtype=np.int64)].tolist()
    return [ids[i] for i in positions]


def first_at(rows, positions):
    """The first value of the rows at ``positions`` (increasing) of the iterator ``rows`` (a
    cursor's rows in the store's order), read once up to the last position, the rows between
    stepped over in C (``itertools.islice``): the ids at those positions of an ``ids()``
    scan, without holding the others."""
    out, last = [], -1
    for p in positions:
        out.append(next(itertools.islice(rows, p - last - 1, None))[0])
        last = p
    return out
